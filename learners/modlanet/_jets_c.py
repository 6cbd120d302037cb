r"""C helpers of the ModLaNet lowering (:mod:`learners.modlanet.lowering`): second-order jets.

A jet in ``m`` directions is the array ``(f, \nabla f (m), \nabla^2 f (m x m, row-major))`` of a scalar
function of ``m`` variables at a point, ``JS(m) = 1 + m + m^2`` numbers. Linear maps act on every
component; a smooth scalar function :math:`\phi` of a jet ``a`` gives
:math:`(\phi(a), \phi'(a)\nabla a, \phi'(a)\nabla^2 a + \phi''(a)\nabla a\nabla a^\top)`; a product
:math:`ab` gives :math:`(ab, a\nabla b + b\nabla a, a\nabla^2b + b\nabla^2a + \nabla a\nabla b^\top + \nabla b\nabla a^\top)`.
Kept as a Python string (fixed code; sizes and offsets are arguments), inserted before the generated
``lag_derivs`` of a model."""

SOURCE = r"""
#define JS(m) (1 + (m) + (m) * (m))

/* f[0..3]: the activation and its first three derivatives at z (0: tanh, 1: softplus as torch computes
   it, linear above the threshold 20) */
static void act_derivs(int act, double z, double *f) {
    if (act == 0) {
        const double y = tanh(z), s = 1.0 - y * y;
        f[0] = y; f[1] = s; f[2] = -2.0 * y * s; f[3] = -2.0 * s * s + 4.0 * y * y * s;
    } else if (z > 20.0) {
        f[0] = z; f[1] = 1.0; f[2] = 0.0; f[3] = 0.0;
    } else {
        const double p = 1.0 / (1.0 + exp(-z));
        f[0] = log1p(exp(z)); f[1] = p; f[2] = p * (1.0 - p); f[3] = f[2] * (1.0 - 2.0 * p);
    }
}

/* out = phi(a) with phi(a) = f0, phi' = f1, phi'' = f2 (out may be a) */
static void jet_apply(int m, const double *a, double f0, double f1, double f2, double *out) {
    const double *ag = a + 1;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < m; j++) out[1 + m + i * m + j] = f1 * a[1 + m + i * m + j] + f2 * ag[i] * ag[j];
    for (int i = 0; i < m; i++) out[1 + i] = f1 * ag[i];
    out[0] = f0;
}

/* out = a b (out distinct from a and b) */
static void jet_mul(int m, const double *a, const double *b, double *out) {
    out[0] = a[0] * b[0];
    for (int i = 0; i < m; i++) out[1 + i] = a[0] * b[1 + i] + b[0] * a[1 + i];
    for (int i = 0; i < m; i++)
        for (int j = 0; j < m; j++)
            out[1 + m + i * m + j] = a[0] * b[1 + m + i * m + j] + b[0] * a[1 + m + i * m + j]
                                     + a[1 + i] * b[1 + j] + b[1 + i] * a[1 + j];
}

/* out = c a */
static void jet_scale(int m, double c, const double *a, double *out) {
    for (int i = 0; i < JS(m); i++) out[i] = c * a[i];
}

/* nout jets out_o = sum_i W[o, i] in_i + bias[o] (bias NULL: none), W row-major (nout, nin) */
static void jet_lin(int m, int nin, int nout, const double *W, const double *bias, const double *in, double *out) {
    const int S = JS(m);
    for (int o = 0; o < nout; o++) {
        double *y = out + (long)o * S;
        for (int k = 0; k < S; k++) y[k] = 0.0;
        for (int i = 0; i < nin; i++) {
            const double w = W[o * nin + i], *x = in + (long)i * S;
            for (int k = 0; k < S; k++) y[k] += w * x[k];
        }
        if (bias) y[0] += bias[o];
    }
}

/* the variable `dir` of m as a jet with value v */
static void jet_seed(int m, double v, int dir, double *out) {
    for (int k = 0; k < JS(m); k++) out[k] = 0.0;
    out[0] = v;
    out[1 + dir] = 1.0;
}

/* activation of w jets in place; if s is given, s_o = act'(z_o) as jets too (needs act''') */
static void jet_act(int m, int act, int w, double *z, double *s) {
    const int S = JS(m);
    for (int o = 0; o < w; o++) {
        double f[4], *zo = z + (long)o * S;
        act_derivs(act, zo[0], f);
        if (s) jet_apply(m, zo, f[1], f[2], f[3], s + (long)o * S);
        jet_apply(m, zo, f[0], f[1], f[2], zo);
    }
}

/* an MLP on jets: nlin linear layers of sizes dims[0] -> ... -> dims[nlin], parameters at w (per layer
   W (row-major) then the bias); t0, t1: work arrays of (max width) jets */
static void mlp_jets(int m, int nlin, const int *dims, const double *w, int act, const double *in, double *out,
                     double *t0, double *t1) {
    const double *cur = in;
    for (int k = 0; k < nlin; k++) {
        const int a = dims[k], b = dims[k + 1];
        double *dst = k == nlin - 1 ? out : (k % 2 ? t1 : t0);
        jet_lin(m, a, b, w, w + a * b, cur, dst);
        w += a * b + b;
        if (k < nlin - 1) jet_act(m, act, b, dst, NULL);
        cur = dst;
    }
}

/* a scalar MLP (dims[nlin] = 1) on jets, as mlp_jets but cheaper: full jets up to the last hidden layer's
   input h, then only values and gradients of its pre-activations z = W h + b; the Hessian
   sum_o w_o (act'(z_o) W_o . hess h + act''(z_o) grad z_o grad z_o^T) is formed with the adjoint
   beta = W^T (w * act'(z)) (reverse mode over the last layer). WT: that layer's W transposed (a x b), so
   that the products run over contiguous rows (the same sums, in the same order) */
static void mlp_scalar_jets(int m, int nlin, const int *dims, const double *w, const double *WT, int act,
                            const double *in, double *out, double *t0, double *t1) {
    const int S = JS(m);
    const double *cur = in;
    for (int k = 0; k < nlin - 2; k++) {
        const int a = dims[k], b = dims[k + 1];
        double *dst = k % 2 ? t1 : t0;
        jet_lin(m, a, b, w, w + a * b, cur, dst);
        w += a * b + b;
        jet_act(m, act, b, dst, NULL);
        cur = dst;
    }
    const int a = dims[nlin - 2], b = dims[nlin - 1];
    const double *W = w, *bias = w + a * b, *wo = bias + b, *bo = wo + b;
    double Z[(1 + m) * b], beta[b], bi[a], *oH = out + 1 + m;
    for (int k = 0; k < (1 + m) * b; k++) Z[k] = 0.0;
    for (int i = 0; i < a; i++) {
        const double *wt = WT + (long)i * b, *x = cur + (long)i * S;
        for (int k = 0; k <= m; k++) {
            const double xk = x[k];
            double *zk = Z + k * b;
            for (int o = 0; o < b; o++) zk[o] += wt[o] * xk;
        }
    }
    for (int k = 0; k < S; k++) out[k] = 0.0;
    for (int o = 0; o < b; o++) {
        double f[4];
        Z[o] += bias[o];
        act_derivs(act, Z[o], f);
        const double c1 = wo[o] * f[1], c2 = wo[o] * f[2];
        out[0] += wo[o] * f[0];
        for (int j = 0; j < m; j++) {
            const double zj = Z[(1 + j) * b + o];
            out[1 + j] += c1 * zj;
            for (int l = 0; l < m; l++) oH[j * m + l] += c2 * zj * Z[(1 + l) * b + o];
        }
        beta[o] = c1;
    }
    for (int i = 0; i < a; i++) bi[i] = 0.0;
    for (int o = 0; o < b; o++) {
        const double *wr = W + (long)o * a, bo_ = beta[o];
        for (int i = 0; i < a; i++) bi[i] += wr[i] * bo_;
    }
    for (int i = 0; i < a; i++) {
        const double *x = cur + (long)i * S + 1 + m;
        for (int k = 0; k < m * m; k++) oH[k] += bi[i] * x[k];
    }
    out[0] += bo[0];
}

/* (MLP(z), J_MLP(z) dz) on jets, as MLP.tangent: dz -> W dz, then act'(z) * dz at hidden layers.
   z0, z1, d0, d1, s: work arrays of (max width) jets; tmp: one jet */
static void mlp_tangent_jets(int m, int nlin, const int *dims, const double *w, int act, const double *z, const double *dz,
                             double *zout, double *dzout, double *z0, double *z1, double *d0, double *d1, double *s,
                             double *tmp) {
    const int S = JS(m);
    for (int k = 0; k < nlin; k++) {
        const int a = dims[k], b = dims[k + 1], last = k == nlin - 1;
        double *zz = last ? zout : (k % 2 ? z1 : z0), *dd = last ? dzout : (k % 2 ? d1 : d0);
        jet_lin(m, a, b, w, w + a * b, z, zz);
        jet_lin(m, a, b, w, NULL, dz, dd);
        w += a * b + b;
        if (!last) {
            jet_act(m, act, b, zz, s);
            for (int o = 0; o < b; o++) {
                jet_mul(m, s + (long)o * S, dd + (long)o * S, tmp);
                for (int k2 = 0; k2 < S; k2++) dd[(long)o * S + k2] = tmp[k2];
            }
        }
        z = zz;
        dz = dd;
    }
}

/* out (a jet in D directions) += c u(X): u a jet in nin directions (the function's own inputs), X the
   nin D-jets of those inputs (chain rule) */
static void jet_compose_add(int D, int nin, const double *u, const double *X, double c, double *out) {
    const int SD = JS(D);
    double *og = out + 1, *oH = out + 1 + D;
    out[0] += c * u[0];
    for (int a = 0; a < nin; a++) {
        const double ua = c * u[1 + a], *xa = X + (long)a * SD;
        for (int i = 0; i < D; i++) og[i] += ua * xa[1 + i];
        for (int i = 0; i < D * D; i++) oH[i] += ua * xa[1 + D + i];
        for (int b = 0; b < nin; b++) {
            const double uab = c * u[1 + nin + a * nin + b], *xb = X + (long)b * SD;
            for (int i = 0; i < D; i++)
                for (int j = 0; j < D; j++) oH[i * D + j] += uab * xa[1 + i] * xb[1 + j];
        }
    }
}

/* a jet in m local directions -> a D-jet (local direction a is global index gi[a]); plus `add` if given */
static void jet_embed(int m, const int *gi, const double *a, int D, const double *add, double *out) {
    const int SD = JS(D);
    for (int k = 0; k < SD; k++) out[k] = add ? add[k] : 0.0;
    out[0] += a[0];
    for (int i = 0; i < m; i++) {
        out[1 + gi[i]] += a[1 + i];
        for (int j = 0; j < m; j++) out[1 + D + gi[i] * D + gi[j]] += a[1 + m + i * m + j];
    }
}

/* u = |y|^2/2 as a jet in the d components of y, y_c = X[c * SD] (the values of d D-jets) */
static void half_square_jet(int d, const double *X, int SD, double *u) {
    u[0] = 0.0;
    for (int c = 0; c < d; c++) {
        u[0] += X[(long)c * SD] * X[(long)c * SD];
        u[1 + c] = X[(long)c * SD];
        for (int e = 0; e < d; e++) u[1 + d + c * d + e] = c == e ? 1.0 : 0.0;
    }
    u[0] *= 0.5;
}

/* u = (f(xi, xj) + f(xj, xi))/2 as a jet in (xi, xj), from ua = f at (xi, xj) and ub = f at (xj, xi) (2d directions) */
static void pair_symmetrise(int d, const double *ua, const double *ub, double *u) {
    const int m = 2 * d;
    u[0] = 0.5 * (ua[0] + ub[0]);
    for (int a = 0; a < m; a++) {
        const int pa = (a + d) % m;
        u[1 + a] = 0.5 * (ua[1 + a] + ub[1 + pa]);
        for (int b = 0; b < m; b++) u[1 + m + a * m + b] = 0.5 * (ua[1 + m + a * m + b] + ub[1 + m + pa * m + (b + d) % m]);
    }
}

/* seeds: the values y_c = X[c * SD] (d of them), then (if X2) y2_c, as jets in their own m directions */
static void seed_inputs(int m, int d, const double *X, const double *X2, int SD, double *in) {
    for (int c = 0; c < d; c++) jet_seed(m, X[(long)c * SD], c, in + (long)c * JS(m));
    if (X2)
        for (int c = 0; c < d; c++) jet_seed(m, X2[(long)c * SD], d + c, in + (long)(d + c) * JS(m));
}

/* AngleOnRod in the local directions (theta, omega): offset l (sin, -cos), velocity (l omega) (cos, sin) */
static void rod_jets(double th, double om, double l, double *lo, double *ldo) {
    double t[JS(2)], w[JS(2)], s[JS(2)], c[JS(2)];
    const double sn = sin(th), cs = cos(th);
    jet_seed(2, th, 0, t);
    jet_seed(2, om, 1, w);
    jet_apply(2, t, sn, cs, -sn, s);
    jet_apply(2, t, cs, -sn, -cs, c);
    jet_scale(2, l, s, lo);
    jet_scale(2, -l, c, lo + JS(2));
    jet_scale(2, l, w, t);
    jet_mul(2, t, c, ldo);
    jet_mul(2, t, s, ldo + JS(2));
}

/* periodic features of the angle q_c (direction c; its velocity direction k + c): lz gets cos q at c and
   sin q at k + c, ldz their time derivatives -sin q qdot, cos q qdot (jets in m = 2k directions) */
static void angle_features(int m, double q, double qd, int c, int k, double *lz, double *ldz) {
    const int S = JS(m);
    double t[JS(m)], w[JS(m)], ms[JS(m)];
    const double sn = sin(q), cs = cos(q);
    jet_seed(m, q, c, t);
    jet_seed(m, qd, k + c, w);
    jet_apply(m, t, cs, -sn, -cs, lz + (long)c * S);
    jet_apply(m, t, sn, cs, -sn, lz + (long)(k + c) * S);
    jet_apply(m, t, -sn, -cs, sn, ms);
    jet_mul(m, ms, w, ldz + (long)c * S);
    jet_mul(m, lz + (long)c * S, w, ldz + (long)(k + c) * S);
}

/* U = -G/|xi - xj| as a jet in the 2d inputs (xi, xj); xi_c = xi[c * SD] */
static void newton_pair_jet(int d, double G, const double *xi, const double *xj, int SD, double *u) {
    const int m = 2 * d;
    double dl[8], r2 = 0.0;
    for (int c = 0; c < d; c++) {
        dl[c] = xi[(long)c * SD] - xj[(long)c * SD];
        r2 += dl[c] * dl[c];
    }
    const double r = sqrt(r2), r3 = r2 * r, r5 = r3 * r2;
    u[0] = -G / r;
    for (int c = 0; c < d; c++) {
        u[1 + c] = G * dl[c] / r3;
        u[1 + d + c] = -u[1 + c];
    }
    for (int a = 0; a < d; a++)
        for (int b = 0; b < d; b++) {
            const double h = G * ((a == b ? 1.0 : 0.0) / r3 - 3.0 * dl[a] * dl[b] / r5);
            u[1 + m + a * m + b] = h;
            u[1 + m + (a + d) * m + (b + d)] = h;
            u[1 + m + a * m + (b + d)] = -h;
            u[1 + m + (a + d) * m + b] = -h;
        }
}
"""

r"""C helpers of a ModLaNet's Taylor form (:mod:`learners.modlanet.taylor`): the model's operations on
truncated Taylor polynomials (:mod:`integrators.codegen.runtime`, whose header must come first).

A smooth scalar function enters through its Taylor coefficients :math:`\phi^{(k)}(z)/k!` at the value:

* ``tanh``: :math:`y' = 1 - y^2`, so every derivative is a polynomial :math:`P_k(y)` with
  :math:`P_{k+1} = P_k'(y)(1 - y^2)`, :math:`P_0 = y`;
* ``softplus`` (as torch computes it: :math:`\log(1 + e^z)`, and :math:`z` itself above the threshold 20):
  the derivatives from the first on are those of the sigmoid :math:`p`, :math:`p' = p(1 - p)`, so
  :math:`P_{k+1} = P_k'(p)\,p(1 - p)`, :math:`P_1 = p`;
* :math:`\sin`, :math:`\cos` (derivatives cycle), :math:`s^a` (:math:`\binom{a}{k}s^{a-k}`).

Networks run layer by layer as :mod:`learners.neural.mlp` does (and :meth:`MLP.tangent`: :math:`dz \mapsto W dz`,
then :math:`\sigma'(z)\odot dz`), every value a polynomial."""

SOURCE = r"""
/* f[k] = act^(k)(z)/k!, k = 0..kmax (kmax <= TP_K + 1); 0: tanh, 1: softplus (linear above 20, as torch).
   ACT_P[act][k]: the coefficients of P_k (module docstring; ACT_W of them), FACT[k] = k! */
static void act_series(int act, double z, int kmax, double *f) {
    double y;
    int k0;
    for (int k = 0; k <= kmax; k++) f[k] = 0.0;
    if (act == 1 && z > 20.0) {
        f[0] = z;
        if (kmax >= 1) f[1] = 1.0;
        return;
    }
    if (act == 0) {
        y = tanh(z);
        k0 = 0;
    } else {
        y = 1.0 / (1.0 + exp(-z));
        f[0] = log1p(exp(z));
        k0 = 1;
    }
    for (int k = k0; k <= kmax; k++) {
        const double *P = ACT_P + (act * (TP_K + 2) + k) * ACT_W;
        double v = 0.0;
        for (int i = ACT_W - 1; i >= 0; i--) v = v * y + P[i];
        f[k] = v / FACT[k];
    }
}

/* Taylor coefficients of sin (kind 0) or cos (kind 1) at t, k = 0..kmax */
static void trig_series(int kind, double t, int kmax, double *f) {
    const double s = sin(t), c = cos(t);
    const double cyc[4] = {kind ? c : s, kind ? -s : c, kind ? -c : -s, kind ? s : -c};
    double fact = 1.0;
    for (int k = 0; k <= kmax; k++) {
        if (k > 0) fact *= k;
        f[k] = cyc[k % 4] / fact;
    }
}

/* out = phi(a) for the Taylor coefficients f of phi at a_0 (pw: work, TP_K polynomials; out may be a) */
static void tp_apply(const double *a, const double *f, double *out, double *pw) {
    tp_powers(a, pw);
    tp_series(pw, f, out);
}

/* out = a^e (a_0 > 0) */
static void tp_pow(const double *a, double e, double *out, double *pw) {
    double f[TP_K + 1];
    f[0] = pow(a[0], e);
    for (int k = 1; k <= TP_K; k++) f[k] = f[k - 1] * (e - k + 1) / (k * a[0]);
    tp_apply(a, f, out, pw);
}

/* out = sin (kind 0) or cos (kind 1) of a */
static void tp_trig(int kind, const double *a, double *out, double *pw) {
    double f[TP_K + 1];
    trig_series(kind, a[0], TP_K, f);
    tp_apply(a, f, out, pw);
}

/* the activation of w polynomials in place; if s is given, s_o = act'(z_o) too */
static void tp_act(int act, int w, double *z, double *s, double *pw) {
    for (int o = 0; o < w; o++) {
        double f[TP_K + 2], *zo = z + (long)o * TP_S;
        act_series(act, zo[0], TP_K + 1, f);
        tp_powers(zo, pw);
        if (s) {
            double g[TP_K + 1];
            for (int k = 0; k <= TP_K; k++) g[k] = (k + 1) * f[k + 1];
            tp_series(pw, g, s + (long)o * TP_S);
        }
        tp_series(pw, f, zo);
    }
}

/* an MLP on polynomials: nlin layers dims[0] -> ... -> dims[nlin], parameters at w (per layer W row-major,
   then the bias); t0, t1: work arrays of (max width) polynomials */
static void tp_mlp(int nlin, const int *dims, const double *w, int act, const double *in, double *out, double *t0,
                   double *t1, double *pw) {
    const double *cur = in;
    for (int k = 0; k < nlin; k++) {
        const int a = dims[k], b = dims[k + 1];
        double *dst = k == nlin - 1 ? out : (k % 2 ? t1 : t0);
        tp_lin(a, b, w, w + a * b, cur, dst);
        w += a * b + b;
        if (k < nlin - 1) tp_act(act, b, dst, NULL, pw);
        cur = dst;
    }
}

/* (MLP(z), J_MLP(z) dz) on polynomials, as MLP.tangent. z0, z1, d0, d1, s: work arrays of (max width)
   polynomials; tmp: one */
static void tp_mlp_tangent(int nlin, const int *dims, const double *w, int act, const double *z, const double *dz,
                           double *zout, double *dzout, double *z0, double *z1, double *d0, double *d1, double *s,
                           double *tmp, double *pw) {
    for (int k = 0; k < nlin; k++) {
        const int a = dims[k], b = dims[k + 1], last = k == nlin - 1;
        double *zz = last ? zout : (k % 2 ? z1 : z0), *dd = last ? dzout : (k % 2 ? d1 : d0);
        tp_lin(a, b, w, w + a * b, z, zz);
        tp_lin(a, b, w, NULL, dz, dd);
        w += a * b + b;
        if (!last) {
            tp_act(act, b, zz, s, pw);
            for (int o = 0; o < b; o++) {
                tp_mul(s + (long)o * TP_S, dd + (long)o * TP_S, tmp);
                memcpy(dd + (long)o * TP_S, tmp, sizeof(double) * TP_S);
            }
        }
        z = zz;
        dz = dd;
    }
}

/* AngleOnRod at th (variable dq): lo = l (sin, -cos), its derivative in th jt = l (cos, sin) */
static void tp_rod(double th, int dq, double l, double *lo, double *jt, double *t, double *pw) {
    double s[TP_S], c[TP_S];
    tp_seed(th, dq, t);
    tp_trig(0, t, s, pw);
    tp_trig(1, t, c, pw);
    for (int k = 0; k < TP_S; k++) {
        lo[k] = l * s[k];
        lo[TP_S + k] = -l * c[k];
        jt[k] = l * c[k];
        jt[TP_S + k] = l * s[k];
    }
}

/* periodic features of q (variable dq) at feature c of 2k: lz_c = cos q, lz_{k+c} = sin q, and their
   derivatives in q, dz_c = -sin q, dz_{k+c} = cos q (dz: the features' derivative in the direction of q) */
static void tp_angle_features(double q, int dq, int c, int k, double *lz, double *dz, double *t, double *pw) {
    tp_seed(q, dq, t);
    tp_trig(1, t, lz + (long)c * TP_S, pw);
    tp_trig(0, t, lz + (long)(k + c) * TP_S, pw);
    for (int i = 0; i < TP_S; i++) {
        dz[(long)c * TP_S + i] = -lz[(long)(k + c) * TP_S + i];
        dz[(long)(k + c) * TP_S + i] = lz[(long)c * TP_S + i];
    }
}

/* out += c a b */
static void tp_mul_add(double c, const double *a, const double *b, double *out, double *tmp) {
    tp_mul(a, b, tmp);
    tp_axpy(c, tmp, out);
}

/* u = -G / |xi - xj| (d polynomials each) */
static void tp_newton_pair(int d, double G, const double *xi, const double *xj, double *u, double *t, double *r2,
                           double *pw) {
    for (int k = 0; k < TP_S; k++) r2[k] = 0.0;
    for (int c = 0; c < d; c++) {
        for (int k = 0; k < TP_S; k++) t[k] = xi[(long)c * TP_S + k] - xj[(long)c * TP_S + k];
        tp_mul(t, t, u);
        tp_axpy(1.0, u, r2);
    }
    tp_pow(r2, -0.5, u, pw);
    for (int k = 0; k < TP_S; k++) u[k] *= -G;
}
"""

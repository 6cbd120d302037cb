"""C source of the compiled stepping loop, a template with the Lagrangian's derivatives inserted at
``/*@LAGRANGIAN@*/``; :func:`march_source` builds it for one ``n`` (docs/theory/codegen.md, "The compiled march").
"""

TEMPLATE = r"""/* Compiled stepping of integrators.VariationalIntegrator (see integrators/compiled.py).

   The Lagrangian part, lag_derivs(x, P, g, H): gradient g (D) and Hessian H (D x D, row-major) of
   L at the state x = (q, v), D = 2n, with parameters P, is inserted in place of the marker below.
   A scheme is given by its evaluation points, affine in (a, b):
       L_d(a, b) = sum_k w_k L(y_k),   y_k = off_k + S_k a + B_k (b - a),
   with S_k = A_k + B_k, A_k = dy_k/da, B_k = dy_k/db (D x n each), so that
       D1 L_d = sum_k w_k A_k^T g(y_k),  D2 L_d = sum_k w_k B_k^T g(y_k),
       D12 L_d = sum_k w_k A_k^T H(y_k) B_k.
   The step equation, Newton iteration and convergence tests are those of integrators/newton.py,
   element by element, from the extrapolated start of integrators/_stepping.py. Every function taking
   `const int n` is inlined into bea_march, where n is the constant BEA_N. */
#include <math.h>
#include <string.h>

#define NMAX 32
#define DMAX (2 * NMAX)
#define INLINE static inline __attribute__((always_inline))

/*@LAGRANGIAN@*/

/* the one call site of the generated code (inlined into bea_march where it is small: BEA_FLATTEN) */
static void lag_eval(const double *x, const double *P, double *g, double *H) { lag_derivs(x, P, g, H); }

/* Hs (nev, D, D): the Hessians of L at the points of the last residual() */
typedef struct { int nev; const double *ev, *P; double *Hs, xtol, ftol, stall; int maxiter, reuse; } Ctx;

/* r = D1 L_d(a, x) + p, aux = D2 L_d(a, x); keeps H(y_k) in c->Hs for jacobian() */
INLINE void residual(const int n, const int nev, const Ctx *c, const double *a, const double *x, const double *p, double *r,
                     double *aux) {
    const int D = 2 * n, stride = 1 + D + 3 * D * n;
    double y[DMAX], g[DMAX], delta[NMAX];
    for (int j = 0; j < n; j++) r[j] = aux[j] = 0.0, delta[j] = x[j] - a[j];
    for (int k = 0; k < nev; k++) {
        const double *e = c->ev + (long)k * stride;
        const double w = e[0], *off = e + 1, *A = off + D, *B = A + D * n, *S = B + D * n;
        for (int i = 0; i < D; i++) {
            double s = off[i];
            for (int j = 0; j < n; j++) {
                if (S[i * n + j] != 0.0) s += S[i * n + j] * a[j];
                if (B[i * n + j] != 0.0) s += B[i * n + j] * delta[j];
            }
            y[i] = s;
        }
        lag_eval(y, c->P, g, c->Hs + (long)k * D * D);
        for (int j = 0; j < n; j++) {
            double s1 = 0.0, s2 = 0.0;
            for (int i = 0; i < D; i++) s1 += A[i * n + j] * g[i], s2 += B[i * n + j] * g[i];
            r[j] += w * s1, aux[j] += w * s2;
        }
    }
    for (int j = 0; j < n; j++) r[j] += p[j];
}

/* J = D12 L_d at the iterate of the last residual() (J[j][l] = dr_j/dx_l), from its Hessians */
INLINE void jacobian(const int n, const int nev, const Ctx *c, double *J) {
    const int D = 2 * n, stride = 1 + D + 3 * D * n;
    double T[DMAX * NMAX];
    for (int j = 0; j < n * n; j++) J[j] = 0.0;
    for (int k = 0; k < nev; k++) {
        const double *e = c->ev + (long)k * stride, *H = c->Hs + (long)k * D * D;
        const double w = e[0], *A = e + 1 + D, *B = A + D * n;
        for (int i = 0; i < D; i++)
            for (int l = 0; l < n; l++) {
                double s = 0.0;
                for (int m = 0; m < D; m++) s += H[i * D + m] * B[m * n + l];
                T[i * n + l] = s;
            }
        for (int j = 0; j < n; j++)
            for (int l = 0; l < n; l++) {
                double s = 0.0;
                for (int i = 0; i < D; i++) s += A[i * n + j] * T[i * n + l];
                J[j * n + l] += w * s;
            }
    }
}

/* J d = r by Gaussian elimination with partial pivoting; a zero pivot gives NaN (as the eager
   path's singular-Jacobian handling does). */
INLINE void solve_lin(const int n, const double *J, const double *r, double *d) {
    if (n == 1) { d[0] = r[0] / J[0]; return; }
    double M[NMAX * NMAX], y[NMAX];
    memcpy(M, J, sizeof(double) * n * n);
    memcpy(y, r, sizeof(double) * n);
    for (int k = 0; k < n; k++) {
        int piv = k;
        double best = fabs(M[k * n + k]);
        for (int i = k + 1; i < n; i++)
            if (fabs(M[i * n + k]) > best) best = fabs(M[i * n + k]), piv = i;
        if (M[piv * n + k] == 0.0) { for (int i = 0; i < n; i++) d[i] = NAN; return; }
        if (piv != k) {
            double t;
            for (int l = 0; l < n; l++) t = M[k * n + l], M[k * n + l] = M[piv * n + l], M[piv * n + l] = t;
            t = y[k], y[k] = y[piv], y[piv] = t;
        }
        for (int i = k + 1; i < n; i++) {
            double f = M[i * n + k] / M[k * n + k];
            for (int l = k; l < n; l++) M[i * n + l] -= f * M[k * n + l];
            y[i] -= f * y[k];
        }
    }
    for (int i = n - 1; i >= 0; i--) {
        double s = y[i];
        for (int l = i + 1; l < n; l++) s -= M[i * n + l] * d[l];
        d[i] = s / M[i * n + i];
    }
}

/* max_i v_i with NaN propagation (as torch.amax) */
static inline double nanmax(double m, double v) { return (isnan(v) || v > m) ? v : m; }

/* Newton for one element; status 0 converged, 1 not converged in maxiter, 2 non-finite/singular.
   x: guess in, accepted iterate out. J: previous Jacobian in (if has_jac); out (status 0): the Jacobian
   of the last correction (has_jac and none fresh: the one passed in), or without any, the one at x.
   aux: D2 L_d at the accepted iterate. */
INLINE int newton(const int n, const int nev, const Ctx *c, const double *a, const double *p, double *x, double *J, int has_jac,
                  double *aux) {
    double r[NMAX], d[NMAX], dx[NMAX];
    int have = has_jac;
    double prev_err = NAN;
    for (int it = 0; it <= c->maxiter; it++) {
        residual(n, nev, c, a, x, p, r, aux);
        double z = 0.0, rn = 0.0;  /* z: 0 if every r_j and x_j is finite, else NaN (one test); rn = max |r_j| for ftol */
        for (int j = 0; j < n; j++) z += 0.0 * r[j] + 0.0 * x[j];
        for (int j = 0; j < n && c->ftol > 0.0; j++) rn = nanmax(rn, fabs(r[j]));
        double err = INFINITY;
        int ok = 0;
        if (have) {
            solve_lin(n, J, r, d);
            err = 0.0;
            for (int j = 0; j < n; j++) err = nanmax(err, fabs(d[j]) / (1.0 + fabs(x[j])));
            ok = err <= c->xtol;
            if (it >= 2) ok = ok || (err <= c->stall * c->xtol && err >= 0.1 * prev_err);
        }
        if (c->ftol > 0.0) ok = ok || rn <= c->ftol;
        if (ok) { if (!have) jacobian(n, nev, c, J); return 0; }
        if (!(z == 0.0)) return 2;
        if (it == c->maxiter) return 1;
        if (it == 0 && have && c->reuse && err <= 0.1) {
            memcpy(dx, d, sizeof(double) * n); /* chord step with the previous Jacobian */
        } else {
            jacobian(n, nev, c, J);
            solve_lin(n, J, r, dx);
            have = 1;
        }
        double pe = 0.0;
        for (int j = 0; j < n; j++) x[j] -= dx[j], pe = nanmax(pe, fabs(dx[j]) / (1.0 + fabs(x[j])));
        prev_err = pe;
    }
    return 1;
}

/* Gradients and Hessians of L at m states x (m, D): for checking the C form against autograd. */
void bea_lag_derivs(int m, int D, const double *x, const double *P, double *g, double *H) {
    for (int i = 0; i < m; i++) lag_eval(x + (long)i * D, P, g + (long)i * D, H + (long)i * D * D);
}

/* Newton start for q_{j+1} of one element from q_0..q_j (Q(k): q_k): integrators/_stepping.extrapolate */
#define Q(k) (out + ((long)(k) * Ball + row) * n)
INLINE void predict(const int n, const double *out, long Ball, long row, int j, double *x) {
    for (int i = 0; i < n; i++)
        x[i] = j >= 5 ? 6 * (Q(j)[i] + Q(j - 4)[i]) - 15 * (Q(j - 1)[i] + Q(j - 3)[i]) + 20 * Q(j - 2)[i] - Q(j - 5)[i]
             : j >= 3 ? 4 * Q(j)[i] - 6 * Q(j - 1)[i] + 4 * Q(j - 2)[i] - Q(j - 3)[i]
             : j == 2 ? 3 * Q(j)[i] - 3 * Q(j - 1)[i] + Q(j - 2)[i] : 2 * Q(j)[i] - Q(j - 1)[i];
}
#undef Q

/* Steps j0 .. j_end-1 for B trajectories (rows[b] of the (T1, Ball, n) array out, or b if rows is
   NULL), time-major. p (B, n) and jac (B, n, n) are the momenta and Newton Jacobians at step j0 and
   are updated as steps complete. At the first step where any element fails (status 1 or 2, or 3:
   a root farther than max_step from q_j), returns that step without writing it (out, p, jac keep
   the state at that step; status says which elements failed). Returns j_end when all steps are done.
   pout, if not NULL, is laid out as out and receives the momenta p_{j+1} = D2 L_d(q_j, q_{j+1}) of every
   completed step (the Trajectory's p: computed here anyway, so not recomputed afterwards).
   Work arrays: xnew, pnew (B, n), jnew (B, n, n); status (B); Hs (nev, 2n, 2n), the Hessians at the evaluation
   points (from the caller: a stack array of a run-time size could overflow the stack). */
/* BEA_FLATTEN (a small Lagrangian): all it calls inlined, so L's gradient and Hessian stay in registers */
BEA_FLATTEN int bea_march(int B, int n_in, int j0, int j_end, double *out, long Ball, const long *rows, double *p, double *jac,
              int has_jac, const double *first_guess, int nev, const double *ev, const double *P, double xtol, double ftol,
              int maxiter, int reuse, double stall, double max_step, double *xnew, double *pnew, double *jnew, int *status,
              double *pout, double *Hs) {
    const Ctx ctx = {nev, ev, P, Hs, xtol, ftol, stall, maxiter, reuse}, *c = &ctx;
    /* built for one n (march_source), a constant in the inlined functions: any other is refused as a failed step,
       for the eager path */
    const int n = BEA_N;
    if (n_in != n) { for (int b = 0; b < B; b++) status[b] = 2; return j0; }
    const long nn = (long)n * n;
    for (int j = j0; j < j_end; j++) {
        int bad = 0;
        for (int b = 0; b < B; b++) {
            const long row = rows ? rows[b] : b;
            double *x = xnew + (long)b * n, *J = jnew + b * nn;
            const double *a = out + ((long)j * Ball + row) * n;
            if (j == 0 && first_guess)
                memcpy(x, first_guess + (long)b * n, sizeof(double) * n);
            else
                predict(n, out, Ball, row, j, x);
            if (has_jac) memcpy(J, jac + b * nn, sizeof(double) * nn);
            /* nev = 1 (midpoint, any one-point rule) a constant, as n is: two instances */
            int st = nev == 1 ? newton(n, 1, c, a, p + (long)b * n, x, J, has_jac, pnew + (long)b * n)
                              : newton(n, nev, c, a, p + (long)b * n, x, J, has_jac, pnew + (long)b * n);
            double m = 0.0;  /* a root farther than max_step from q_j */
            for (int i = 0; i < n && st == 0 && max_step > 0.0; i++) m = nanmax(m, fabs(x[i] - a[i]));
            if (m > max_step && max_step > 0.0) st = 3;
            status[b] = st;
            if (st) bad = 1;
        }
        if (bad) return j;
        for (int b = 0; b < B; b++) {
            const long row = rows ? rows[b] : b;
            memcpy(out + ((long)(j + 1) * Ball + row) * n, xnew + (long)b * n, sizeof(double) * n);
            if (pout) memcpy(pout + ((long)(j + 1) * Ball + row) * n, pnew + (long)b * n, sizeof(double) * n);
            /* here, of a constant size: inlined (not two library calls a step) */
            memcpy(p + (long)b * n, pnew + (long)b * n, sizeof(double) * n);
            memcpy(jac + b * nn, jnew + b * nn, sizeof(double) * nn);
        }
        has_jac = 1;
    }
    return j_end;
}
"""


#: largest CLagrangian.cost and ``lag_derivs`` source (characters) inlined into the march, at n = 1 only: flattening a
#: lowered series' Taylor program (~20,000 characters) took gcc 13 s more for no faster step (docs/theory/codegen.md)
INLINE_MAX_COST, INLINE_MAX_SOURCE = 8, 12_000


def inline_lagrangian(n: int, cost: int, source: str) -> bool:
    """Whether ``lag_derivs`` is inlined into the march (``march_source(..., inline=True)``): at n = 1, for a
    Lagrangian of ``cost`` at most :data:`INLINE_MAX_COST` whose source is at most :data:`INLINE_MAX_SOURCE` long."""
    return n == 1 and cost <= INLINE_MAX_COST and len(source) <= INLINE_MAX_SOURCE


def march_source(lagrangian: str, n: int, inline: bool = False) -> str:
    """The C source of the march for the ``lag_derivs`` source ``lagrangian`` and ``n`` coordinates (a constant there);
    ``inline``: ``lag_derivs`` inlined into the Newton loop (a small one: :data:`INLINE_MAX_COST`)."""
    flatten = "__attribute__((flatten))" if inline else ""
    return f"#define BEA_N {int(n)}\n#define BEA_FLATTEN {flatten}\n" + TEMPLATE.replace("/*@LAGRANGIAN@*/", lagrangian)

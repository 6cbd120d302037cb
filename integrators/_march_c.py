"""C source of the compiled stepping loop (a template: the Lagrangian's derivatives are inserted at
``/*@LAGRANGIAN@*/``). Kept as a Python string so that it ships and loads like the rest of the package."""

TEMPLATE = r"""/* Compiled stepping of integrators.VariationalIntegrator (see integrators/compiled.py).

   The Lagrangian part, lag_derivs(x, P, g, H): gradient g (D) and Hessian H (D x D, row-major) of
   L at the state x = (q, v), D = 2n, with parameters P, is inserted in place of the marker below.
   A scheme is given by its evaluation points, affine in (a, b):
       L_d(a, b) = sum_k w_k L(y_k),   y_k = off_k + S_k a + B_k (b - a),
   with S_k = A_k + B_k, A_k = dy_k/da, B_k = dy_k/db (D x n each), so that
       D1 L_d = sum_k w_k A_k^T g(y_k),  D2 L_d = sum_k w_k B_k^T g(y_k),
       D12 L_d = sum_k w_k A_k^T H(y_k) B_k.
   The step equation, Newton iteration, convergence tests and extrapolated guesses are those of
   integrators/newton.py and integrators/variational.py, element by element. */
#include <math.h>
#include <string.h>

#define NMAX 32
#define DMAX (2 * NMAX)

/*@LAGRANGIAN@*/

typedef struct {
    int n, nev;
    const double *ev, *P;
} Ctx;

/* r = D1 L_d(a, x) + p, J = D12 L_d(a, x) (J[j][l] = dr_j/dx_l), aux = D2 L_d(a, x) */
static void evaluate(const Ctx *c, const double *a, const double *x, const double *p, double *r, double *J, double *aux) {
    const int n = c->n, D = 2 * n, stride = 1 + D + 3 * D * n;
    double y[DMAX], g[DMAX], H[DMAX * DMAX], T[DMAX * NMAX], delta[NMAX];
    for (int j = 0; j < n; j++) {
        r[j] = 0.0;
        aux[j] = 0.0;
        delta[j] = x[j] - a[j];
    }
    for (int j = 0; j < n * n; j++) J[j] = 0.0;
    for (int k = 0; k < c->nev; k++) {
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
        lag_derivs(y, c->P, g, H);
        for (int j = 0; j < n; j++) {
            double s1 = 0.0, s2 = 0.0;
            for (int i = 0; i < D; i++) {
                s1 += A[i * n + j] * g[i];
                s2 += B[i * n + j] * g[i];
            }
            r[j] += w * s1;
            aux[j] += w * s2;
        }
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
    for (int j = 0; j < n; j++) r[j] += p[j];
}

/* J d = r by Gaussian elimination with partial pivoting; a zero pivot gives NaN (as the eager
   path's singular-Jacobian handling does). */
static void solve_lin(int n, const double *J, const double *r, double *d) {
    if (n == 1) {
        d[0] = r[0] / J[0];
        return;
    }
    double M[NMAX * NMAX], y[NMAX];
    memcpy(M, J, sizeof(double) * n * n);
    memcpy(y, r, sizeof(double) * n);
    for (int k = 0; k < n; k++) {
        int piv = k;
        double best = fabs(M[k * n + k]);
        for (int i = k + 1; i < n; i++)
            if (fabs(M[i * n + k]) > best) {
                best = fabs(M[i * n + k]);
                piv = i;
            }
        if (M[piv * n + k] == 0.0) {
            for (int i = 0; i < n; i++) d[i] = NAN;
            return;
        }
        if (piv != k) {
            for (int l = 0; l < n; l++) {
                double t = M[k * n + l];
                M[k * n + l] = M[piv * n + l];
                M[piv * n + l] = t;
            }
            double t = y[k];
            y[k] = y[piv];
            y[piv] = t;
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
static double nanmax(double m, double v) { return (isnan(v) || v > m) ? v : m; }

/* Newton for one element; status 0 converged, 1 not converged in maxiter, 2 non-finite/singular.
   x: guess in, accepted iterate out. Jio: previous Jacobian in (if has_jac), the most recent
   Jacobian out. aux: D2 L_d at the accepted iterate. */
static int newton(const Ctx *c, const double *a, const double *p, double *x, double *Jio, int has_jac, double *aux,
                  double xtol, double ftol, int maxiter, int reuse, double stall) {
    const int n = c->n;
    double r[NMAX], Jn[NMAX * NMAX], Jact[NMAX * NMAX], d[NMAX], dx[NMAX];
    int have = has_jac;
    double prev_err = NAN;
    if (have) memcpy(Jact, Jio, sizeof(double) * n * n);
    for (int it = 0; it <= maxiter; it++) {
        evaluate(c, a, x, p, r, Jn, aux);
        double rn = 0.0;
        int finite = 1;
        for (int j = 0; j < n; j++) {
            rn = nanmax(rn, fabs(r[j]));
            if (!isfinite(x[j])) finite = 0;
        }
        if (!isfinite(rn)) finite = 0;
        double err = INFINITY;
        int ok = 0;
        if (have) {
            solve_lin(n, Jact, r, d);
            err = 0.0;
            for (int j = 0; j < n; j++) err = nanmax(err, fabs(d[j]) / (1.0 + fabs(x[j])));
            ok = err <= xtol;
            if (it >= 2) ok = ok || (err <= stall * xtol && err >= 0.1 * prev_err);
        }
        if (ftol > 0.0) ok = ok || rn <= ftol;
        if (ok) {
            memcpy(Jio, have ? Jact : Jn, sizeof(double) * n * n);
            return 0;
        }
        if (!finite) return 2;
        if (it == maxiter) return 1;
        if (it == 0 && have && reuse && err <= 0.1) {
            memcpy(dx, d, sizeof(double) * n); /* chord step with the previous Jacobian */
        } else {
            solve_lin(n, Jn, r, dx);
            memcpy(Jact, Jn, sizeof(double) * n * n);
            have = 1;
        }
        double pe = 0.0;
        for (int j = 0; j < n; j++) {
            x[j] -= dx[j];
            pe = nanmax(pe, fabs(dx[j]) / (1.0 + fabs(x[j])));
        }
        prev_err = pe;
    }
    return 1;
}

/* Gradients and Hessians of L at m states x (m, D): for checking the C form against autograd. */
void bea_lag_derivs(int m, int D, const double *x, const double *P, double *g, double *H) {
    for (int i = 0; i < m; i++) lag_derivs(x + (long)i * D, P, g + (long)i * D, H + (long)i * D * D);
}

/* Steps j0 .. j_end-1 for B trajectories (rows[b] of the (T1, Ball, n) array out, or b if rows is
   NULL), time-major. p (B, n) and jac (B, n, n) are the momenta and Newton Jacobians at step j0 and
   are updated as steps complete. At the first step where any element fails (status 1 or 2, or 3:
   a root farther than max_step from q_j), returns that step without writing it (out, p, jac keep
   the state at that step; status says which elements failed). Returns j_end when all steps are done.
   pout, if not NULL, is laid out as out and receives the momenta p_{j+1} = D2 L_d(q_j, q_{j+1}) of every
   completed step (the Trajectory's p: computed here anyway, so not recomputed afterwards).
   Work arrays: xnew, pnew (B, n), jnew (B, n, n); status (B). */
int bea_march(int B, int n, int j0, int j_end, double *out, long Ball, const long *rows, double *p, double *jac,
              int has_jac, const double *first_guess, int nev, const double *ev, const double *P, double xtol, double ftol,
              int maxiter, int reuse, double stall, double max_step, double *xnew, double *pnew, double *jnew, int *status,
              double *pout) {
    Ctx c = {n, nev, ev, P};
    const long nn = (long)n * n;
    for (int j = j0; j < j_end; j++) {
        int bad = 0;
        for (int b = 0; b < B; b++) {
            const long row = rows ? rows[b] : b;
#define Q(k) (out + ((long)(k) * Ball + row) * n)
            double *x = xnew + (long)b * n;
            const double *a = Q(j);
            for (int i = 0; i < n; i++) {
                double g;
                if (j == 0 && first_guess)
                    g = first_guess[(long)b * n + i];
                else if (j >= 5)
                    g = 6 * (Q(j)[i] + Q(j - 4)[i]) - 15 * (Q(j - 1)[i] + Q(j - 3)[i]) + 20 * Q(j - 2)[i] - Q(j - 5)[i];
                else if (j >= 3)
                    g = 4 * Q(j)[i] - 6 * Q(j - 1)[i] + 4 * Q(j - 2)[i] - Q(j - 3)[i];
                else if (j == 2)
                    g = 3 * Q(j)[i] - 3 * Q(j - 1)[i] + Q(j - 2)[i];
                else
                    g = 2 * Q(j)[i] - Q(j - 1)[i];
                x[i] = g;
            }
            if (has_jac) memcpy(jnew + b * nn, jac + b * nn, sizeof(double) * nn);
            int st = newton(&c, a, p + (long)b * n, x, jnew + b * nn, has_jac, pnew + (long)b * n, xtol, ftol, maxiter, reuse, stall);
            if (st == 0 && max_step > 0.0) {
                double m = 0.0;
                for (int i = 0; i < n; i++) m = nanmax(m, fabs(x[i] - a[i]));
                if (m > max_step) st = 3;
            }
            status[b] = st;
            if (st) bad = 1;
        }
        if (bad) return j;
        for (int b = 0; b < B; b++) {
            const long row = rows ? rows[b] : b;
            memcpy(Q(j + 1), xnew + (long)b * n, sizeof(double) * n);
            if (pout) memcpy(pout + ((long)(j + 1) * Ball + row) * n, pnew + (long)b * n, sizeof(double) * n);
        }
#undef Q
        memcpy(p, pnew, sizeof(double) * B * n);
        memcpy(jac, jnew, sizeof(double) * B * nn);
        has_jac = 1;
    }
    return j_end;
}
"""

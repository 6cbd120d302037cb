"""The generated part of a ModLaNet's C form (:mod:`learners.modlanet.lowering`): ``lag_derivs`` for one
model structure, as calls of the jet helpers (:mod:`learners.modlanet._jets_c`) with the sizes and
parameter offsets written in as constants. Only integers from the structure enter the source."""

from __future__ import annotations

from typing import List, Tuple

from integrators.compiled import NotLowerable

#: largest stack the generated function may use (bytes); bigger models are not lowered
STACK_LIMIT = 1 << 19


def _js(m: int) -> int:
    return 1 + m + m * m


def _mlp_flops(mlp, m: int) -> int:
    dims = mlp[1]
    return sum(a * b for a, b in zip(dims[:-1], dims[1:])) * _js(m)


def _mlp_call(mlp, m: int, inputs: str, out: str) -> str:
    """The call evaluating a cell network on jets: with the reverse-mode last layer where its transposed
    weights were packed (a scalar output and a hidden layer), else the forward one."""
    off, dims, act, wt = mlp
    if wt >= 0:
        return f"mlp_scalar_jets({m}, {len(dims) - 1}, DIMS, P + {off}, P + {wt}, {act}, {inputs}, {out}, c0, c1);"
    return f"mlp_jets({m}, {len(dims) - 1}, DIMS, P + {off}, {act}, {inputs}, {out}, c0, c1);"


class _Gen:
    def __init__(self, structure):
        (self.n, self.d, self.parents, self.order, self.local_dims, self.offsets, self.trans, self.pot, self.pair,
         self.pairs, self.om, self.oc1, self.oc2) = structure
        self.D = 2 * self.n
        self.head: List[str] = []  # file-scope constant arrays
        self.body: List[str] = []
        self.flops = 0
        mlps = [t[3] for t in self.trans if t[0] == "mlp"]
        self.mloc = max(2 * k for k in self.local_dims)
        self.wt = max([max(m[1]) for m in mlps] + [2 * max(self.local_dims), self.d])
        cells = [c[1] for c in (self.pot, self.pair) if c is not None and c[0] == "mlp"]
        self.wc = max([max(m[1]) for m in cells] + [2 * self.d])

    def array(self, name: str, values) -> str:
        self.head.append(f"static const int {name}[] = {{{', '.join(str(int(v)) for v in values)}}};")
        return name

    def element(self, i: int):
        k, oq, n, t = self.local_dims[i], self.offsets[i], self.n, self.trans[i]
        m = 2 * k
        b = self.body
        b.append(f"    /* element {i}: {t[0]} */")
        if t[0] == "id":
            for c in range(k):
                b.append(f"    jet_seed({m}, x[{oq + c}], {c}, lo + {c} * JS({m}));")
                b.append(f"    jet_seed({m}, x[{n + oq + c}], {k + c}, ldo + {c} * JS({m}));")
        elif t[0] == "rod":
            b.append(f"    rod_jets(x[{oq}], x[{n + oq}], P[{t[1]}], lo, ldo);")
        else:
            self._mlp_transform(i, k, t)
        gi = self.array(f"GI{i}", [oq + c for c in range(k)] + [n + oq + c for c in range(k)])
        p = self.parents[i]
        for c in range(self.d):
            for arr, loc in (("X", "lo"), ("XD", "ldo")):
                add = "NULL" if p < 0 else f"{arr} + {p * self.d + c} * SD"
                b.append(f"    jet_embed({m}, {gi}, {loc} + {c} * JS({m}), D, {add}, {arr} + {i * self.d + c} * SD);")

    def _mlp_transform(self, i: int, k: int, t):
        _, _, periodic, (off, dims, act, _) = t
        m, b = 2 * k, self.body
        name = self.array(f"DT{i}", dims)
        self.flops += 2 * _mlp_flops(t[3], m)
        for c in range(k):
            if periodic:
                b.append(f"    angle_features({m}, x[{self.offsets[i] + c}], x[{self.n + self.offsets[i] + c}], {c}, {k}, lz, ldz);")
            else:
                b.append(f"    jet_seed({m}, x[{self.offsets[i] + c}], {c}, lz + {c} * JS({m}));")
                b.append(f"    jet_seed({m}, x[{self.n + self.offsets[i] + c}], {k + c}, ldz + {c} * JS({m}));")
        b.append(f"    mlp_tangent_jets({m}, {len(dims) - 1}, {name}, P + {off}, {act}, lz, ldz, lo, ldo, w0, w1, w2, w3, ws, tmp);")

    def kinetic(self, i: int):
        d = self.d
        self.body.append(f"    half_square_jet({d}, XD + {i * d} * SD, SD, u);")
        self.body.append(f"    jet_compose_add(D, {d}, u, XD + {i * d} * SD, P[{self.om + i}], LJ);")

    def potential(self, i: int):
        d, c, b = self.d, self.pot, self.body
        coef = f"-P[{self.oc1}] * P[{self.om + i}]"
        if c[0] == "mlp":
            if i == 0:
                self.array("DU1", c[1][1])
            self.flops += _mlp_flops(c[1], d)
            b.append(f"    seed_inputs({d}, {d}, X + {i * d} * SD, NULL, SD, cin);")
            b.append("    " + _mlp_call(c[1], d, "cin", "u").replace("DIMS", "DU1"))
        else:
            _, og, axis = c
            b.append(f"    for (int k = 0; k < JS({d}); k++) u[k] = 0.0;")
            b.append(f"    u[0] = P[{og}] * X[{i * d + axis} * SD];")
            b.append(f"    u[{1 + axis}] = P[{og}];")
        b.append(f"    jet_compose_add(D, {d}, u, X + {i * d} * SD, {coef}, LJ);")

    def pair_term(self, i: int, j: int, first: bool):
        d, c, b = self.d, self.pair, self.body
        xi, xj = f"X + {i * d} * SD", f"X + {j * d} * SD"
        if c[0] == "mlp":
            if first:
                self.array("DU2", c[1][1])
            self.flops += 2 * _mlp_flops(c[1], 2 * d)
            for src, dst in (((xi, xj), "ua"), ((xj, xi), "ub")):
                b.append(f"    seed_inputs({2 * d}, {d}, {src[0]}, {src[1]}, SD, cin);")
                b.append("    " + _mlp_call(c[1], 2 * d, "cin", dst).replace("DIMS", "DU2"))
            b.append(f"    pair_symmetrise({d}, ua, ub, u);")
        else:
            b.append(f"    newton_pair_jet({d}, P[{c[1]}], {xi}, {xj}, SD, u);")
        b.append(f"    memcpy(XP, {xi}, sizeof(double) * {d} * SD);")
        b.append(f"    memcpy(XP + {d} * SD, {xj}, sizeof(double) * {d} * SD);")
        b.append(f"    jet_compose_add(D, {2 * d}, u, XP, -P[{self.oc2}] * P[{self.om + i}] * P[{self.om + j}], LJ);")

    def stack_bytes(self) -> int:
        N, d, SD, SL, SC = len(self.parents), self.d, _js(self.D), _js(self.mloc), _js(2 * self.d)
        return 8 * (2 * N * d * SD + 3 * SD + (2 * self.wt + 4 * self.wt + 2 * self.wt + 1) * SL
                    + (2 * self.wc + 2 * self.d + 3) * SC)


def emit_terms(g) -> None:
    """The C of every element, kinetic and potential term and pair interaction, in the structure's order, by a
    generator ``g`` (this module's or :mod:`learners.modlanet.taylor`'s: the same walk, other arithmetic)."""
    for i in g.order:
        g.element(i)
    for i in range(len(g.parents)):
        g.kinetic(i)
        if g.pot is not None:
            g.potential(i)
    for k, (i, j) in enumerate(g.pairs):
        g.pair_term(i, j, k == 0)


def generate(structure) -> Tuple[str, int]:
    """``(source, cost)``: the C of ``lag_derivs`` for a ModLaNet structure (:func:`lowering.plan`) and
    its cost relative to a closed formula (flops / 100), for chunk sizes."""
    g = _Gen(structure)
    if g.stack_bytes() > STACK_LIMIT:
        raise NotLowerable(f"the C form would need {g.stack_bytes()} bytes of stack (limit {STACK_LIMIT}): too many coordinates")
    emit_terms(g)
    N, d = len(g.parents), g.d
    decl = [
        f"#define D {g.D}", f"#define SD JS({g.D})", f"#define SL JS({g.mloc})", f"#define SC JS({2 * d})",
        "static void modlanet_jet(const double *x, const double *P, double *LJ) {",
        f"    double X[{N * d} * SD], XD[{N * d} * SD], XP[{2 * d} * SD];",
        f"    double lo[{g.wt} * SL], ldo[{g.wt} * SL], lz[{g.wt} * SL], ldz[{g.wt} * SL];",
        f"    double w0[{g.wt} * SL], w1[{g.wt} * SL], w2[{g.wt} * SL], w3[{g.wt} * SL], ws[{g.wt} * SL], tmp[SL];",
        f"    double cin[{2 * d} * SC], c0[{g.wc} * SC], c1[{g.wc} * SC], u[SC], ua[SC], ub[SC];",
        "    (void)w0; (void)w1; (void)w2; (void)w3; (void)ws; (void)tmp; (void)lz; (void)ldz; (void)XP; (void)cin;",
        "    (void)c0; (void)c1; (void)ua; (void)ub;",
        "    for (int k = 0; k < SD; k++) LJ[k] = 0.0;",
    ]
    tail = [
        "}",
        "static void lag_derivs(const double *x, const double *P, double *g, double *H) {",
        "    double LJ[SD];",
        "    modlanet_jet(x, P, LJ);",
        "    for (int i = 0; i < D; i++) {",
        "        g[i] = LJ[1 + i];",
        "        for (int j = i; j < D; j++) H[i * D + j] = H[j * D + i] = LJ[1 + D + i * D + j];",
        "    }",
        "}",
        "#undef D", "#undef SD", "#undef SL", "#undef SC",
    ]
    source = "\n".join(g.head + decl + g.body + tail) + "\n"
    return source, max(1, g.flops // 100)

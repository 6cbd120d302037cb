"""JAX peer of integrators.VariationalIntegrator (midpoint/trapezoidal), for benchmarks/integrate.py only."""
from __future__ import annotations

import time

import jax
import jax.numpy as jnp
from jax import lax

jax.config.update("jax_enable_x64", True)


def pendulum(q, v):
    return 0.5 * jnp.sum(v**2) + jnp.sum(jnp.cos(q))


def kepler(q, v):
    return 0.5 * jnp.sum(v**2) + 1.0 / jnp.sqrt(jnp.sum(q**2))


SYSTEMS = {"pendulum": pendulum, "kepler": kepler}


def make(L, scheme: str, h: float, xtol: float = 1e-14, maxiter: int = 20):
    if scheme == "midpoint":
        def Ld(a, b):
            return h * L((a + b) / 2, (b - a) / h)
    elif scheme == "trapezoidal":
        def Ld(a, b):
            v = (b - a) / h
            return h / 2 * (L(a, v) + L(b, v))
    else:
        raise ValueError(scheme)
    D1 = jax.jacfwd(Ld, argnums=0)
    D2 = jax.jacfwd(Ld, argnums=1)
    J = jax.jacfwd(D1, argnums=1)

    def step(carry, _):
        q_prev, q, p = carry
        x0 = 2 * q - q_prev

        def cond(s):
            x, dx, it = s
            return (jnp.max(jnp.abs(dx) / (1 + jnp.abs(x))) > xtol) & (it < maxiter)

        def body(s):
            x, _, it = s
            dx = jnp.linalg.solve(J(q, x), D1(q, x) + p)
            return x - dx, dx, it + 1

        x, _, _ = lax.while_loop(cond, body, (x0, jnp.full_like(x0, jnp.inf), 0))
        return (q, x, D2(q, x)), x

    def trajectory(q0, v0, steps):
        p0 = jax.grad(L, argnums=1)(q0, v0)
        (_, _, _), qs = lax.scan(step, (q0 - h * v0, q0, p0), None, length=steps)
        return jnp.concatenate([q0[None], qs])

    return trajectory


def timed(name: str, scheme: str, h: float, q0, v0, steps: int):
    """(positions (steps+1, B, n), compile seconds, run seconds) for a batch (vmap) of trajectories."""
    traj = make(SYSTEMS[name], scheme, h)
    fn = jax.jit(jax.vmap(lambda a, b: traj(a, b, steps), out_axes=1))
    q0, v0 = jnp.asarray(q0), jnp.asarray(v0)
    t = time.perf_counter()
    fn.lower(q0, v0).compile()
    out = fn(q0, v0).block_until_ready()
    tc = time.perf_counter() - t
    t = time.perf_counter()
    out = fn(q0, v0).block_until_ready()
    return out, tc, time.perf_counter() - t

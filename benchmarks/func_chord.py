"""The torch.compile path's Newton step (integrators/compiled_func.py) on the MLP Lagrangian at batch 1000: eager against
newton() driving the compiled derivatives, and the one-graph chord step with 2 and 8 (the default) steps per call.

    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/func_chord.py [--repeats 5] [--steps 400] [--chord 2,8]

Every variant is built first (its build time printed: it includes whatever the on-disk inductor cache held), then
timed alternately with the others, ``--repeats`` times; the table gives the medians of wall-clock and of process CPU
trajectory-steps per second (CPU time is the steadier measure on a shared machine) and each one's ratio to eager,
all measured in this run, plus the largest deviation of each variant's positions from eager's over the steps eager
runs (the first quarter).
"""

from __future__ import annotations

import argparse
import statistics
import time

import bea
from integrators import VariationalIntegrator
from integrators import compiled_func as CF

from integrate_any import H, initial, mlp_lagrangian  # noqa: E402 - the sibling benchmark (run from the repository root)


def timed(vi, q0, v0, steps):
    """(positions, wall rate, CPU rate) of one run, in trajectory-steps per second."""
    t, c = time.perf_counter(), time.process_time()
    q = vi.solve(q0, v0, steps, progress=False).q
    return q, q0.shape[0] * steps / (time.perf_counter() - t), q0.shape[0] * steps / (time.process_time() - c)


def build(L, chord_steps):
    """A stepper for batch 1000 with ``chord_steps`` steps per call of its graph (0: newton() for every step)."""
    CF.CHORD_STEPS = max(1, chord_steps)
    t = time.perf_counter()
    stepper = CF.FuncStepper(L, H, bea.get_scheme("midpoint"), 1, batch=1000)
    if chord_steps == 0:  # the path before the chord graph: newton() on its compiled derivatives, compiled now
        stepper._chord_step = lambda *args: ((), ())
        stepper._size = CF.bucket(1000)
        stepper._newton_work = CF.COMPILE_NEWTON_WORK
        stepper._compile_newton()
    print(f"built chord_steps={chord_steps}: {time.perf_counter() - t:.1f} s", flush=True)
    return stepper


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--steps", type=int, default=400, help="steps per timed run of the compiled variants (eager: 1/4)")
    ap.add_argument("--chord", default="2,8", help="steps per graph call to compare (newton() alone is always in)")
    args = ap.parse_args()
    L = mlp_lagrangian(1)
    q0, v0 = initial(1, 1000)
    eager = VariationalIntegrator(L, H, execution="eager")
    fast = VariationalIntegrator(L, H, execution="auto")
    fast._stepper_errors[1] = None  # the traced C form is not for this batch: the torch.compile stepper below is
    variants = {k: build(L, k) for k in [0] + [int(k) for k in args.chord.split(",")]}
    # warm-up: each one's first run. newton()'s derivatives stay on autograd (as in a default run) until newton() has
    # taken COMPILE_NEWTON_WORK trajectory-steps: at once for newton() per step, never here for the chord variants
    for stepper in variants.values():
        fast._func_steppers[1] = stepper
        fast.solve(q0, v0, 64, progress=False)
    wall, cpu, dev = {"eager": []}, {"eager": []}, {}
    for _ in range(args.repeats):
        qe, w, c = timed(eager, q0, v0, args.steps // 4)
        wall["eager"].append(w)
        cpu["eager"].append(c)
        for k, stepper in variants.items():
            fast._func_steppers[1] = stepper
            q, w, c = timed(fast, q0, v0, args.steps)
            wall.setdefault(k, []).append(w)
            cpu.setdefault(k, []).append(c)
            dev[k] = float((q[:args.steps // 4 + 1] - qe).abs().max())
    we, ce = statistics.median(wall["eager"]), statistics.median(cpu["eager"])
    print(f"\n| variant | wall/s | CPU/s | wall / eager | CPU / eager | max \\|q - q_eager\\| (steps 0-{args.steps // 4}) |"
          "\n|---|---:|---:|---:|---:|---:|")
    for k in wall:
        name = "eager" if k == "eager" else ("newton() per step" if k == 0 else f"chord graph, {k} steps/call")
        w, c = statistics.median(wall[k]), statistics.median(cpu[k])
        print(f"| {name} | {w:,.0f} | {c:,.0f} | {w / we:.2f}x | {c / ce:.2f}x | {dev.get(k, 0.0):.1e} |")


if __name__ == "__main__":
    main()

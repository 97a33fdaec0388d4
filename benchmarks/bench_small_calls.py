"""The per-call floor: where the time of one small routed call goes.

    python benchmarks/bench_small_calls.py [--output reports/small_calls.md] [--calls 300]

For an 8x8 and a 64x64 lattice (mask at p = 0.6), measured in this run on this
machine: construction of a lattice from a mask, then ``connected_components()`` taken
apart step by step as ``Engine.run`` does it (validation, routing with
``router.decide``, the implementation as the engine calls it, wrappers included; the
kernel host function alone; the wrapping of the result), the routed call end to end
against ``scipy.ndimage.label`` on the same mask, and the cost model checked against
real calls: ``router.stats()`` ``measured_over_predicted`` for small calls of several
operations (1.0 is a perfect prediction). Times are per call, the best of 5 rounds of
many calls (JIT compilation excluded by a warm-up call); the model check uses the mean
of ``--calls`` routed calls, as ``router.stats()`` does.
"""

from __future__ import annotations

import argparse
import platform
import sys
import timeit
from pathlib import Path

import numpy as np
from scipy import ndimage

import catalytic as cat
from catalytic import results as R
from catalytic.engine import buffer_digest, gpu_input
from catalytic.kernels.cpu import components
from catalytic.router import shipped_calibration_path

SHAPES = [(8, 8), (64, 64)]
MODEL_SHAPES = [(8, 8), (16, 16), (32, 32), (64, 64)]


def per_call(func, target=0.02):
    """Seconds per call: best of 5 rounds of enough calls to take ``target`` s each."""
    func()  # warm-up: JIT, caches
    timer = timeit.Timer(func)
    number, _ = timer.autorange()
    number = max(1, int(number * target / 0.2)) if number > 1 else number
    return min(timer.repeat(repeat=5, number=number)) / number


def _mask(shape, p=0.6, seed=0):
    return np.random.default_rng(seed).random(shape) < p


def breakdown(shape):
    """Step-by-step times (seconds) of a routed connected_components() call."""
    m = _mask(shape)
    L = cat.Lattice(shape=shape, mask=m)
    eng = L.engine
    op = "connected_components"
    L.connected_components()  # compile / load caches
    spec, args, kwargs = eng._prepare(op, (L,), {})
    dec = eng.router.decide(op, args, kwargs)
    impl = eng.registry.implementations[op][dec.backend]
    g = L.geometry
    labels, count, sizes = components.connected_components(*g.kernel_args(), sizes=True)
    rows = {
        "construction: cat.Lattice(shape, mask=m)": per_call(
            lambda: cat.Lattice(shape=shape, mask=m)),
        "validation: operation's validate()": per_call(lambda: eng._prepare(op, (L,), {})),
        "GPU-argument check: gpu_input()": per_call(lambda: gpu_input(args, kwargs)),
        "routing: router.decide()": per_call(lambda: eng.router.decide(op, args, kwargs)),
        f"implementation ({dec.backend}, with its wrappers)": per_call(lambda: impl.func(L)),
        "  of which the kernel host function": per_call(
            lambda: components.connected_components(*g.kernel_args(), sizes=True)),
        "  of which result wrapping: Components(...)": per_call(
            lambda: R.Components(labels.reshape(g.shape), count, sizes)),
        "digest of borrowed memory (path_catalytic only)": per_call(
            lambda: buffer_digest(L.key_buffer)),
        "routed end to end: L.connected_components()": per_call(L.connected_components),
        "scipy.ndimage.label(m)": per_call(lambda: ndimage.label(m)),
    }
    steps = ("validation", "GPU-argument", "routing", "implementation")
    parts = sum(t for k, t in rows.items() if k.startswith(steps))
    rows["engine bookkeeping (end to end minus the steps above)"] = (
        rows["routed end to end: L.connected_components()"] - parts)
    check, ref_count = ndimage.label(m)
    got = L.connected_components()
    assert got.count == ref_count and np.array_equal(got.labels, check)
    return dec.backend, rows


def model_check(calls):
    """router.stats() rows for small routed calls: {(op, shape): (backend, ratio, mean)}."""
    eng = cat.get_engine()
    rng = np.random.default_rng(1)
    out = {}
    for shape in MODEL_SHAPES:
        L = cat.Lattice(shape=shape, mask=_mask(shape, seed=2))
        data = rng.integers(0, 2**31, 10)
        src = int(np.flatnonzero(L.geometry.mask.reshape(-1))[0])
        ops = {
            "connected_components": L.connected_components,
            "distance_field": lambda L=L, src=src: L.distance_field(src),
            "percolates": L.percolates,
            "degree": L.degree,
            "xor_transform (10 int64)": lambda L=L, d=data: L.xor_transform(d),
        }
        for name, f in ops.items():
            f()  # compile outside the statistics
            eng.router.reset_stats()
            for _ in range(calls):
                f()
            for per in eng.router.stats().values():
                for backend, row in per.items():
                    out[(name, shape)] = (backend, row["measured_over_predicted"],
                                          row["mean_measured_s"],
                                          row["predicted_s"] / max(row["timed_calls"], 1))
    return out


def _us(t):
    return f"{t * 1e6:.1f}"


def report(results, model, source):
    lines = [
        "# Small calls: the per-call floor",
        "",
        "Generated by `python benchmarks/bench_small_calls.py` on "
        f"{platform.platform()}, Python {platform.python_version()}, "
        f"NumPy {np.__version__}. Times in microseconds per call (best of 5 rounds).",
        "",
        "## connected_components(), step by step (mask p = 0.6)",
        "",
        "| step | " + " | ".join(f"{s[0]}x{s[1]} (us)" for s in SHAPES) + " |",
        "|---|" + "---:|" * len(SHAPES),
    ]
    keys = list(results[SHAPES[0]][1])
    for k in keys:
        lines.append(f"| {k} | " + " | ".join(_us(results[s][1][k]) for s in SHAPES) + " |")
    ratio = [results[s][1]["routed end to end: L.connected_components()"]
             / results[s][1]["scipy.ndimage.label(m)"] for s in SHAPES]
    lines.append("| **routed / scipy.ndimage.label** | "
                 + " | ".join(f"**{r:.2f}x**" for r in ratio) + " |")
    lines += [
        "",
        f"Backend chosen: {', '.join(sorted({results[s][0] for s in SHAPES}))}. "
        "Steps marked 'of which' are inside the implementation row.",
        "",
        "## Cost model: router.stats() measured / predicted",
        "",
        f"Calibration: `{source}`. Mean of the routed calls over the router's "
        "prediction `overhead_s + work / throughput`. The engine times the "
        "implementation call (its thread and lock wrappers included), as "
        "`catalytic calibrate` does; validation, routing and bookkeeping (about 5 us, "
        "above) are outside both and the same for every backend.",
        "",
        "| operation | shape | backend | measured (us) | predicted (us) | measured / predicted |",
        "|---|---|---|---:|---:|---:|",
    ]
    for (name, shape), (backend, r, mean, pred) in model.items():
        lines.append(f"| {name} | {shape[0]}x{shape[1]} | {backend} | {_us(mean)} | "
                     f"{_us(pred)} | {r:.2f} |")
    worst = max(max(r, 1 / r) for _, r, _, _ in model.values())
    lines += ["", f"Largest disagreement: {worst:.2f}x (target: within 2x).", ""]
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--output", type=Path, default=Path("reports/small_calls.md"))
    ap.add_argument("--calls", type=int, default=300)
    args = ap.parse_args(argv)
    results = {}
    for shape in SHAPES:
        results[shape] = breakdown(shape)
        print(f"{shape}: backend {results[shape][0]}")
        for k, t in results[shape][1].items():
            print(f"  {k:<58} {_us(t):>8} us")
    model = model_check(args.calls)
    print("router.stats() measured / predicted:")
    for (name, shape), (backend, r, mean, pred) in model.items():
        print(f"  {name:<26} {shape!s:<9} {backend:<10} {_us(mean):>8} us / "
              f"{_us(pred):>8} us = {r:.2f}")
    source = cat.get_engine().router.calibration_source
    if Path(source) == shipped_calibration_path():
        source = "catalytic/data/calibration.json (shipped)"
    text = report(results, model, source)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

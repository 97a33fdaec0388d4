"""Percolation thresholds from Newman-Ziff sweeps, estimated by the library
(:mod:`catalytic.percolation`), and the cost of a sweep against a labelling.

    python benchmarks/percolation.py --lattice square            # site, p_c = 0.59274621
    python benchmarks/percolation.py --lattice cubic --kind bond # p_c = 0.24881182
    python benchmarks/percolation.py --lattice cubic             # site, p_c = 0.3116077
    python benchmarks/percolation.py --lattice square --quick    # a smoke run (seconds)
    python benchmarks/percolation.py --lattice square --sizes 256 --sweeps 500 --seconds 60
    python benchmarks/percolation.py --lattice square --sizes 128 --seconds 50 --blocks 64
    python benchmarks/percolation.py --sweep-cost                # a sweep vs a labelling

For each linear size L, ``--sweeps`` Newman-Ziff sweeps of the L^d torus
(``Lattice.newman_ziff``, events only; ``--chunks`` splits them through the
BatchProcessor, ``--executor dask`` onto a cluster) give per-sweep wrapping occupations.
The estimate at size L comes from :func:`catalytic.percolation.threshold` (``--estimator
wrap_any``, ``wrap`` or ``wrap_all``: where the canonical wrapping probability meets its
known value, :data:`~catalytic.percolation.TARGETS`; square lattices only) or
:func:`~catalytic.percolation.crossing` (``--estimator crossing``: where the wrapping
curves of consecutive sizes cross; the estimate is placed at the larger size), each with
its jackknife error over blocks of sweeps. Then p_L = p_c + a L^(-x) is fitted over the
sizes, weighted by those errors (x: ``--exponent``, default 2 + 1/nu for a known value,
whose corrections Newman & Ziff found to fall that fast, and 1/nu + 1 for crossings),
and p_c is reported with its standard error from the fit (scaled by sqrt(chi2/dof) when
that exceeds 1) next to the published value and the time taken. With one size (or one
crossing) there is no fit: p_c is that estimate, its finite-size correction not in its
error. ``--blocks``: jackknife blocks (default 16; more give a steadier error).

``--sweep-cost``: one full sweep (every element added, all observables recorded) against
one ``connected_components`` labelling of the same lattice, timed in the same run (best
of ``--repeat``), at 512^2 and 128^3 (``--quick``: 64^2 and 16^3), site and bond.

Writes ``--output`` (markdown: the command, per size the estimate, its error, sweeps and
seconds, then p_c) and ``--plot`` (PNG: the wrapping curves and the extrapolation).
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np

import catalytic as cat
from catalytic import percolation as P

PRESETS = {
    # (name, kind): dims, sizes, sweeps per size, reference p_c and its source
    ("square", "site"): (2, (64, 128, 256), 4000, 0.59274621,
                         "0.59274621(13), Newman & Ziff, PRL 85, 4104 (2000)"),
    ("square", "bond"): (2, (64, 128, 256), 4000, 0.5, "1/2 exactly (self-duality)"),
    ("cubic", "site"): (3, (16, 24, 32, 48), 2000, 0.3116077,
                        "0.3116077(2), Wang et al., PRE 87, 052107 (2013)"),
    ("cubic", "bond"): (3, (16, 24, 32, 48), 2000, 0.24881182,
                        "0.24881182(10), Wang et al., PRE 87, 052107 (2013)"),
}
QUICK = {2: ((16, 32), 300), 3: ((6, 10), 200)}
NU = {2: 4 / 3, 3: 0.8765}
TARGET = {"wrap_any": "square_wrap_any", "wrap": "square_wrap", "wrap_all": "square_wrap_all"}


def run_size(L, dims, kind, sweeps, seed, chunks, executor, seconds=None):
    """``(result, seconds)``: ``sweeps`` events-only sweeps of the L^d torus, or with
    ``seconds``, rounds of ``sweeps`` sweeps (the next sweep indices) until that much
    time is spent."""
    lat = cat.Lattice(shape=(L,) * dims, periodic=True)
    t0 = time.perf_counter()
    res = lat.newman_ziff(sweeps, kind=kind, seed=seed, observables=(), chunks=chunks,
                          executor=executor, progress=False)
    while seconds is not None and time.perf_counter() - t0 < seconds:
        res = res.merge(lat.newman_ziff(sweeps, kind=kind, seed=seed, first=res.sweeps,
                                        observables=(), chunks=chunks, executor=executor,
                                        progress=False))
    return res, time.perf_counter() - t0


def estimate(results, sizes, estimator, blocks=16):
    """Per size ``(L, Estimate)``: the known-value crossing of each result, or the
    crossing of each consecutive pair (placed at the larger size), with jackknife errors
    over ``blocks`` blocks of sweeps."""
    if estimator == "crossing":
        return [(sizes[i + 1], P.crossing(results[i], results[i + 1], "wrap_any",
                                          blocks=blocks))
                for i in range(len(sizes) - 1)]
    axis = {"axis": 0} if estimator == "wrap" else {}
    return [(L, P.threshold(r, estimator, P.TARGETS[TARGET[estimator]], blocks=blocks,
                            **axis))
            for L, r in zip(sizes, results)]


def extrapolate(sizes, p, err, exponent):
    """Weighted fit of p = p_c + a L^(-exponent): ``(p_c, its error, a, chi2/dof)``;
    with one size, that size's estimate and error."""
    if len(sizes) == 1:
        return float(p[0]), float(err[0]), 0.0, 0.0
    x = np.asarray(sizes, dtype=np.float64) ** (-exponent)
    A = np.stack([np.ones_like(x), x], axis=1)
    W = 1 / np.asarray(err) ** 2
    cov = np.linalg.inv(A.T @ (A * W[:, None]))
    coef = cov @ (A.T @ (W * np.asarray(p)))
    resid = (np.asarray(p) - A @ coef) / np.asarray(err)
    dof = max(len(sizes) - 2, 1)
    chi2 = float(resid @ resid) / dof
    scale = math.sqrt(max(chi2, 1.0))
    return float(coef[0]), float(math.sqrt(cov[0, 0]) * scale), float(coef[1]), chi2


def sweep_cost(quick, repeat, seed):
    """Rows ``(lattice, kind, sweep seconds, labelling seconds)``: one full sweep with
    every observable, and one connected_components of the fully open lattice."""
    rows = []
    for shape in (((64, 64), (16, 16, 16)) if quick else ((512, 512), (128, 128, 128))):
        lat = cat.Lattice(shape=shape, periodic=True)
        lat.connected_components()
        for kind in ("site", "bond"):
            lat.newman_ziff(1, kind=kind, seed=seed)  # compile outside the timing
            best_s = best_l = math.inf
            for r in range(repeat):
                t0 = time.perf_counter()
                lat.newman_ziff(1, kind=kind, seed=seed, first=r)
                best_s = min(best_s, time.perf_counter() - t0)
                t0 = time.perf_counter()
                lat.connected_components()
                best_l = min(best_l, time.perf_counter() - t0)
            rows.append(("x".join(map(str, shape)), kind, best_s, best_l))
            print(f"{rows[-1][0]:>12} {kind}: sweep {best_s * 1e3:.1f} ms, labelling "
                  f"{best_l * 1e3:.1f} ms, ratio {best_s / best_l:.2f}", flush=True)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lattice", choices=("square", "cubic"), default="square")
    ap.add_argument("--kind", choices=("site", "bond"), default="site")
    ap.add_argument("--sizes", default=None, help="comma-separated linear sizes")
    ap.add_argument("--sweeps", type=int, default=None,
                    help="sweeps per size (with --seconds: per round)")
    ap.add_argument("--seconds", type=float, default=None,
                    help="time budget of the sweeps, shared equally by the sizes: each "
                    "size runs rounds of --sweeps sweeps until its share is spent")
    ap.add_argument("--estimator", choices=("wrap_any", "wrap", "wrap_all", "crossing"),
                    default=None, help="default: wrap_any on square lattices (the known "
                    "value), crossing on cubic ones")
    ap.add_argument("--exponent", type=float, default=None,
                    help="finite-size correction exponent x in p_L = p_c + a L^-x")
    ap.add_argument("--chunks", type=int, default=None,
                    help="split each size's sweeps into this many BatchProcessor runs")
    ap.add_argument("--executor", choices=("serial", "threads", "dask"), default="serial")
    ap.add_argument("--blocks", type=int, default=16,
                    help="jackknife blocks of sweeps for the errors")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="small sizes and few sweeps")
    ap.add_argument("--sweep-cost", action="store_true",
                    help="time a sweep against a labelling instead")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--output", type=Path, default=None)
    ap.add_argument("--plot", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.sweep_cost:
        rows = sweep_cost(args.quick, args.repeat, args.seed)
        if args.output is not None:
            _cost_report(args.output, rows)
            print(f"wrote {args.output}")
        return 0
    dims, sizes, sweeps, ref, source = PRESETS[(args.lattice, args.kind)]
    if args.quick:
        sizes, sweeps = QUICK[dims]
    sizes = tuple(int(s) for s in args.sizes.split(",")) if args.sizes else sizes
    sweeps = args.sweeps or sweeps
    estimator = args.estimator or ("wrap_any" if args.lattice == "square" else "crossing")
    if estimator != "crossing" and args.lattice != "square":
        ap.error(f"--estimator {estimator} needs a known value: square lattices only")
    if estimator == "crossing" and len(sizes) < 2:
        ap.error("--estimator crossing needs at least two sizes")
    nu = NU[dims]
    exponent = args.exponent or (2 + 1 / nu if estimator != "crossing" else 1 / nu + 1)
    name = f"{args.lattice}_{args.kind}"
    out = args.output or Path(f"reports/percolation_{name}.md")
    plot = args.plot or out.with_suffix(".png")

    t_start = time.perf_counter()
    results, seconds = [], []
    share = None if args.seconds is None else args.seconds / len(sizes)
    for i, L in enumerate(sizes):
        res, sec = run_size(L, dims, args.kind, sweeps, args.seed * 1_000_003 + i,
                            args.chunks, args.executor, share)
        results.append(res)
        seconds.append(sec)
        print(f"L={L:5d}: {res.sweeps} sweeps of {res.N} {args.kind}s in {sec:.1f} s",
              flush=True)
    rows = estimate(results, sizes, estimator, args.blocks)
    for L, est in rows:
        print(f"L={L:5d}: p_L = {est.value:.6f} +- {est.stderr:.6f}")
    pc, pc_err, a, chi2 = extrapolate([L for L, _ in rows], [e.value for _, e in rows],
                                      [e.stderr for _, e in rows], exponent)
    total = time.perf_counter() - t_start
    print(f"p_c = {pc:.6f} +- {pc_err:.6f} (fit chi2/dof {chi2:.2f}); reference {ref} "
          f"({source}); difference {pc - ref:+.6f}; {total:.1f} s")
    _report(out, args, name, dims, estimator, exponent, sizes, results, seconds, rows, pc,
            pc_err, a, chi2, ref, source, total)
    _plot(plot, results, sizes, rows, pc, pc_err, exponent, a, ref, name, estimator)
    print(f"wrote {out}" + (f" and {plot}" if plot.exists() else ""))
    return 0


def _report(path, args, name, dims, estimator, exponent, sizes, results, seconds, rows, pc,
            pc_err, a, chi2, ref, source, total):
    how = ("where the curves of consecutive sizes cross (placed at the larger size)"
           if estimator == "crossing" else
           f"where the canonical {estimator} probability meets "
           f"{P.TARGETS[TARGET[estimator]]}")
    lines = [
        f"# Percolation threshold: {name.replace('_', ' ')} ({dims}-D tori, Newman-Ziff)",
        "",
        f"Measured by `python benchmarks/percolation.py {' '.join(sys.argv[1:])}` on "
        f"{platform.platform()}; seed {args.seed}; p_L "
        f"{how}, with the jackknife error over {args.blocks} blocks of sweeps "
        f"(`catalytic.percolation`); {total:.1f} s in all.",
        "",
        "| L | p_L | standard error | sweeps | seconds |",
        "|---:|---:|---:|---:|---:|",
    ]
    sec = dict(zip(sizes, seconds))
    count = {L: r.sweeps for L, r in zip(sizes, results)}
    for L, est in rows:
        lines.append(f"| {L} | {est.value:.6f} | {est.stderr:.6f} | {count[L]} | "
                     f"{sec[L]:.1f} |")
    fit = (f"Fit p_L = p_c + a L^(-{exponent:.4f}): **p_c = {pc:.6f} +- {pc_err:.6f}**, "
           f"a = {a:.4g}, chi2/dof = {chi2:.2f}." if len(rows) > 1 else
           f"One {'crossing' if estimator == 'crossing' else 'size'}, not extrapolated: "
           f"**p_c = {pc:.6f} +- {pc_err:.6f}**, p_L itself (its finite-size correction, "
           f"of order L^(-{exponent:.4f}), is not in the error).")
    lines += [
        "",
        fit,
        f"Reference: {ref} ({source}); difference {pc - ref:+.6f} "
        f"({abs(pc - ref) / pc_err:.1f} standard errors)." if pc_err > 0 else "",
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def _cost_report(path, rows):
    lines = [
        "# Cost of a Newman-Ziff sweep against a labelling",
        "",
        f"Measured by `python benchmarks/percolation.py {' '.join(sys.argv[1:])}` on "
        f"{platform.platform()}: one full sweep (every element added, every observable "
        "recorded) and one `connected_components` of the same open torus, best of the "
        "repeats, in the same run.",
        "",
        "| lattice | kind | sweep (ms) | labelling (ms) | ratio |",
        "|---|---|---:|---:|---:|",
    ]
    for shape, kind, s, lab in rows:
        lines.append(f"| {shape} | {kind} | {s * 1e3:.1f} | {lab * 1e3:.1f} | {s / lab:.2f} |")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def _plot(path, results, sizes, rows, pc, pc_err, exponent, a, ref, name, estimator):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (pip install matplotlib)")
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    ps = np.linspace(max(0.0, pc - 0.1), min(1.0, pc + 0.1), 81)
    for L, res in zip(sizes, results):
        m, e = res.canonical("wrap_any", ps)
        axes[0].plot(ps, m, "-", label=f"L = {L}")
        axes[0].fill_between(ps, m - e, m + e, alpha=0.3)
    if estimator != "crossing":
        axes[0].axhline(P.TARGETS[TARGET[estimator]], color="k", lw=0.8, ls=":")
    axes[0].axvline(pc, color="k", lw=0.8, ls="--")
    axes[0].set_xlabel("p")
    axes[0].set_ylabel("wrapping probability (either axis)")
    axes[0].legend()
    x = np.array([L for L, _ in rows], dtype=float) ** (-exponent)
    axes[1].errorbar(x, [e.value for _, e in rows], yerr=[e.stderr for _, e in rows], fmt="o")
    xs = np.linspace(0, x.max() * 1.05, 50)
    axes[1].plot(xs, pc + a * xs, "-", label=f"fit: p_c = {pc:.6f} +- {pc_err:.6f}")
    axes[1].axhline(ref, color="g", lw=0.8, label=f"reference {ref}")
    axes[1].set_xlabel(f"L^(-{exponent:.3f})")
    axes[1].set_ylabel("p_L")
    axes[1].legend()
    fig.suptitle(f"percolation, {name.replace('_', ' ')}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    raise SystemExit(main())

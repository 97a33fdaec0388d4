"""Site percolation through the batch processor: spanning curves, the largest cluster,
and the threshold p_c by finite-size scaling.

    python benchmarks/percolation.py --lattice square          # p_c = 0.592746...
    python benchmarks/percolation.py --lattice cubic           # p_c = 0.3116081...
    python benchmarks/percolation.py --dims 2 --stencil moore --sizes 32,64,128 --nu 1.3333
    python benchmarks/percolation.py --dims 2 --aspect 2,1 --sizes 32,64,128 --guess 0.59

For each linear size L and each p on a grid around the threshold, ``--samples`` seeded
lattices (``base.with_mask(mask)``, one geometry) go through ``BatchProcessor.map(
"spanning_clusters", axes=(0,))``: a cluster touching both faces of axis 0 (open axes)
or wrapping around it (``--periodic``: every axis periodic) counts as spanning; the
largest cluster's share of the sites is recorded too. Per L, the spanning probability
R_L(p) is fitted by maximum likelihood to an error-function step, giving p_50(L) (where
R_L = 1/2) and its standard error; then p_50(L) = p_c + a L^(-1/nu) is fitted over the
sizes (nu: 4/3 in 2-D, 0.8765 in 3-D, or ``--nu``), weighted by those errors, and p_c
is reported with its standard error from the fit (scaled by sqrt(chi2/dof) when that
exceeds 1). The error-function shape is a model (the 3-D curves are a little skewed),
and its bias at each size is part of what the extrapolation absorbs; ``--method
newman-ziff`` needs no model: one sweep per sample (the ``spanning_thresholds``
operation) gives the sample's spanning threshold, and R_L(p) is their distribution
convolved with the binomial. Masks come from ``numpy.random.default_rng((seed, L, p index))``: every run
with the same options draws the same lattices.

Writes ``--output`` (markdown: the run's options, p_50 per size, p_c, the reference
value and the difference, times) and ``--plot`` (PNG: the spanning curves and the
extrapolation).
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

PRESETS = {
    # name: dims, stencil, sizes, reference p_c and its source
    "square": (2, "von_neumann", (64, 128, 256, 512), 0.592746,
               "0.59274621(13), Newman & Ziff, PRL 85, 4104 (2000)"),
    "cubic": (3, "von_neumann", (16, 24, 32, 48), 0.3116081,
              "0.3116081(13), Deng & Bloete, PRE 72, 016126 (2005)"),
}
NU = {2: 4 / 3, 3: 0.8765}
#: where to look first (the grid per size is centred on the previous size's p_50)
GUESS = {("square", False): 0.59, ("cubic", False): 0.31}


def shape_of(L, dims, aspect):
    """The lattice of linear size ``L``: ``round(L * aspect[a])`` sites along axis a."""
    return tuple(max(1, round(L * aspect[a])) for a in range(dims))


def spanning_run(L, p, samples, seed, periodic, stencil, dims, p_index, aspect):
    """``(spanning count, mean largest-cluster share)`` of ``samples`` lattices."""
    shape = shape_of(L, dims, aspect)
    base = cat.Lattice(shape=shape, periodic=periodic, stencil=stencil)
    rng = np.random.default_rng((seed, L, p_index))
    lattices = [base.with_mask(rng.random(shape) < p) for _ in range(samples)]
    res = cat.BatchProcessor(lattices, progress=False).map("spanning_clusters", axes=(0,))
    if not res.ok:
        raise RuntimeError(f"failed samples: {res.errors}")
    span = sum(bool(r.clusters[0].size) for r in res)
    largest = np.mean([r.components.sizes.max() / base.n_points if r.components.count else 0.0
                       for r in res])
    return span, float(largest)


def canonical(th, m, p):
    """Newman-Ziff's convolution: the spanning probability at occupation probability
    ``p`` from per-sample thresholds ``th`` (occupied sites at first spanning, -1 never)
    on ``m`` open sites: sum over n of Binomial(m, p)(n) * P(threshold <= n)."""
    from scipy.stats import binom

    counts = np.bincount(th[th > 0], minlength=m + 1)
    F = np.cumsum(counts) / len(th)
    return float(binom.pmf(np.arange(m + 1), m, p) @ F)


def newman_ziff_size(L, dims, stencil, samples, seed, ps, aspect):
    """``(R(p) on ps, p_50, its standard error, thresholds)`` from ``samples`` sweeps
    (``spanning_thresholds``, routed like any operation). p_50 solves R(p) = 1/2 by
    bisection; its error is the bootstrap spread of the samples' median threshold
    (200 resamples), which the binomial smoothing changes by O(1/m) only."""
    base = cat.Lattice(shape=shape_of(L, dims, aspect), stencil=stencil)
    th = base.run("spanning_thresholds", samples, axis=0, seed=seed)
    m = base.geometry.n_open
    lo, hi = 0.0, 1.0
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if canonical(th, m, mid) < 0.5 else (lo, mid)
    rng = np.random.default_rng(seed)
    boot = [np.median(rng.choice(th, len(th))) / m for _ in range(200)]
    return [canonical(th, m, p) for p in ps], (lo + hi) / 2, float(np.std(boot)), th


def fit_step(ps, k, n):
    """Maximum-likelihood fit of R(p) = Phi((p - p50) / w) to k of n spanning at each p:
    ``(p50, w, standard error of p50)`` (the error from the observed information)."""
    from scipy.optimize import minimize
    from scipy.special import ndtr

    ps, k, n = (np.asarray(a, dtype=np.float64) for a in (ps, k, n))

    def nll(theta):
        p50, logw = theta
        r = np.clip(ndtr((ps - p50) / math.exp(logw)), 1e-12, 1 - 1e-12)
        return -float(np.sum(k * np.log(r) + (n - k) * np.log(1 - r)))

    frac = k / n
    start = [float(np.interp(0.5, frac, ps)) if frac[0] < 0.5 < frac[-1] else float(ps.mean()),
             math.log((ps[-1] - ps[0]) / 4)]
    best = minimize(nll, start, method="Nelder-Mead",
                    options={"xatol": 1e-9, "fatol": 1e-9, "maxiter": 4000})
    p50, logw = best.x
    h = 1e-5  # observed information for p50 (w profiled at its optimum)
    d2 = (nll([p50 + h, logw]) - 2 * nll([p50, logw]) + nll([p50 - h, logw])) / h ** 2
    return float(p50), float(math.exp(logw)), float(1 / math.sqrt(d2)) if d2 > 0 else math.inf


def extrapolate(sizes, p50, err, nu):
    """Weighted fit of p50 = p_c + a L^(-1/nu): ``(p_c, its error, a, chi2/dof)``."""
    x = np.asarray(sizes, dtype=np.float64) ** (-1 / nu)
    A = np.stack([np.ones_like(x), x], axis=1)
    W = 1 / np.asarray(err) ** 2
    cov = np.linalg.inv(A.T @ (A * W[:, None]))
    coef = cov @ (A.T @ (W * np.asarray(p50)))
    resid = (np.asarray(p50) - A @ coef) / np.asarray(err)
    dof = max(len(sizes) - 2, 1)
    chi2 = float(resid @ resid) / dof
    scale = math.sqrt(max(chi2, 1.0))
    return float(coef[0]), float(math.sqrt(cov[0, 0]) * scale), float(coef[1]), chi2


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lattice", choices=sorted(PRESETS), default=None)
    ap.add_argument("--dims", type=int, default=None)
    ap.add_argument("--stencil", default=None, help="von_neumann (default) or moore")
    ap.add_argument("--sizes", default=None, help="comma-separated linear sizes")
    ap.add_argument("--periodic", action="store_true",
                    help="every axis periodic: spanning = wrapping around axis 0")
    ap.add_argument("--aspect", default=None,
                    help="comma-separated length multipliers per axis (default all 1: "
                    "cubes); e.g. 2,1 spans a 2L x L rectangle along its long axis")
    ap.add_argument("--method", choices=("batch", "newman-ziff"), default="batch",
                    help="batch: lattices at each p through the BatchProcessor (default); "
                    "newman-ziff: one sweep per sample gives the whole curve (open axes)")
    ap.add_argument("--samples", type=int, default=800, help="lattices per (size, p)")
    ap.add_argument("--points", type=int, default=9, help="p values per size")
    ap.add_argument("--guess", type=float, default=None, help="where the threshold is")
    ap.add_argument("--nu", type=float, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reference", type=float, default=None)
    ap.add_argument("--output", type=Path, default=None)
    ap.add_argument("--plot", type=Path, default=None)
    args = ap.parse_args(argv)
    name = args.lattice or "custom"
    dims, stencil, sizes, ref, source = PRESETS.get(name, (2, "von_neumann", (32, 64, 128), None, ""))
    dims = args.dims or dims
    stencil = args.stencil or stencil
    sizes = tuple(int(s) for s in args.sizes.split(",")) if args.sizes else sizes
    if args.reference is not None:
        ref, source = args.reference, "given with --reference"
    nu = args.nu or NU.get(dims, 1.0)
    aspect = (tuple(float(x) for x in args.aspect.split(",")) if args.aspect
              else (1.0,) * dims)
    if len(aspect) != dims or min(aspect) <= 0:
        ap.error(f"--aspect needs {dims} positive numbers, got {args.aspect!r}")
    guess = args.guess or GUESS.get((name, args.periodic), 0.5)
    out = args.output or Path(f"reports/percolation_{name}.md")
    plot = args.plot or out.with_suffix(".png")

    t_start = time.perf_counter()
    curves = []
    centre = guess
    for L in sizes:
        half = 2.5 * L ** (-1 / nu)  # the transition's width shrinks as L^(-1/nu)
        ps = np.linspace(centre - half, centre + half, args.points)
        t0 = time.perf_counter()
        if args.method == "newman-ziff":
            if args.periodic:
                ap.error("--method newman-ziff finds spanning on open axes; drop --periodic")
            R, p50, err, th = newman_ziff_size(L, dims, stencil, args.samples,
                                               args.seed * 1_000_003 + L, ps, aspect)
            k = np.array(R) * args.samples
            w = float(np.std(th[th > 0]) / np.prod(shape_of(L, dims, aspect)))
            largest = None
        else:
            rows = [spanning_run(L, float(p), args.samples, args.seed, args.periodic,
                                 stencil, dims, i, aspect) for i, p in enumerate(ps)]
            k = np.array([r[0] for r in rows])
            p50, w, err = fit_step(ps, k, np.full(len(ps), args.samples))
            largest = [r[1] for r in rows]
        centre = p50
        curves.append({"L": L, "p": ps, "k": k, "n_samples": args.samples,
                       "largest": largest, "p50": p50, "w": w, "err": err,
                       "seconds": time.perf_counter() - t0})
        what = (f"{args.samples} sweeps" if args.method == "newman-ziff"
                else f"{args.points} x {args.samples} lattices")
        print(f"L={L:5d}: p_50 = {p50:.5f} +- {err:.5f}, width {w:.4f} "
              f"({what}, {curves[-1]['seconds']:.1f} s)", flush=True)
    pc, pc_err, a, chi2 = extrapolate([c["L"] for c in curves], [c["p50"] for c in curves],
                                      [c["err"] for c in curves], nu)
    total = time.perf_counter() - t_start
    line = f"p_c = {pc:.5f} +- {pc_err:.5f} (fit chi2/dof {chi2:.2f})"
    if ref is not None:
        line += f"; reference {ref} ({source}); difference {pc - ref:+.5f}"
    print(line)
    _report(out, args, name, dims, stencil, nu, curves, pc, pc_err, a, chi2, ref, source, total)
    _plot(plot, curves, pc, pc_err, nu, a, ref, name)
    print(f"wrote {out} and {plot} ({total:.0f} s)")
    return 0


def _report(path, args, name, dims, stencil, nu, curves, pc, pc_err, a, chi2, ref, source,
            total):
    lines = [
        f"# Site percolation: {name} ({dims}-D, "
        f"{'L^d' if not args.aspect else 'L x (' + args.aspect + ')'} sites, {stencil}, "
        f"{'periodic: wrapping' if args.periodic else 'open: spanning'} along axis 0)",
        "",
        f"Measured by `python benchmarks/percolation.py {' '.join(sys.argv[1:])}` on "
        f"{platform.platform()}; "
        + (f"{args.samples} Newman-Ziff sweeps per size (the spanning threshold of each, "
           "convolved with the binomial for R(p); p_50 error from a bootstrap of the "
           "median threshold)" if args.method == "newman-ziff" else
           f"{args.samples} seeded lattices per (L, p), {args.points} values of p per "
           "size, through the BatchProcessor")
        + f", seed {args.seed}; {total:.0f} s in all.",
        "",
        "| L | p_50(L) | standard error | width | lattices | seconds |"
        if args.method == "batch" else
        "| L | p_50(L) | standard error | width | sweeps | seconds |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for c in curves:
        count = (args.samples if args.method == "newman-ziff"
                 else len(c["p"]) * args.samples)
        lines.append(f"| {c['L']} | {c['p50']:.5f} | {c['err']:.5f} | {c['w']:.4f} | "
                     f"{count} | {c['seconds']:.1f} |")
    lines += [
        "",
        f"Fit p_50(L) = p_c + a L^(-1/nu) with nu = {nu:.4f}: **p_c = {pc:.5f} +- "
        f"{pc_err:.5f}**, a = {a:.3f}, chi2/dof = {chi2:.2f}.",
    ]
    if ref is not None:
        lines.append(f"Reference: {ref} ({source}); difference {pc - ref:+.5f} "
                     f"({abs(pc - ref) / pc_err:.1f} standard errors).")
    lines += ["", f"Spanning curves and the largest cluster: `{path.with_suffix('.png').name}`."]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def _plot(path, curves, pc, pc_err, nu, a, ref, name):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (pip install matplotlib)")
        return
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for c in curves:
        axes[0].plot(c["p"], c["k"] / c["n_samples"], "o-", ms=3, label=f"L = {c['L']}")
        if c["largest"] is not None:
            axes[1].plot(c["p"], c["largest"], "o-", ms=3, label=f"L = {c['L']}")
    if curves[0]["largest"] is None:
        axes[1].text(0.5, 0.5, "largest cluster: recorded by the batch method",
                     ha="center", transform=axes[1].transAxes)
    for ax in axes[:2]:
        ax.axvline(pc, color="k", lw=0.8, ls="--")
        ax.set_xlabel("p")
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    axes[0].set_ylabel("spanning probability")
    axes[1].set_ylabel("largest cluster / sites")
    x = np.array([c["L"] for c in curves], dtype=float) ** (-1 / nu)
    axes[2].errorbar(x, [c["p50"] for c in curves], yerr=[c["err"] for c in curves], fmt="o")
    xs = np.linspace(0, x.max() * 1.05, 50)
    axes[2].plot(xs, pc + a * xs, "-", label=f"fit: p_c = {pc:.5f} +- {pc_err:.5f}")
    if ref is not None:
        axes[2].axhline(ref, color="g", lw=0.8, label=f"reference {ref}")
    axes[2].set_xlabel(f"L^(-1/nu), nu = {nu:.3f}")
    axes[2].set_ylabel("p_50(L)")
    axes[2].legend()
    fig.suptitle(f"site percolation, {name}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    raise SystemExit(main())

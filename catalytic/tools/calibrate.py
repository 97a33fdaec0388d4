"""Measure the router's cost model on this machine: ``catalytic calibrate``.

For every operation with more than one backend, each available backend runs the
operation at several sizes (after a warm-up call, so JIT compilation is not counted;
the median of at least ``repeat`` timings), through the implementation function the
engine calls (with its thread and lock wrappers): the time ``Router.stats`` measures
for a routed call. A fit of ``seconds = overhead_s + work / throughput``
minimising *relative* error (non-negative least squares) gives the two parameters.
The samples are stored with the fit, so the file shows what was measured.

Run ``python -m catalytic.tools.calibrate --output PATH`` (default: the user's config file,
which the router prefers over the shipped one).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import time
from pathlib import Path

import numpy as np


def _lattice(shape, p_open=0.7, weighted=False, seed=1):
    import catalytic as cat

    rng = np.random.default_rng(seed)
    mask = rng.random(shape) < p_open
    flat = mask.reshape(-1)
    flat[0] = flat[-1] = True
    weights = rng.uniform(0.5, 2.0, shape) if weighted else None
    return cat.UnifiedCatalyticLattice(shape=shape, mask=mask, weights=weights, seed=seed)


def _endpoints(L):
    """First and last site of the largest cluster, so path searches do real work."""
    from scipy import ndimage

    mask = np.ones(L.shape, bool) if L.geometry.mask is None else L.geometry.mask
    lab, n = ndimage.label(mask)
    if n == 0:
        return 0, 0
    big = 1 + int(np.argmax(np.bincount(lab.reshape(-1))[1:]))
    sites = np.flatnonzero(lab.reshape(-1) == big)
    return int(sites[0]), int(sites[-1])


def _cases(quick: bool):
    """(operation, label, make_args) triples, small to large."""
    # small lattices are sampled densely: ensembles make many calls on them, and there
    # the fixed cost per call is most of the time
    sizes2d = [(8, 8), (16, 16), (32, 32), (64, 64), (128, 128), (512, 512)]
    sizes3d = [(6, 6, 6), (20, 20, 20), (60, 60, 60)]
    if quick:
        sizes2d, sizes3d = sizes2d[:5], sizes3d[:2]
    lattices = [_lattice(s) for s in sizes2d + sizes3d]
    weighted = [_lattice(s, weighted=True) for s in sizes2d]
    full = [_lattice(s, p_open=1.1) for s in sizes2d + sizes3d]
    n_data = [10, 1_000, 100_000, 3_000_000] if not quick else [10, 1_000, 100_000]
    rng = np.random.default_rng(0)
    cases = []
    for L in lattices:
        a, b = _endpoints(L)
        cases += [
            ("distance_field", L, lambda L=L, a=a: ((L, np.array([a])), {})),
            ("shortest_path", L, lambda L=L, a=a, b=b: ((L, a, b), {})),
            ("count_shortest_paths", L, lambda L=L, a=a, b=b: ((L, a, b), {})),
            ("connected_components", L, lambda L=L: ((L,), {})),
            ("percolates", L, lambda L=L: ((L,), {"axis": 0})),
            ("degree", L, lambda L=L: ((L,), {})),
            ("laplacian", L, lambda L=L: ((L, np.ones(L.shape)), {})),
            ("diffuse", L, lambda L=L: ((L, np.ones(L.shape)), {"steps": 4, "alpha": 0.1})),
            ("path_catalytic", L, lambda L=L, a=a, b=b: ((L, a, b, L.key_buffer), {})),
        ]
        if L.n_points <= 5000:
            # the costly method, where the choice matters; work counts n sources x n k
            cases.append(("centrality", L, lambda L=L: ((L,), {"method": "closeness"})))
    for L in weighted:
        a, b = _endpoints(L)
        cases.append(("distance_field", L, lambda L=L, a=a: ((L, np.array([a])), {})))
        cases.append(("shortest_path", L, lambda L=L, a=a, b=b: ((L, a, b), {})))
    for L in full:
        cases.append(("distance_field", L, lambda L=L: ((L, np.array([0])), {})))
        cases.append(("connected_components", L, lambda L=L: ((L,), {})))
    # batched twins: ensembles of masks, few and many rows (the router compares their
    # cost with the reference loop's)
    for shape in sizes2d[:5:2] + sizes3d[:1]:
        L = _lattice(shape)
        for B in (4, 64):
            stack = (rng.random((B, L.n_points)) < 0.6).astype(np.uint8)
            stack[:, 0] = 1  # the source of the distance fields
            cases += [
                ("batched.connected_components", L, lambda L=L, s=stack: ((L, s), {})),
                ("batched.percolates", L, lambda L=L, s=stack: ((L, s), {"axis": 0})),
                ("batched.distance_field", L,
                 lambda L=L, s=stack: ((L, s, np.array([0])), {})),
            ]
    for n in n_data:
        ints = rng.integers(0, 2**31, n)
        floats = rng.random(n)
        L = lattices[0]
        cases += [
            ("xor_transform", L, lambda d=ints, L=L: ((L, d, None), {})),
            ("normalize", None, lambda d=floats: ((d,), {})),
            ("scale", None, lambda d=floats: ((d,), {"factor": 2.0})),
            ("reduce", None, lambda d=floats: ((d, "sum"), {})),
            ("elementwise", None, lambda d=floats: (("mul", d, d), {})),
            ("random", None, lambda n=n: (((n,), 1, "uniform"), {})),
        ]
    for m in ([4, 32, 128, 384] if not quick else [4, 32, 128]):
        a = rng.random((m, m))
        cases.append(("matmul", None, lambda a=a: ((a, a), {})))
    return cases


def _simulator() -> bool:
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1"


def _time(func, args, kwargs, repeat):
    """Median seconds of one call of ``func`` after a warm-up call: at least ``repeat``
    calls, and more (up to 200) until 0.05 s were spent. The median, not the best: the
    router checks its predictions against the mean time of real calls
    (``Router.stats``), which the fastest of many runs underestimates."""
    func(*args, **kwargs)  # warm-up: JIT compile, caches
    times = []
    total = 0.0
    while len(times) < repeat or (total < 0.05 and len(times) < 200):
        t0 = time.perf_counter()
        func(*args, **kwargs)
        dt = time.perf_counter() - t0
        times.append(dt)
        total += dt
    return float(np.median(times))


def fit(samples):
    """Fit ``t = a + w / throughput`` to ``[(work, seconds), ...]`` minimising relative
    error with a, 1/throughput >= 0; returns ``(overhead_s, throughput)``."""
    from scipy.optimize import nnls

    w = np.array([s[0] for s in samples], dtype=np.float64)
    t = np.array([s[1] for s in samples], dtype=np.float64)
    A = np.stack([1.0 / t, w / t], axis=1)
    (a, b), _ = nnls(A, np.ones_like(t))
    throughput = 1.0 / b if b > 0 else 1e15
    return float(a), float(throughput)


def calibrate(*, quick=False, repeat=3, verbose=True, ops=None):
    """Measure every multi-backend operation (or only those named in ``ops``) on every
    available backend; return the calibration document (not yet written)."""
    import numba

    import catalytic as cat

    eng = cat.get_engine()
    reg = eng.registry
    samples: dict = {}
    # the parameters of the backends' cost terms (the cuda backend's launches and PCIe
    # copies), measured first: the fit below is of what the terms leave over
    term_params: dict = {}
    ok, _ = reg.backends.get("cuda").status() if "cuda" in reg.backends else (False, "")
    if ok and not _simulator():
        from catalytic.backends import cuda_backend

        term_params["cuda"] = cuda_backend.measure_terms()
        if verbose:
            print(f"  cuda cost terms: {term_params['cuda']}", flush=True)
    for op, L, make in _cases(quick):
        if ops is not None and op not in ops:
            continue
        impls = reg.implementations.get(op, {})
        if len(impls) < 2:
            continue
        args, kwargs = make()
        spec = reg.operation(op)
        work = float(spec.work(*args, **kwargs))
        for backend, impl in impls.items():
            ok, _ = reg.backends[backend].status()
            if not ok or (backend == "cuda" and _simulator()):
                continue  # the simulator's speed says nothing about a GPU's
            if impl.supports is not None and impl.supports(*args, **kwargs) is not None:
                continue
            t = _time(impl.func, args, kwargs, repeat)
            if impl.terms is not None:
                extra = impl.terms(term_params.get(backend, {}), *args, **kwargs)
                t = max(t - sum(extra.values()), 0.0)
            samples.setdefault(op, {}).setdefault(backend, []).append([work, t])
            if verbose:
                print(f"  {op:<22} {backend:<10} work={work:>12.4g}  {t * 1e3:10.4f} ms", flush=True)
    entries = {}
    for op, per in samples.items():
        for backend, s in per.items():
            overhead, throughput = fit(s)
            entries.setdefault(op, {})[backend] = {
                "overhead_s": overhead,
                "throughput": throughput,
                "samples": s,
            }
    return {
        "version": 1,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
            "numpy": np.__version__,
            "numba": numba.__version__,
            "numba_threads": numba.get_num_threads(),
        },
        "model": ("seconds = overhead_s + work / throughput (work units: see each "
                  "operation) + a backend's cost terms, whose parameters are under terms "
                  "(samples: seconds less those terms)"),
        "entries": entries,
        "terms": term_params,
    }


def main(argv=None):
    from catalytic.router import user_calibration_path

    ap = argparse.ArgumentParser(prog="catalytic calibrate", description=__doc__.splitlines()[0])
    ap.add_argument("--output", "-o", type=Path, default=None,
                    help=f"where to write (default {user_calibration_path()})")
    ap.add_argument("--quick", action="store_true", help="fewer, smaller sizes")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--ops", default=None,
                    help="comma-separated operations to measure; their entries replace "
                         "those of the output file, whose other entries are kept")
    args = ap.parse_args(argv)
    out = args.output or user_calibration_path()
    print(f"calibrating on this machine (JIT warm-up not counted); writing {out}")
    ops = None if args.ops is None else {o.strip() for o in args.ops.split(",") if o.strip()}
    doc = calibrate(quick=args.quick, repeat=args.repeat, ops=ops)
    if ops is not None and out.is_file():
        from catalytic.router import read_calibration

        old = read_calibration(out)
        entries = {**{k: v for k, v in old["entries"].items() if k not in ops},
                   **doc["entries"]}
        # the file still describes the run that measured most of it
        doc = {**old, "entries": entries, "terms": {**old.get("terms", {}), **doc["terms"]}}
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w") as fh:
        json.dump(doc, fh, indent=1)
    print(f"wrote {sum(len(v) for v in doc['entries'].values())} (operation, backend) fits to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""GPU benchmarks for the cuda backend; writes reports/gpu.md with the device's name.

    python benchmarks/bench_gpu.py --cpu-bfs-seconds 5.24 \
        --cc3d-seconds 2048x2048=0.0567,512x512x512=2.10   # on a machine with an NVIDIA GPU
    NUMBA_ENABLE_CUDASIM=1 python benchmarks/bench_gpu.py --smoke   # wiring check only

``benchmarks/gpu_proof.sh`` runs it with those figures (and the CUDA tests, calibration
and memory benchmark). ``--parts`` runs some of the six parts below; ``--append`` adds
their table to an existing report as a section. The report is rewritten after each part
(and each size of the sweep), so a run stopped early leaves what it measured, marked
incomplete.

Measured in one run on the device:
1. XOR (a key of 1000 bytes and one of 13), elementwise, float sum and normalize
   bandwidth as a fraction of the device-to-device copy bandwidth measured in the same
   run (target >= 70%): bytes each call must move (read + written) over its time;
2. a 512^3 BFS distance field on cuda (kernel time, data resident) against the
   numba-cpu figure given with --cpu-bfs-seconds (measured on the 2-core development
   machine; the issue's target is >= 20x) and against numba-cpu on this machine;
3. connected components of 2048^2 at p = 0.6 and 512^3 at p = 0.35 (labels and count
   back on the host, as cc3d returns them, mask resident; and the whole call) against
   cc3d's time given with --cc3d-seconds (measured on the development machine: 0.0567
   and 2.10 s on 2026-11-25; the issue's target is >= 10x), cc3d on this machine where
   installed, and numba-cpu on this machine;
4. host-device copies of 256 MiB from pageable memory (what a NumPy array is) and from
   pinned memory, each way: whether staging large copies through pinned buffers could
   pay (it adds a host memcpy of its own);
5. the resistor-network solve (``L.transport``) on 512^2 and 128^3 lattices at and
   above the percolation threshold (``bench_transport.py``'s cases), cuda against
   numba-cpu on this machine, the whole call and the iteration alone;
6. a size sweep (distance field, components, Laplacian, XOR) where every call runs on
   every backend and the router's unforced choice is compared with the measured fastest
   (run ``catalytic calibrate`` on the machine first: uncalibrated GPU costs are guesses).
``--smoke`` shrinks every size so the script can run under the simulator: its figures
are then meaningless and the report says so.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

import catalytic as cat
from catalytic.backends import cuda_backend as cb


def _sync():
    from numba import cuda

    cuda.synchronize()


def _best(func, repeat):
    func()
    _sync()
    best = np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        func()
        _sync()
        best = min(best, time.perf_counter() - t0)
    return best


def bandwidth(n_bytes, repeat, rows, facts):
    from numba import cuda

    from catalytic.kernels.cuda import arrays

    n = n_bytes // 8
    a = cuda.to_device(np.arange(n, dtype=np.uint64))
    b = cuda.device_array_like(a)
    t_copy = _best(lambda: b.copy_to_device(a), repeat)
    copy_bw = 2 * a.nbytes / t_copy  # read + write
    rows.append((f"device-to-device copy, {a.nbytes / 2**20:.0f} MiB", f"{copy_bw / 1e9:.0f} GB/s", "reference"))
    facts["bandwidth"] = {"copy": copy_bw}

    def measure(fact, label, moved, call):
        bw = moved / _best(call, repeat)
        rows.append((label, f"{bw / 1e9:.0f} GB/s", f"{bw / copy_bw:.0%} of copy (target >= 70%)"))
        facts["bandwidth"][fact] = bw

    rng = np.random.default_rng(0)
    a8, b8 = a.view(np.uint8), b.view(np.uint8)
    for p in (1000, 13):
        key = cuda.to_device(np.frombuffer(rng.bytes(p), dtype=np.uint8))
        measure(f"xor_{p}", f"xor_bytes ({p}-byte key)", 2 * a.nbytes,
                lambda key=key: arrays.xor_bytes(a8, key, b8))
    f = cuda.to_device(np.random.default_rng(1).random(n))
    g = cuda.device_array_like(f)
    out = cuda.device_array_like(f)
    measure("mul", "elementwise mul", 3 * f.nbytes, lambda: arrays.elementwise("mul", f, g, out))
    measure("sum", "reduce sum, float64 (reads only)", f.nbytes, lambda: arrays.reduce(f, "sum"))
    measure("normalize", "normalize, float64 (min-max pass, then the map)", 3 * f.nbytes,
            lambda: arrays.normalize(f, out))


def bfs(side, repeat, cpu_seconds, rows, facts):
    from catalytic.kernels.cuda import graph

    L = cat.Lattice(shape=(side, side, side))
    args = cb._args(L)
    t_gpu = _best(lambda: graph.bfs_distance(*args, np.array([0])), repeat)
    d = cb.to_host(graph.bfs_distance(*args, np.array([0])))
    ok = int(d.max()) == 3 * (side - 1)
    t_cpu_here = _best(lambda: L.distance_field(0, backend="numba-cpu"), 1)
    rows.append((f"BFS distance field {side}^3 ({L.n_points:,} sites), cuda kernel, resident",
                 f"{t_gpu * 1e3:.1f} ms", f"closed form {'ok' if ok else 'WRONG'}"))
    rows.append(("same, numba-cpu on this machine", f"{t_cpu_here * 1e3:.1f} ms", f"{t_cpu_here / t_gpu:.1f}x"))
    if cpu_seconds:
        rows.append(("same, numba-cpu on the 2-core dev machine (given)", f"{cpu_seconds * 1e3:.0f} ms",
                     f"{cpu_seconds / t_gpu:.1f}x (target >= 20x)"))
    facts["bfs"] = {"side": side, "gpu_s": t_gpu, "cpu_here_s": t_cpu_here, "cpu_dev_s": cpu_seconds, "correct": ok}


def components(shapes, repeat, cc3d_given, rows, facts):
    """The cuda labelling with labels and count back on the host (what cc3d returns),
    and the whole ``L.connected_components(backend="cuda")`` call (sizes counted on the
    host too), mask resident, against cc3d, given and measured here, and numba-cpu
    here; labels checked against numba-cpu's."""
    from catalytic.kernels.cuda import graph

    try:
        import cc3d
    except ImportError:
        cc3d = None
    out = facts.setdefault("components", [])
    for shape, p in shapes:
        size = "x".join(map(str, shape))
        mask = np.random.default_rng(0).random(shape) < p
        L = cat.Lattice(shape=shape, mask=mask)
        args = cb._args(L)
        labels, count = graph.connected_components(*args)
        ref = L.connected_components(backend="numba-cpu")
        ok = count == ref.count and np.array_equal(labels.reshape(shape), ref.labels)
        t_gpu = _best(lambda: graph.connected_components(*args), repeat)
        t_api = _best(lambda: L.connected_components(backend="cuda"), repeat)
        t_cpu = _best(lambda: L.connected_components(backend="numba-cpu"), min(repeat, 3))
        rows.append((f"components {size}, p = {p}, cuda labels and count on the host",
                     f"{t_gpu * 1e3:.1f} ms", f"labels {'= numba-cpu' if ok else 'DIFFER'}"))
        rows.append(("same, the whole call (sizes counted too)", f"{t_api * 1e3:.1f} ms", ""))
        rows.append(("same, numba-cpu on this machine", f"{t_cpu * 1e3:.1f} ms",
                     f"{t_cpu / t_gpu:.1f}x"))
        fact = {"shape": shape, "p": p, "gpu_s": t_gpu, "api_s": t_api, "cpu_here_s": t_cpu,
                "correct": ok}
        if cc3d is not None:
            conn = 4 if len(shape) == 2 else 6
            t_cc = _best(lambda: cc3d.connected_components(mask, connectivity=conn), min(repeat, 3))
            rows.append(("same, cc3d on this machine", f"{t_cc * 1e3:.1f} ms", f"{t_cc / t_gpu:.1f}x"))
            fact["cc3d_here_s"] = t_cc
        given = cc3d_given.get(size)
        if given:
            rows.append(("same, cc3d on the 2-core dev machine (given)", f"{given * 1e3:.0f} ms",
                         f"{given / t_gpu:.1f}x (target >= 10x)"))
            fact["cc3d_dev_s"] = given
        out.append(fact)


def transport(cases, repeat, rows, facts):
    """``L.transport`` on cuda (labelling on the device, the hierarchy on the host, the
    iteration on the device) against numba-cpu on this machine, from the mask, at the
    same tolerance (1e-8), the conductances compared first; then the iteration alone
    (the hierarchy built and copied once) on each."""
    import math

    from catalytic.backends import _transport as T
    from catalytic.kernels.cpu import transport as CPU
    from catalytic.kernels.cuda import transport as GPU

    out = facts.setdefault("transport", [])
    for shape, p in cases:
        size = "x".join(map(str, shape))
        for seed in range(20):  # the first lattice with a cluster joining the faces
            mask = np.random.default_rng(seed).random(shape) < p
            L = cat.Lattice(shape=shape, mask=mask)
            if L.percolates(mask.ndim - 1):
                break
        hi, lo = L.face(-1, "low"), L.face(-1, "high")
        gpu = L.transport(hi, lo, tol=1e-8, backend="cuda")
        cpu = L.transport(hi, lo, tol=1e-8, backend="numba-cpu")
        ok = math.isclose(gpu.conductance, cpu.conductance, rel_tol=1e-6, abs_tol=1e-12)
        t_gpu = _best(lambda: L.transport(hi, lo, tol=1e-8, backend="cuda"), repeat)
        t_cpu = _best(lambda: L.transport(hi, lo, tol=1e-8, backend="numba-cpu"),
                      min(repeat, 3))
        rows.append((f"transport {size}, p = {p}, cuda, the whole call from the mask",
                     f"{t_gpu * 1e3:.0f} ms", f"{gpu.iterations} iterations; conductance "
                     f"{'= numba-cpu (1e-6)' if ok else 'DIFFERS'}"))
        rows.append(("same, numba-cpu on this machine", f"{t_cpu * 1e3:.0f} ms",
                     f"{t_cpu / t_gpu:.1f}x; {cpu.iterations} iterations"))
        # the iteration alone, on the system the call assembles
        g = L.geometry
        far, inside = T.far_ends(g)
        sigma = T.bond_conductances(g, "unit", (far, inside))
        red = T.reduce(g, T.conducting_labels(g, sigma, far),
                       np.flatnonzero(hi.reshape(-1) & mask.reshape(-1)),
                       np.flatnonzero(lo.reshape(-1) & mask.reshape(-1)))
        A, b, _ = T.assemble(g, sigma, red, far)
        h = CPU.hierarchy(A)
        dv = GPU.upload(h)
        t_it_gpu = _best(lambda: GPU.solve(dv, b, 1e-8, 1000), repeat)
        t_it_cpu = _best(lambda: CPU.solve(h, b, 1e-8, 1000), min(repeat, 3))
        rows.append((f"same, the iteration alone ({A.shape[0]:,} sites, {len(h.levels)} "
                     "levels), cuda", f"{t_it_gpu * 1e3:.1f} ms",
                     f"numba-cpu {t_it_cpu * 1e3:.1f} ms: {t_it_cpu / t_it_gpu:.1f}x"))
        out.append({"shape": shape, "p": p, "seed": seed, "gpu_s": t_gpu, "cpu_here_s": t_cpu,
                    "iterations_gpu": gpu.iterations, "iterations_cpu": cpu.iterations,
                    "iteration_gpu_s": t_it_gpu, "iteration_cpu_s": t_it_cpu,
                    "solved_sites": int(A.shape[0]), "levels": len(h.levels),
                    "conductance": gpu.conductance, "correct": ok})


def transfers(n_bytes, repeat, rows, facts):
    """Copies of ``n_bytes`` each way, from pageable and from pinned host memory."""
    from numba import cuda

    pageable = np.ones(n_bytes, dtype=np.uint8)
    pinned = cuda.pinned_array(n_bytes, dtype=np.uint8)
    pinned[:] = 1
    dev = cuda.device_array(n_bytes, dtype=np.uint8)
    got = {}
    for kind, host in (("pageable", pageable), ("pinned", pinned)):
        got[f"h2d_{kind}"] = n_bytes / _best(lambda h=host: dev.copy_to_device(h), repeat)
        got[f"d2h_{kind}"] = n_bytes / _best(lambda h=host: dev.copy_to_host(h), repeat)
    for way in ("h2d", "d2h"):
        rows.append((f"{way} copy of {n_bytes / 2**20:.0f} MiB, pageable / pinned",
                     f"{got[f'{way}_pageable'] / 1e9:.1f} / {got[f'{way}_pinned'] / 1e9:.1f} GB/s",
                     f"pinned {got[f'{way}_pinned'] / got[f'{way}_pageable']:.2f}x"))
    facts["transfers"] = got


def _sweep_calls(side):
    """(label, op, args, kwargs) of the swept calls on a side x side lattice: the call
    the user makes, so the times include copying results back to the host."""
    rng = np.random.default_rng(side)
    L = cat.Lattice(shape=(side, side), mask=rng.random((side, side)) < 0.7)
    src = int(np.flatnonzero(L.geometry.open_flat)[0])
    field = rng.random((side, side))
    data = rng.integers(0, 2**62, side * side)
    return [
        (f"distance_field {side}^2", "distance_field", (L, src), {}),
        (f"connected_components {side}^2", "connected_components", (L,), {}),
        (f"laplacian {side}^2", "laplacian", (L, field), {}),
        (f"xor_transform {side * side:,} int64", "xor_transform", (L, data), {}),
    ]


def sweep(sizes, repeat, rows, facts, progress=None):
    """Every call on every backend, and the router's unforced choice against the
    measured fastest; ``progress(side)`` is called after each size."""
    eng = cat.get_engine()
    agree = total = 0
    results = facts.setdefault("sweep", [])
    rows.append(("router calibration", eng.router.calibration_source, ""))
    facts["calibration"] = eng.router.calibration_source
    for side in sizes:
        for label, op, args, kwargs in _sweep_calls(side):
            times = {b: _best(lambda b=b: eng.run(op, *args, backend=b, **kwargs), repeat)
                     for b in ("numpy", "numba-cpu", "cuda")}
            chosen = eng.explain(op, *args, **kwargs).backend
            fastest = min(times, key=times.get)
            agree += chosen == fastest
            total += 1
            results.append({"call": label, "times": times, "chosen": chosen, "fastest": fastest})
            rows.append((f"sweep {label}", " / ".join(f"{b} {t * 1e3:.2f} ms" for b, t in times.items()),
                         f"router chose {chosen}, fastest {fastest}"))
        if progress is not None:
            progress(side)
    rows.append(("router agreement", f"{agree} of {total}", ""))


#: the parts of a run, in the order they run
PARTS = ("bandwidth", "bfs", "components", "transfers", "transport", "sweep")


def _write(path: Path, text: str) -> None:
    """Replace ``path`` in one step, so a run killed while writing leaves the last report."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="tiny sizes (simulator wiring check)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--cpu-bfs-seconds", type=float, default=None,
                    help="numba-cpu 512^3 BFS time measured on the development machine")
    ap.add_argument("--cc3d-seconds", default="",
                    help="cc3d times measured on the development machine, as "
                         "SIZE=SECONDS,... (e.g. 2048x2048=0.05,512x512x512=1.3)")
    ap.add_argument("--parts", default=",".join(PARTS),
                    help=f"comma-separated parts to run, of {', '.join(PARTS)} (default: all)")
    ap.add_argument("--append", action="store_true",
                    help="add this run's table to the report as a new section, and its "
                         "facts to the JSON beside it, instead of replacing them")
    ap.add_argument("--output", type=Path, default=Path(__file__).resolve().parent.parent / "reports" / "gpu.md")
    args = ap.parse_args(argv)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = [p for p in parts if p not in PARTS]
    if unknown or not parts:
        ap.error(f"--parts takes names of {', '.join(PARTS)}, got {args.parts!r}")
    devs = cat.devices()
    if not devs:
        print("no CUDA device: nothing to measure", file=sys.stderr)
        return 1
    dev = devs[0]
    try:
        cc3d_given = {k: float(v) for k, v in
                      (item.split("=") for item in args.cc3d_seconds.split(",") if item)}
    except ValueError:
        ap.error(f"--cc3d-seconds takes SIZE=SECONDS,..., got {args.cc3d_seconds!r}")
    rows, facts = [], {"device": dev}
    name = "CUDA simulator (smoke run: figures are not GPU measurements)" if dev["simulator"] else (
        f"{dev['name']}, compute capability {'.'.join(map(str, dev['compute_capability']))}, "
        f"driver {dev['driver_version']}, runtime {dev['runtime_version']}")
    rep = 1 if args.smoke else args.repeat
    measured = (f"Measured by `python benchmarks/bench_gpu.py "
                f"{' '.join(sys.argv[1:] if argv is None else argv)}` on {time.strftime('%Y-%m-%d')}; "
                f"best of {rep}{f' (the sweep: of {min(rep, 3)})' if 'sweep' in parts else ''} "
                "after a warm-up.")
    out = args.output
    base_text, base_facts = "", {}
    if args.append and out.is_file():
        base_text = out.read_text().rstrip("\n") + "\n\n"
        if out.with_suffix(".json").is_file():
            base_facts = json.loads(out.with_suffix(".json").read_text())
    write = not (dev["simulator"] or args.smoke)

    def report(done, pending):
        head = [f"## {', '.join(parts)}", ""] if base_text else ["# GPU benchmarks", "", f"Device: {name}."]
        lines = head + [measured]
        if pending:
            lines.append(f"Incomplete: measured so far {', '.join(done) or 'nothing'}; not measured "
                         f"(the run stopped first): {', '.join(pending)}.")
        lines += ["", "| workload | result | note |", "| --- | --- | --- |"]
        lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
        text = base_text + "\n".join(lines) + "\n"
        if write:
            _write(out, text)
            _write(out.with_suffix(".json"), json.dumps({**base_facts, **facts}, indent=1, default=str))
        return text

    sides = [4, 8] if args.smoke else [32, 128, 512, 2048, 4096]
    run = {
        "bandwidth": lambda: bandwidth(4096 if args.smoke else 2**30, rep, rows, facts),
        "bfs": lambda: bfs(6 if args.smoke else 512, rep, args.cpu_bfs_seconds, rows, facts),
        "components": lambda: components(
            [((8, 8), 0.6), ((4, 4, 4), 0.35)] if args.smoke else
            [((2048, 2048), 0.6), ((512, 512, 512), 0.35)], rep, cc3d_given, rows, facts),
        "transfers": lambda: transfers(4096 if args.smoke else 2**28, rep, rows, facts),
        "transport": lambda: transport(
            [((6, 6), 0.8)] if args.smoke else
            [((512, 512), 0.60), ((512, 512), 0.65), ((128, 128, 128), 0.32),
             ((128, 128, 128), 0.4)], rep, rows, facts),
    }
    for i, part in enumerate(parts):
        done, pending = parts[:i], parts[i + 1:]
        if part == "sweep":  # the longest part: the report is rewritten after each size
            sweep(sides, min(rep, 3), rows, facts, progress=lambda side: report(
                done + [f"sweep up to {side}^2"], ["the rest of the sweep"] + pending))
        else:
            run[part]()
        text = report(done + [part], pending)
    print(text)
    if write:
        print(f"wrote {out}")
    else:
        print("smoke sizes or the simulator: no report written (these are not measurements)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

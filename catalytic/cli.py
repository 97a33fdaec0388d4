"""Command line: ``catalytic`` info, demo, bench, calibrate, warmup, profile, report,
recover.

Exit codes: 0 success, 1 failure (a one-line message on standard error; for ``report
--compare``, a regression, or two runs that share no operation), 2 a usage error
(argparse's message, or one line naming the arguments that do not go together), 130
interrupted (Ctrl-C). ``catalytic profile`` exits with its script's status instead, as
``python script.py`` would, after writing the reports (also when the script is
interrupted: what was recorded until then).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np


def cmd_info(args) -> int:
    """Print backends, devices, plugins, operations and calibration.

    Returns 0, or 1 when the configuration has a problem, printed as ``PROBLEM:`` lines:
    an engine that cannot be built (a bad ``CATALYTIC_*`` value or calibration file;
    the error goes to stderr instead of a traceback), a ``CATALYTIC_BACKEND`` naming no
    registered backend, or a user calibration file that was rejected.
    """
    import platform
    import warnings

    import numba

    import catalytic as cat
    from catalytic.errors import CatalyticError

    print(f"catalytic {cat.__version__} on Python {platform.python_version()}, "
          f"numpy {np.__version__}, numba {numba.__version__}")
    try:
        with warnings.catch_warnings():
            # what building the engine warns about is printed below, once
            warnings.simplefilter("ignore", RuntimeWarning)
            eng = cat.get_engine()
    except (CatalyticError, ValueError) as err:
        print(f"PROBLEM: the engine cannot be built: {err}", file=sys.stderr)
        return 1
    status = 0
    print("backends:")
    for name, (ok, why) in eng.backends().items():
        dev = eng.registry.backends[name].device
        print(f"  {name:<10} {dev:<4} {'available' if ok else 'UNAVAILABLE'}: {why}")
    if eng.settings.backend is not None:
        problem = eng.backend_setting_problem()
        if problem is None:
            print(f"forced backend: {eng.settings.backend} (every operation runs there)")
        else:
            print(f"PROBLEM: {problem}")
            status = 1
    devs = cat.devices()
    if not devs:
        print("devices: no CUDA GPU found (the cuda backend is unavailable; CPU backends run everything)")
    for d in devs:
        if d["simulator"]:
            print("devices: CUDA simulator active (NUMBA_ENABLE_CUDASIM=1): kernels run "
                  "correctly but at simulator speed")
        else:
            print(f"devices: [{d['id']}] {d['name']}, compute capability "
                  f"{'.'.join(map(str, d['compute_capability']))}, "
                  f"{d['free_memory'] / 2**30:.1f} of {d['total_memory'] / 2**30:.1f} GiB free, "
                  f"driver {d['driver_version']}, runtime {d['runtime_version']}")
    print(f"plugins: {', '.join(eng.plugin_names())}")
    for name, msg in eng.plugin_errors.items():
        print(f"  FAILED {name}: {msg}")
    print(f"operations ({len(eng.operations())}): {', '.join(eng.operations())}")
    print(f"calibration: {eng.router.calibration_source}")
    print("memory: " + cat.get_monitor().report().replace("\n", "\n        "))
    if eng.router.calibration_problem is not None:
        print(f"PROBLEM: {eng.router.calibration_problem}")
        status = 1
    return status


def _show(L, label):
    dec = L.last_decision
    print(f"    routed {dec.op} -> {dec.backend}: {dec.reason}")


def cmd_demo(args) -> int:
    """A short real job: a few lattices, paths, components, percolation, centrality and
    communities; every routing decision printed with its reason."""
    import catalytic as cat

    t_start = time.perf_counter()
    rng = np.random.default_rng(args.seed)
    print("catalytic demo (first run compiles Numba kernels; later runs use the cache)\n")

    print("1. 2-D maze, 64 x 64, 30% of sites blocked")
    mask = rng.random((64, 64)) >= 0.3
    maze = cat.Lattice(shape=(64, 64), mask=mask, seed=args.seed)
    comps = maze.connected_components()
    _show(maze, "components")
    biggest = np.flatnonzero(comps.labels.reshape(-1) == 1 + int(np.argmax(comps.sizes)))
    a, b = int(biggest[0]), int(biggest[-1])
    ca, cb = maze.index_to_coords(a).tolist(), maze.index_to_coords(b).tolist()
    print(f"    {comps.count} clusters; the largest has {comps.sizes.max()} of {maze.n_open} open sites")
    dist = maze.distance_field(a)
    _show(maze, "distance field")
    print(f"    from {ca}: {int((dist >= 0).sum())} sites reachable, farthest {int(dist.max())} steps")
    res = maze.find_shortest_path(a, b)
    _show(maze, "path")
    manhattan = sum(abs(x - y) for x, y in zip(ca, cb))
    print(f"    shortest path {ca} -> {cb}: {res.distance} steps (Manhattan bound {manhattan})")

    print("\n2. 3-D periodic lattice, 48^3 = 110,592 sites, Moore stencil")
    cube = cat.Lattice(shape=(48, 48, 48), periodic=True, stencil="moore")
    dist = cube.distance_field(0)
    _show(cube, "distance field")
    print(f"    max distance {int(dist.max())} (closed form for periodic Moore: 24)")
    n = cube.count_shortest_paths((0, 0, 0), (3, 2, 1))
    _show(cube, "count")
    print(f"    shortest paths (0,0,0) -> (3,2,1): {n}")

    print("\n3. Site percolation on 256 x 256 around the threshold p_c ~ 0.5927")
    for p in (0.50, 0.59, 0.70):
        occ = rng.random((256, 256)) < p
        perc = cat.Lattice(shape=(256, 256), mask=occ)
        comps = perc.connected_components()
        _show(perc, "components")
        spans = perc.percolates(axis=0)
        _show(perc, "percolates")
        largest = int(comps.sizes.max()) if comps.count else 0
        print(f"    p={p:.2f}: {comps.count} clusters, largest {largest} sites, "
              f"spans top-bottom: {spans}")

    print("\n4. Catalytic XOR with the lattice key (self-inverse)")
    data = np.arange(10, dtype=np.int32)
    enc = maze.xor_transform(data)
    _show(maze, "xor")
    dec = maze.xor_transform(enc)
    print(f"    {data.tolist()} -> {enc[:3].tolist()}... -> back equal: {np.array_equal(dec, data)}")

    print("\n5. Catalytic path: the BFS state lives in a lent, restorable buffer")
    lent = np.zeros(maze.n_points, dtype=np.uint8)
    res2 = maze.find_path_catalytic(a, b, auxiliary_memory=lent)
    _show(maze, "catalytic path")
    print(f"    same path as find_shortest_path: {np.array_equal(res.path, res2.path)}; "
          f"buffer restored: {not lent.any()}; {maze.last_borrow.method}")

    print("\n6. Betweenness centrality on 12 x 12: the router picks the backend by predicted cost")
    small = cat.Lattice(shape=(12, 12))
    bc = small.calculate_centrality("betweenness")
    _show(small, "betweenness")
    print(f"    betweenness is highest at the centre: {small.index_to_coords(int(np.argmax(bc))).tolist()}")

    print("\n7. Louvain communities on 12 x 12: graph-library work, run by the numpy backend (NetworkX)")
    comm = small.find_communities("louvain")
    _show(small, "communities")
    print(f"    {comm.count} communities, modularity {comm.modularity:.3f}")

    print("\nrouter statistics (first call of a kernel includes JIT compile or cache load):")
    for op, per in cat.get_engine().router.stats().items():
        for b, s in per.items():
            ratio = s["measured_over_predicted"]
            tail = f", later calls measured/predicted {ratio:.2f}" if ratio else ""
            print(f"    {op:<22} {b:<10} calls={s['calls']:<3} "
                  f"first call {s['first_call_s'] * 1e3:8.2f} ms{tail}")
    print(f"\ndone in {time.perf_counter() - t_start:.1f} s")
    return 0


def cmd_calibrate(args) -> int:
    from catalytic.tools.calibrate import main

    rest = []
    if args.output:
        rest += ["--output", str(args.output)]
    if args.quick:
        rest.append("--quick")
    return main(rest)


def cmd_recover(args) -> int:
    """Apply the journals left beside lent memory-mapped files (see
    :func:`catalytic.catalysis.recover`); exit 1 if one cannot be applied."""
    from catalytic.catalysis import recover
    from catalytic.errors import CatalyticError

    status = 0
    for path in args.paths:
        if not os.path.isfile(path):
            why = "is not a file" if os.path.exists(path) else "no such file"
            print(f"catalytic recover: {path}: {why}", file=sys.stderr)
            status = 1
            continue
        try:
            n = recover(path)
        except (CatalyticError, OSError) as err:
            print(f"{path}: NOT restored: {err}", file=sys.stderr)
            status = 1
            continue
        print(f"{path}: {'restored from ' + str(n) + ' journal(s)' if n else 'no journal, nothing to do'}")
    return status


def cmd_bench(args) -> int:
    """Routed calls against SciPy on the same inputs, measured now (catalytic.tools.bench)."""
    from catalytic.tools.bench import run

    only = args.only.split(",") if args.only else None
    return run(quick=args.quick, output=args.output, only=only, baseline=args.baseline)


def cmd_warmup(args) -> int:
    """Compile the common numba-cpu kernels into Numba's cache (catalytic.tools.warmup)."""
    from catalytic.tools.warmup import warmup

    t0 = time.perf_counter()
    only = args.only.split(",") if args.only else None
    warmup(only=only)
    print(f"done in {time.perf_counter() - t0:.1f} s; later processes load the compiled "
          "kernels from Numba's cache")
    return 0


def cmd_profile(args) -> int:
    """Run a user's script with profiling on, then write its reports.

    Returns the script's exit status as ``python script.py`` gives it: 0, the code of
    its ``sys.exit(n)``, 1 when it raised or exited with a message (printed on standard
    error, like Python prints it), 130 when interrupted (Ctrl-C); 2 when there is no
    such script. The reports hold what was recorded in every case.
    """
    import runpy
    import traceback

    from catalytic.profiler import get_profiler

    script = args.script
    if not os.path.isfile(script):
        print(f"catalytic profile: no such script: {script}", file=sys.stderr)
        return 2
    prof = get_profiler()
    prof.reset()
    prof.enable()
    status, message = 0, None
    saved = sys.argv
    sys.argv = [script] + list(args.args)
    try:
        with prof.region(os.path.basename(script)):
            runpy.run_path(script, run_name="__main__")
    except SystemExit as err:
        if err.code is None or isinstance(err.code, int):
            status = int(err.code or 0)
        else:  # sys.exit("message"): Python prints it and exits 1
            message = str(err.code)
            status = 1
    except KeyboardInterrupt:
        print(f"catalytic profile: {script} interrupted; writing what was recorded",
              file=sys.stderr)
        status = 130
    except Exception as err:
        traceback.print_exc()
        print(f"catalytic profile: {script} raised {type(err).__name__}: {err}", file=sys.stderr)
        status = 1
    finally:
        sys.argv = saved
        prof.disable()
    out = args.output
    paths = [prof.export_json(f"{out}.json"), prof.export_trace(f"{out}.trace.json"),
             prof.export_html(f"{out}.html", title=f"catalytic profile of {script}")]
    print()
    prof.print_summary()
    print("\nwrote " + ", ".join(str(p) for p in paths))
    if message is not None:
        print(message, file=sys.stderr)
    return status


def cmd_report(args) -> int:
    """An HTML page from a saved profile, or the comparison of two."""
    from catalytic import profiler

    if args.compare:
        if args.profile is not None or args.output is not None:
            print("catalytic report: give either PROFILE (and --output) or --compare "
                  "BEFORE AFTER (which writes no file)", file=sys.stderr)
            return 2
        threshold = profiler.DEFAULT_THRESHOLD if args.threshold is None else args.threshold
        result = profiler.compare(*args.compare, threshold=threshold)
        print(result)
        return 1 if result.regressions or result.nothing_compared else 0
    if args.profile is None:
        print("catalytic report: give a profile (profile.json) or --compare BEFORE AFTER",
              file=sys.stderr)
        return 2
    if args.threshold is not None:
        print("catalytic report: --threshold goes with --compare", file=sys.stderr)
        return 2
    from catalytic.profiler.html import html_report

    doc = profiler.load(args.profile)
    out = args.output or str(args.profile).rsplit(".json", 1)[0] + ".html"
    profiler._write(out, html_report(doc, f"catalytic profile {args.profile}"))
    print(f"wrote {out}")
    return 0


def _threshold(text) -> float:
    """argparse type of ``--threshold``: a finite number > 0 (else a usage error)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return value


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="catalytic", description="n-D lattice computation engine")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("info", help="backends, plugins, operations, calibration")
    d = sub.add_parser("demo", help="a short real job printing each routing decision")
    d.add_argument("--seed", type=int, default=0)
    c = sub.add_parser("calibrate", help="measure the router's cost model on this machine")
    c.add_argument("--output", "-o", default=None)
    c.add_argument("--quick", action="store_true")
    r = sub.add_parser("recover", help="restore memory-mapped files lent to calls that "
                       "were killed (from the journals beside them)")
    r.add_argument("paths", nargs="+", help="the lent files")
    b = sub.add_parser("bench", help="catalytic against the strongest peers, measured now")
    b.add_argument("--quick", action="store_true", help="smaller sizes, no first test run")
    b.add_argument("--output", "-o", default="reports",
                   help="folder for benchmarks.md, .json and .png (default: reports)")
    b.add_argument("--baseline", default=None, metavar="JSON",
                   help="an earlier benchmarks.json: its times become a 'before' column")
    b.add_argument("--only", default=None, help="comma-separated parts: components, "
                   "distances, centrality, betweenness, fields, overheads, first_test_run")
    w = sub.add_parser("warmup", help="compile the common kernels once (after installing), "
                       "so first calls in later processes skip compilation")
    w.add_argument("--only", default=None, help="comma-separated groups: components, "
                   "distances, centrality, fields, arrays")
    p = sub.add_parser("profile", help="run SCRIPT.py with profiling on and write its "
                       "reports (JSON, Chrome trace, HTML)")
    p.add_argument("script", help="a Python script")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    p.add_argument("--output", "-o", default="profile",
                   help="path prefix of the reports (default: profile -> profile.json, "
                   "profile.trace.json, profile.html)")
    rp = sub.add_parser("report", help="HTML page of a saved profile, or --compare two "
                        "(exit 1 on a regression, or when they share no operation)")
    rp.add_argument("profile", nargs="?", help="a profile JSON file")
    rp.add_argument("--output", "-o", default=None, help="the HTML file to write")
    rp.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    rp.add_argument("--threshold", type=_threshold, default=None,
                    help="with --compare: slowdown counted as a regression (default "
                    "0.25: 25%%)")
    args = ap.parse_args(argv)
    commands = {"info": cmd_info, "demo": cmd_demo, "calibrate": cmd_calibrate,
                "recover": cmd_recover, "bench": cmd_bench, "profile": cmd_profile,
                "report": cmd_report, "warmup": cmd_warmup}
    try:
        return commands[args.cmd](args)
    except (OSError, ValueError) as err:  # a missing file, a file that is no profile
        print(f"catalytic {args.cmd}: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"catalytic {args.cmd}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

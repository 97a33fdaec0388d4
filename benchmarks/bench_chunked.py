"""One lattice over a Dask cluster: ``ChunkedLattice.connected_components`` against
dask-image's ``ndmeasure.label`` on the same cluster, answers checked first.

    PYTHONPATH=$PWD python benchmarks/bench_chunked.py [--quick] [--repeat 2]

Issue 29's benchmark: 16384^2 and 512^3 site-diluted lattices near the percolation
threshold (p = 0.5927 and 0.3116), 16 chunks each, on a ``LocalCluster`` of 2
single-threaded worker processes on loopback (Numba held to one thread in each, as
SciPy is). The mask is made on the workers from a seed (``ChunkedLattice.random``) and
persisted first, so both peers start from the same chunks in worker memory. Timed, for
each: from the persisted mask to globally consistent labels persisted on the workers
and the cluster count on the client (the best of ``--repeat``). A worker's peak
resident memory is reset before the run and read after it (Linux's ``VmHWM``); the table
gives it less the worker's memory before the run, against its chunk data (the mask and
the int32 labels of the chunks it holds: 5 bytes a site). Both labellings are gathered
afterwards (untimed) and checked against the lattice labelled in memory by catalytic:
the same clusters (a bijection of labels) and count.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

import catalytic as cat

CASES = [((16384, 16384), 0.5927, (4096, 4096)), ((512, 512, 512), 0.3116, (128, 256, 256))]
QUICK = [((2048, 2048), 0.5927, (512, 512)), ((128, 128, 128), 0.3116, (32, 64, 64))]


def _rss_now():
    import psutil

    return psutil.Process().memory_info().rss


def _reset_peak():
    """Reset this process's peak resident memory (Linux: ``/proc/self/clear_refs``)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _peak():
    """This process's peak resident memory since the last reset (``VmHWM``), bytes.
    Not ``ru_maxrss``: it survives ``exec``, so a worker process started by this one
    would report this one's peak."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _cluster():
    from distributed import Client, LocalCluster

    env = {"NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                           host="127.0.0.1", dashboard_address=None, env=env,
                           memory_limit=0)
    return cluster, Client(cluster)


def _warm(client):
    """Import and compile on the workers first (a small lattice, both peers)."""
    from dask_image import ndmeasure

    C = cat.ChunkedLattice.random((64, 64), 0.6, chunks=32, seed=0, client=client)
    C.connected_components().labels.compute(scheduler=client)
    lab, n = ndmeasure.label(C.mask)
    client.compute([lab, n], sync=True)


def _ours(mask, client):
    from distributed import wait

    C = cat.ChunkedLattice(mask, client=client)
    comp = C.connected_components()
    labels = client.persist(comp.labels)
    wait(labels)
    _ours.stats = C.stats()
    return labels, comp.count


def _dask_image(mask, client):
    from dask_image import ndmeasure
    from distributed import wait

    lab, n = ndmeasure.label(mask)
    labels = client.persist(lab)
    count = int(client.compute(n, sync=True))
    wait(labels)
    return labels, count


def _run(name, shape, p, chunks, repeat):
    """One peer on one lattice, a fresh cluster per repeat: (best seconds, peak worker
    memory over the run less before it, chunk bytes per worker, labels, count)."""
    best, rise, labels, count, stats = np.inf, 0, None, None, None
    for _ in range(repeat):
        cluster, client = _cluster()
        try:
            _warm(client)
            C = cat.ChunkedLattice.random(shape, p, chunks=chunks, seed=1, client=client)
            mask = client.persist(C.mask)
            from distributed import wait

            wait(mask)
            before = client.run(_rss_now)
            client.run(_reset_peak)
            t = time.perf_counter()
            got, cnt = (_ours if name == "catalytic" else _dask_image)(mask, client)
            took = time.perf_counter() - t
            if took < best and name == "catalytic":
                stats = dict(_ours.stats, total_s=took)
            best = min(best, took)
            peaks = client.run(_peak)
            rise = max(rise, max(peaks[w] - before[w] for w in peaks))
            if labels is None:
                labels = got.compute(scheduler=client)
                count = cnt
            del got, mask
        finally:
            client.close()
            cluster.close()
    return best, rise, labels, count, stats


def _same_clusters(a, b, open_, count):
    """The labels ``a`` and ``b`` (both 0 off ``open_``) are the same clusters."""
    if not ((a > 0) == open_).all() or not ((b > 0) == open_).all():
        return False
    x, y = a[open_].astype(np.int64), b[open_].astype(np.int64)
    to = np.zeros(count + 1, dtype=np.int64)
    to[x] = y
    return bool((to[x] == y).all() and np.unique(to[1:]).size == count)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small lattices (a wiring check)")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args(argv)
    print(f"machine: {os.cpu_count()} cores; 2 worker processes, 1 thread each\n")
    print("| lattice | chunks | sites a chunk | peer | time | peak worker memory rise | "
          "chunk data a worker | clusters | = in memory |\n|---|---|---|---|---|---|---|---|---|")
    phases = []
    for shape, p, chunks in (QUICK if args.quick else CASES):
        n = int(np.prod(shape))
        n_chunks = int(np.prod([-(-s // c) for s, c in zip(shape, chunks)]))
        mask = cat.ops.random(shape, 1) < p
        ref = cat.Lattice(shape=shape, mask=mask).connected_components()
        per_worker = 5 * n // 2
        for name in ("catalytic", "dask-image"):
            t, rise, labels, count, stats = _run(name, shape, p, chunks, args.repeat)
            if stats:
                phases.append(("x".join(map(str, shape)), stats))
            ok = count == ref.count and _same_clusters(labels, ref.labels, mask, count)
            print(f"| {'x'.join(map(str, shape))} | {n_chunks} | {n // n_chunks:,} | {name} | "
                  f"{t:.2f} s | {rise / 2**20:.0f} MiB ({rise / per_worker:.1f}x) | "
                  f"{per_worker / 2**20:.0f} MiB | "
                  f"{count:,} | {'yes' if ok else 'NO'} |", flush=True)
            del labels
    print("\ncatalytic's best run, by phase (``ChunkedLattice.stats()``): the chunks "
          "labelled and their faces at the client; the merge on the client; the chunks "
          "labelled again and relabelled (the rest of the time)\n")
    print("| lattice | chunks phase | client merge | relabel phase | face sites | face data "
          "| pieces | on faces | bonds joined |\n|---|---|---|---|---|---|---|---|---|")
    for size, s in phases:
        rest = s["total_s"] - s["chunks_s"] - s["merge_s"]
        print(f"| {size} | {s['chunks_s']:.2f} s | {s['merge_s']:.2f} s | {rest:.2f} s | "
              f"{s['face_sites']:,} | {s['face_bytes'] / 2**20:.0f} MiB | {s['pieces']:,} | "
              f"{s['pieces_on_faces']:,} | {s['bonds_across']:,} |")
    print("\none chunk labelled in this process on one thread (the labelling's rate):\n")
    import numba

    numba.set_num_threads(1)
    from catalytic.chunked import _label_chunk

    for shape, p, chunks in (QUICK if args.quick else CASES):
        m = cat.ops.random(chunks, 2) < p
        offsets = cat.Lattice(shape=chunks).offsets
        _label_chunk(m, None, offsets)
        t = time.perf_counter()
        _label_chunk(m, None, offsets)
        t = time.perf_counter() - t
        print(f"- {'x'.join(map(str, chunks))} at p = {p}: {t * 1e3:.0f} ms, "
              f"{m.size / t / 1e6:.0f} M sites/s")


if __name__ == "__main__":
    main()

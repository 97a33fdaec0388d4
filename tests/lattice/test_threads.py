"""Several threads using one lattice (and one lent buffer) get the serial answers.

The lattice is small enough that ``find_path_catalytic`` borrows the lattice's own
buffer, the same bytes ``xor_transform(key=None)`` reads its key from: the two must never
see each other's work. Every result of the concurrent run is compared with the result of
the same call made alone.

One of three files about threads: this one shares one lattice between Python threads;
``tests/backends/test_numba_cpu.py`` holds the numba-cpu backend's thread-count policy,
and ``tests/backends/cuda_backend/test_threads.py`` the cuda backend's per-thread
streams and device key cache.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import catalytic as cat
from catalytic.batch import BatchProcessor, batch_xor_transform
from tests.support.backends import available_backends

SHAPE = (30, 30)
N_THREADS = 8


def _lattice():
    rng = np.random.default_rng(3)
    mask = rng.random(SHAPE) >= 0.25
    mask[0, :] = mask[:, -1] = True  # 0 and 899 are open and joined along the border
    return cat.Lattice(shape=SHAPE, mask=mask, seed=11)


def _batch_answer(res):
    """A batch result as something comparable with ==: every value's bytes and dtype,
    and the failing indices (a wrong key shows in the bytes, a refusal in the errors)."""
    return ([None if v is None else (v.dtype.str, v.tobytes()) for v in res],
            sorted(res.errors))


def _batch_calls(L, backends):
    """The batch paths over arrays with ``lattice=L``: each reads the lattice's key
    through ``batched.xor_transform`` (a twin call over the stack of arrays, forced with
    ``batched=True`` where the cost choice might prefer a loop)."""
    arrays = [np.arange(300, dtype=np.int64) * (7 + i) for i in range(4)]
    keyed = [np.arange(50, dtype=np.int16) + i for i in range(3)]
    calls = []
    for executor in ("serial", "threads"):
        calls += [
            (f"batch-map/{executor}", lambda e=executor: _batch_answer(
                BatchProcessor(arrays, lattice=L, executor=e, max_workers=2,
                               progress=False, batched=True).map("xor_transform"))),
            (f"batch_xor_transform/{executor}", lambda e=executor: _batch_answer(
                batch_xor_transform(L, arrays, executor=e, max_workers=2, batched=True))),
            (f"batch_xor_transform-key/{executor}", lambda e=executor: _batch_answer(
                batch_xor_transform(L, keyed, np.array([3, 5], np.int16), executor=e,
                                    max_workers=2, batched=True))),
        ]
    for b in backends:
        calls.append((f"batch-map/{b}", lambda b=b: _batch_answer(
            BatchProcessor(arrays, lattice=L, progress=False,
                           batched=True).map("xor_transform", backend=b))))
    return calls


def _calls(L, lent, backends):
    """(name, callable) pairs; each callable returns something comparable with ==."""
    data = np.arange(2000, dtype=np.int64) * 7919
    small = np.arange(37, dtype=np.uint8)
    field = np.linspace(0.0, 1.0, L.n_points).reshape(L.shape)
    end = L.n_points - 1
    calls = []
    for b in backends:
        calls += [
            (f"xor/{b}", lambda b=b: L.xor_transform(data, backend=b).tobytes()),
            (f"xor-small/{b}", lambda b=b: L.xor_transform(small, backend=b).tobytes()),
            (f"path-own/{b}", lambda b=b: L.find_path_catalytic(0, end, backend=b).path.tolist()),
            (f"path-lent/{b}",
             lambda b=b: L.find_path_catalytic(0, end, auxiliary_memory=lent, backend=b).path.tolist()),
            (f"shortest/{b}", lambda b=b: L.find_shortest_path(0, end, backend=b).path.tolist()),
            (f"dist/{b}", lambda b=b: L.distance_field(0, backend=b).tobytes()),
            (f"count/{b}", lambda b=b: L.count_shortest_paths(0, end, backend=b)),
            (f"comps/{b}", lambda b=b: L.connected_components(backend=b).labels.tobytes()),
            (f"laplacian/{b}", lambda b=b: L.laplacian(field, backend=b).tobytes()),
        ]
    calls.append(("xor/routed", lambda: L.xor_transform(data).tobytes()))
    calls.append(("path-own/routed", lambda: L.find_path_catalytic(0, end).path.tolist()))
    return calls + _batch_calls(L, backends)


def test_threads_sharing_a_lattice_get_serial_answers():
    backends = [b for b in available_backends() if b in ("numpy", "numba-cpu")]
    L = _lattice()
    lent = np.zeros(4096, dtype=np.uint8)
    lent[::64] = 5  # compressible, not all zeros
    lent_before = lent.copy()
    key_before = L.xor_transform(np.zeros(1000, np.uint8), backend="numpy").tobytes()
    calls = _calls(L, lent, backends)
    serial = {name: f() for name, f in calls}

    rounds = 40
    jobs = [calls[(i * 7 + r) % len(calls)] for r in range(rounds) for i in range(len(calls))]
    start = threading.Barrier(N_THREADS)

    def worker(t):
        start.wait()
        wrong = []
        for name, f in jobs[t::N_THREADS]:
            got = f()
            if got != serial[name]:
                wrong.append(name)
        return wrong

    t0 = time.perf_counter()
    with ThreadPoolExecutor(N_THREADS) as pool:
        results = list(pool.map(worker, range(N_THREADS)))
    elapsed = time.perf_counter() - t0
    wrong = [w for r in results for w in r]
    assert not wrong, f"{len(wrong)} of {len(jobs)} concurrent calls differ from serial: {sorted(set(wrong))}"
    np.testing.assert_array_equal(lent, lent_before)
    assert L.xor_transform(np.zeros(1000, np.uint8), backend="numpy").tobytes() == key_before
    assert elapsed < 30, f"stress run took {elapsed:.1f} s"


def test_last_borrow_is_per_thread():
    """Each thread sees the borrow record of its own last call."""
    L = _lattice()
    lent = np.zeros(4096, dtype=np.uint8)
    random_buf = np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8)
    barrier = threading.Barrier(2)
    seen = {}

    def run(name, buf):
        barrier.wait()
        for _ in range(50):
            L.find_path_catalytic(0, L.n_points - 1, auxiliary_memory=buf, backend="numpy")
            seen.setdefault(name, set()).add(L.last_borrow.method.split(" ")[0])

    threads = [threading.Thread(target=run, args=("lent", lent)),
               threading.Thread(target=run, args=("random", random_buf))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {"lent": {"lent"}, "random": {"fresh"}}


def test_overlapping_views_of_a_buffer_exclude_each_other():
    """``lend`` locks by address: a view overlapping a held buffer waits for it."""
    from catalytic.catalysis import lend

    buf = np.zeros(256, np.uint8)
    held = threading.Event()
    release = threading.Event()
    events = []

    def holder():
        with lend(buf[:128]):
            held.set()
            release.wait(5)
            events.append("holder done")

    def other(view, tag):
        held.wait(5)
        with lend(view):
            events.append(tag)

    t1 = threading.Thread(target=holder)
    # (disjoint from the overlapping view too: a request overlapping a queued one waits
    # its turn, see test_range_lock_fifo_keeps_reentrancy_and_disjoint_ranges)
    t2 = threading.Thread(target=other, args=(buf[100:128], "overlapping"))
    t3 = threading.Thread(target=other, args=(buf[128:], "disjoint"))
    for t in (t1, t2, t3):
        t.start()
    t3.join(5)
    time.sleep(0.1)
    assert events == ["disjoint"]  # the overlapping view is still waiting
    release.set()
    for t in (t1, t2):
        t.join(5)
    assert events == ["disjoint", "holder done", "overlapping"]


def test_numba_cpu_calls_are_serialised_until_the_threading_layer_is_known(monkeypatch):
    """Numba's workqueue layer aborts the process on concurrent parallel launches; until
    a thread-safe layer is known, numba-cpu implementations run one at a time."""
    import numba

    import catalytic.backends.numba_cpu as nc

    monkeypatch.setattr(nc, "_layer_safe", False)
    monkeypatch.setattr(numba, "threading_layer", lambda: "workqueue")
    active, peak = [0], [0]
    lock = threading.Lock()

    @nc.thread_safe
    def kernel():
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.02)
        with lock:
            active[0] -= 1

    threads = [threading.Thread(target=kernel) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert peak[0] == 1
    monkeypatch.setattr(numba, "threading_layer", lambda: "omp")
    assert nc._threading_layer_is_safe()


def _wait_until(pred, what):
    """Spin (yielding the GIL) until ``pred()``; a bound on spins, not on time, so a
    broken lock fails the test instead of hanging it."""
    for _ in range(2_000_000):
        if pred():
            return
        time.sleep(0)
    raise AssertionError(f"never saw {what}")


def _acquisitions_while_waiting(locks, loop_body, waiter_body, cap):
    """Run ``loop_body`` in a thread (it counts its own acquisitions in ``count``) and,
    once it is looping, ``waiter_body`` in another; return how many acquisitions the
    looper completed between the waiter being queued and the waiter getting the lock.
    The looper stops after ``cap`` acquisitions, so an unfair lock ends too."""
    count = [0]
    stop = threading.Event()
    got = []

    def looper():
        while count[0] < cap and not stop.is_set():
            loop_body(count)

    def waiter():
        got.append(waiter_body(count))

    t_loop = threading.Thread(target=looper)
    t_loop.start()
    _wait_until(lambda: count[0] >= 3, "the looping thread start")
    t_wait = threading.Thread(target=waiter)
    t_wait.start()
    _wait_until(lambda: locks.waiting() >= 1 or got, "the waiter queued")
    queued_at = count[0]  # read after the waiter is queued: later grants are behind it
    t_wait.join()
    stop.set()
    t_loop.join()
    return got[0] - queued_at, count[0]


def test_range_lock_serves_a_waiter_before_a_thread_that_loops():
    """A thread that takes a range again and again gets it at most once more after
    another thread has queued for an overlapping range (first come, first served)."""
    from catalytic.catalysis import _RangeLocks

    locks = _RangeLocks()
    cap = 2_000

    def take(count):
        with locks.hold(0, 100):
            count[0] += 1
            sum(range(20_000))  # hold it most of the time, as a search does

    def wait(count):
        with locks.hold(50, 150):
            return count[0]

    extra, total = _acquisitions_while_waiting(locks, take, wait, cap)
    assert extra <= 1, f"the looping thread took the range {extra} more times ({total} in all)"


def test_range_lock_fifo_keeps_reentrancy_and_disjoint_ranges():
    """Fairness does not queue a thread behind waiters while it holds a range (they may
    be waiting for it), nor behind waiters for a disjoint range; a free range that
    overlaps a queued request waits its turn behind it."""
    from catalytic.catalysis import _RangeLocks

    locks = _RangeLocks()
    holding, release, events = threading.Event(), threading.Event(), []

    def holder():
        with locks.hold(0, 100):
            holding.set()
            release.wait()
            with locks.hold(50, 150):  # a waiter for [90, 110) is queued by now
                events.append("holder again")
            events.append("holder done")

    def waiter():
        with locks.hold(90, 110):
            events.append("waiter")

    t1 = threading.Thread(target=holder, daemon=True)
    t1.start()
    holding.wait()
    t2 = threading.Thread(target=waiter, daemon=True)
    t2.start()
    _wait_until(lambda: locks.waiting() == 1, "the waiter queued")
    with locks.hold(120, 200):  # disjoint from what the waiter wants: not queued
        events.append("disjoint")

    def late():
        with locks.hold(105, 115):  # free now, but overlaps the queued [90, 110)
            events.append("late")

    t3 = threading.Thread(target=late, daemon=True)
    t3.start()
    _wait_until(lambda: locks.waiting() == 2, "the late request queued")
    release.set()
    for t in (t1, t2, t3):
        t.join()
    assert events == ["disjoint", "holder again", "holder done", "waiter", "late"]
    assert locks.waiting() == 0


def test_buffer_lock_is_fair_to_a_reader_of_the_lattice_key():
    """A thread looping ``find_path_catalytic`` (which lends the lattice's buffer) lets
    a thread that asks for the buffer, as ``xor_transform`` does, have it after at most
    the search that was running; the XOR then gives the serial answer."""
    from catalytic.catalysis import _ranges, lend

    L = _lattice()
    end = L.n_points - 1
    data = np.arange(500, dtype=np.int64) * 7919
    want = L.xor_transform(data, backend="numpy")

    def search(count):
        L.find_path_catalytic(0, end, backend="numpy")
        count[0] += 1

    def reader(count):
        with lend(L._aux):
            return count[0]

    extra, total = _acquisitions_while_waiting(_ranges, search, reader, cap=300)
    assert extra <= 1, f"{extra} searches ran while the reader waited ({total} in all)"
    stop = threading.Event()

    def loop():
        while not stop.is_set():
            L.find_path_catalytic(0, end, backend="numpy")

    t = threading.Thread(target=loop)
    t.start()
    try:
        got = [L.xor_transform(data, backend="numpy") for _ in range(5)]
    finally:
        stop.set()
        t.join()
    assert all(np.array_equal(g, want) for g in got)


@pytest.mark.parametrize("executor", ["serial", "threads"])
@pytest.mark.parametrize("entry", ["map", "batch_xor_transform"])
def test_batched_xor_waits_while_the_key_buffer_is_on_loan(entry, executor):
    """While another thread has the lattice's buffer on loan (its bytes are search
    state), a batched XOR with the lattice's key waits for it instead of reading them."""
    from catalytic.catalysis import _ranges, lend

    L = _lattice()
    arrays = [np.arange(300, dtype=np.int64) * (7 + i) for i in range(4)]
    want = [L.xor_transform(a, backend="numpy") for a in arrays]
    on_loan = threading.Event()

    def borrower():
        with lend(L._aux):
            saved = L._aux.copy()
            L._aux[:] = 0xA5  # what a search leaves there while it runs
            on_loan.set()
            for _ in range(200_000):  # until the batch waits (bounded, not timed)
                if _ranges.waiting():
                    break
                time.sleep(0)
            L._aux[:] = saved

    t = threading.Thread(target=borrower)
    t.start()
    on_loan.wait()
    if entry == "map":
        bp = BatchProcessor(arrays, lattice=L, executor=executor, progress=False,
                            batched=True)
        res = bp.map("xor_transform")
        assert bp.stats()["mode"] == "batched"  # the twin ran, not a loop of single calls
    else:
        res = batch_xor_transform(L, arrays, executor=executor, batched=True)
    t.join()
    assert res.errors == {}
    assert all(np.array_equal(g, w) for g, w in zip(res, want))

"""CUDA twin of :mod:`catalytic.kernels.cpu.newman_ziff`: one sweep per thread.

Contract as the CPU kernel's (same elements, orders, events and sums). What differs:
each thread holds its sweep's union-find (a row of parent, size and displacements per
site, faces) and its order in global memory, slices of ``(sweeps, n, ...)`` arrays, so
a launch covers as many sweeps as those fit (:func:`per_launch`); the per-occupation
sums are shared by all threads and added atomically (their float sums are the CPU's
within rounding; the integer-valued ones are exact below 2**53). The sweep itself is
the CPU source, :func:`_one_sweep` and its helpers compiled as device functions, with
the atomic add bound in place of ``+=``.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda

from catalytic.kernels import random as _rnd
from catalytic.kernels.cpu import newman_ziff as _cpu
from catalytic.kernels.cpu.neighbors import bond_open as _bond_open_cpu
from catalytic.kernels.cuda.arrays import TPB, _blocks
from catalytic.kernels.cuda.random import _mulhi64, _splitmix64

__all__ = ["sweeps_cuda", "device_bytes"]


def _device(func, **names):
    """``func``'s Python source as a CUDA device function, its globals ``names`` bound
    to device functions."""
    return cuda.jit(device=True)(_rnd.rebind(func.py_func, **names))


@cuda.jit(device=True)
def _atomic_add(acc, row, col, v):
    cuda.atomic.add(acc, (row, col), v)


_root = _device(_cpu._root)
_step = _device(_cpu._step)
_coords = _device(_cpu._coords)
_faces = _device(_cpu._faces)
_bond_open = _device(_bond_open_cpu)
_merge = _device(_cpu._merge)
_join = _device(_cpu._join, _root=_root, _merge=_merge)
_shuffle = _device(_cpu._shuffle, _splitmix64_nb=_splitmix64, _mulhi64_nb=_mulhi64)
_one_sweep = _device(_cpu._one_sweep, _root=_root, _step=_step, _coords=_coords,
                     _faces=_faces, bond_open=_bond_open, _join=_join, _merge=_merge,
                     _add=_atomic_add)


@cuda.jit
def _sweeps_kernel(events, acc, orders, key, b0, elems, E, kind, sites, shape, strides,
                   periodic, offsets, open_, bond_slot, bits, words, fwd, pidx, oidx,
                   n_stride, oslot, stop, state, face, obuf, T, Du, Dv, c):
    q = cuda.grid(1)
    if q < events.shape[0]:
        if orders.shape[0] != 0:
            order = orders[q]
        else:
            order = obuf[q]
            _shuffle(order, elems, key, np.uint64(b0 + q) * np.uint64(E))
        _one_sweep(events[q], acc, order, kind, sites, shape, strides, periodic, offsets,
                   open_, bond_slot, bits, words, fwd, pidx, oidx, n_stride, oslot, stop,
                   state[q], face[q], T[q], Du[q], Dv[q], c[q])


def _sync(stream):
    """Wait for ``stream`` (0: the default stream, which copies wait for already)."""
    if stream != 0:
        stream.synchronize()


def device_bytes(n, m, d, periodic_axes, count, rows, explicit=False) -> int:
    """Device bytes of a launch of ``count`` sweeps: per sweep the union-find rows,
    its order (unless ``explicit`` orders are given, which take as much) and scratch,
    plus the shared sums and the elements."""
    per = n * (16 + 4 * periodic_axes) + 8 * m + 8 * (3 * max(periodic_axes, 1) + d)
    return count * (per + 8 * (2 * d + 2)) + 8 * rows + 16 * m


#: device bytes one launch's per-sweep rows may take; more sweeps run as more launches
LAUNCH_BYTES = 2**30


def per_launch(n, m, d, periodic_axes, count) -> int:
    """Sweeps per launch: as many as :data:`LAUNCH_BYTES` hold (at least one)."""
    one = device_bytes(n, m, d, periodic_axes, 1, 0)
    return max(1, min(count, LAUNCH_BYTES // max(one, 1)))


def sweeps_cuda(kind, shape, periodic, offsets, open_, bond_slot, bits, words, count, seed,
                first=0, observables=_cpu.OBSERVABLES, n_stride=1, orders=None, stop=-1,
                stream=0):
    """:func:`catalytic.kernels.cpu.newman_ziff.sweeps` on the GPU, one sweep per
    thread, :func:`per_launch` sweeps per launch; same arguments and returns (host
    arrays)."""
    p = _cpu.plan(kind, shape, periodic, offsets, open_, bond_slot, bits, words, observables,
                  orders, count)
    d, n, m, P, count, orders = p.d, p.n, p.m, p.P, p.count, p.orders
    R = m // n_stride + 1 if observables else 0
    events = np.full((count, 2 * d + 2), -1, dtype=np.int64)
    acc = np.zeros((2 * len(observables), R), dtype=np.float64)
    if count:
        S = per_launch(n, m, d, P, count)
        dev = functools.partial(cuda.to_device, stream=stream)
        d_acc = dev(acc)
        fixed = (_rnd.stream_key(seed), dev(p.elems), np.int64(p.E),
                 0 if kind == "site" else 1, dev(p.sites), dev(p.shape), dev(p.strides),
                 dev(p.periodic), dev(p.offsets), dev(p.open_), dev(p.bond_slot), dev(p.bits),
                 np.int64(words), dev(p.fwd), dev(p.pidx), dev(p.oidx), np.int64(n_stride),
                 dev(p.oslot), np.int64(stop))
        rows = tuple(cuda.device_array(shp, dt, stream=stream) for shp, dt in (
            ((S, n, 2 + P), np.int32),
            ((S, n if d > P else 0), np.uint64),
            ((S, m if orders.shape[0] == 0 else 0), np.int64),
            ((S, max(P, 1)), np.int64), ((S, max(P, 1)), np.int64),
            ((S, max(P, 1)), np.int64), ((S, d), np.int64)))
        for lo in range(0, count, S):
            hi = min(count, lo + S)
            d_events = dev(events[lo:hi])
            d_orders = dev(orders[lo:hi] if orders.shape[0] else orders)
            _sweeps_kernel[_blocks(hi - lo), TPB, stream](
                d_events, d_acc, d_orders, fixed[0], np.int64(first + lo), *fixed[1:],
                *rows)
            got = d_events.copy_to_host(stream=stream)
            _sync(stream)
            events[lo:hi] = got
        acc = d_acc.copy_to_host(stream=stream)
        _sync(stream)
    sums = {name: acc[2 * o:2 * o + 2] for o, name in enumerate(observables)}
    return events, sums, m

"""Newman-Ziff percolation results: microcanonical and canonical curves, thresholds.

:meth:`UnifiedCatalyticLattice.newman_ziff <catalytic.UnifiedCatalyticLattice.newman_ziff>`
(the ``newman_ziff`` operation) runs the sweeps and returns an :class:`NZResult`; this
module is the analysis, NumPy and SciPy only.

Microcanonical
    At occupation number ``n`` (sites or bonds occupied, ``0 <= n <= N``): the mean over
    sweeps of an observable and its standard error (``res.microcanonical(what)``).
    Events (``"span"``, ``"wrap"`` per axis, ``"wrap_any"``, ``"wrap_all"``) are
    probabilities: the share of sweeps whose event happened at or before ``n``.
Canonical
    At occupation probability ``p``: ``Q(p) = sum_n B(N, n, p) Q_n`` (Newman & Ziff, PRE
    64, 016706 (2001)), summed over the window ``|n - N p| <= 40 sigma + 10`` (``sigma =
    sqrt(N p (1 - p))``) outside which the binomial weights are below 1e-300. Events are
    convolved sweep by sweep (``P(Binomial(N, p) >= n_b)``), so their errors are the
    spread over sweeps; an observable's error is ``sum_n B(N, n, p) se_n``, an upper
    bound (the curve's values at neighbouring ``n`` come from the same sweeps).
Thresholds
    :func:`threshold`: where an event's canonical probability crosses a known value
    (:data:`TARGETS`); :func:`crossing`: where the curves of two results (two sizes)
    cross. Errors by the jackknife over blocks of sweeps.

Examples
--------
>>> import catalytic as cat
>>> L = cat.Lattice(shape=(8, 9))
>>> res = L.newman_ziff(200, kind="bond", seed=1)
>>> res.N, res.sweeps                     # 8 * 8 + 7 * 9 bonds inside the open axes
(127, 200)
>>> mean, err = res.canonical("span", [0.0, 1.0], axis=0)
>>> mean.tolist()
[0.0, 1.0]
>>> est = threshold(res, "span", 0.5, axis=0)
>>> 0.4 < est.value < 0.6 and est.stderr > 0
True
"""

from __future__ import annotations

import math
import numbers
from typing import NamedTuple

import numpy as np

__all__ = ["NZResult", "Estimate", "TARGETS", "EVENTS", "OBSERVABLES", "threshold",
           "crossing", "binomial_window"]

#: per-occupation observables the sweeps can record (their accumulated sums)
OBSERVABLES = ("largest", "mean_size", "clusters")
#: per-sweep events (occupation number of the first occurrence)
EVENTS = ("span", "wrap", "wrap_any", "wrap_all")
#: known values of wrapping and crossing probabilities at the threshold, the same for
#: site and bond percolation: on an L x L square torus, as L grows, a cluster wraps one
#: given axis with probability 0.521058290, either axis 0.690473725, both 0.351642855
#: (Pinson, J. Stat. Phys. 75, 1167 (1994); Newman & Ziff, PRE 64, 016706 (2001)); a
#: square-lattice bond rectangle of L x (L + 1) sites is crossed along its long axis with
#: probability exactly 1/2 at p = 1/2 (self-duality), at every L
TARGETS = {"square_wrap": 0.521058290, "square_wrap_any": 0.690473725,
           "square_wrap_all": 0.351642855, "square_bond_crossing": 0.5}
#: binomial weights further than this many standard deviations (plus 10) from N p are
#: below 1e-300 and are not summed
WINDOW_SIGMAS = 40.0


class Estimate(NamedTuple):
    """A threshold estimate: ``value`` and its jackknife standard error over
    ``blocks`` blocks of sweeps."""

    value: float
    stderr: float
    blocks: int


def binomial_window(N: int, p: float) -> tuple[np.ndarray, np.ndarray]:
    """``(n, w)``: the occupation numbers where ``Binomial(N, p)`` matters and their
    weights, normalised to sum 1.

    The weights are SciPy's ``binom.pmf`` (Boost's evaluation, accurate to a few ulps at
    any N; a difference of ``gammaln`` values would lose about 7 digits at N = 1e8),
    summed only over ``|n - N p| <= 40 sigma + 10``.

    Examples
    --------
    >>> n, w = binomial_window(10**8, 0.3)
    >>> bool(abs(w.sum() - 1) < 1e-12), bool(abs(n @ w - 3e7) < 1e-3 * 3e7)
    (True, True)
    """
    from scipy.stats import binom

    if p <= 0.0 or p >= 1.0 or N == 0:
        n = np.array([0 if p <= 0.0 else N], dtype=np.int64)
        return n, np.ones(1)
    mu = N * p
    half = WINDOW_SIGMAS * math.sqrt(N * p * (1.0 - p)) + 10.0
    lo, hi = max(0, math.floor(mu - half)), min(N, math.ceil(mu + half))
    n = np.arange(lo, hi + 1, dtype=np.int64)
    w = binom.pmf(n, N, p)
    return n, w / w.sum()


def _probabilities(p) -> tuple[np.ndarray, bool]:
    arr = np.asarray(p)
    if arr.dtype == np.bool_ or arr.dtype.kind not in "iuf":
        raise TypeError(f"p must be a real number or an array of them, got {p!r}")
    arr = arr.astype(np.float64)
    bad = ~((arr >= 0.0) & (arr <= 1.0))
    if bad.any():
        raise ValueError(f"probability p must be in [0, 1], got {arr[bad].flat[0]!r}")
    return arr, arr.ndim == 0


def _block_count(blocks, sweeps) -> int:
    if isinstance(blocks, bool) or not isinstance(blocks, (numbers.Integral, np.integer)):
        raise TypeError(f"blocks must be an integer, got {blocks!r}")
    if blocks < 2:
        raise ValueError(f"blocks must be >= 2, got {blocks}")
    if sweeps < 2:
        raise ValueError(f"a jackknife needs at least 2 sweeps, got {sweeps}")
    return int(min(blocks, sweeps))


class NZResult:
    """The sweeps of one or more Newman-Ziff runs on one lattice.

    Attributes
    ----------
    kind : {"site", "bond"}
    shape, periodic : tuple
        The lattice's.
    N : int
        Elements a sweep occupies (existing sites, or usable bonds).
    n_sites : int
        Existing sites.
    n_stride : int
        Observables were recorded at ``n = 0, n_stride, 2 n_stride, ...`` (:attr:`n`).
    seed : int
    ranges : tuple of (int, int)
        The sweep indices ``(first, stop)`` the result holds, in the order their events
        are stored (explicit orders: ``()``).
    events : int64 ndarray (sweeps, 2 d + 2)
        Per sweep: columns ``0..d-1`` the occupation at which open axis ``a`` was first
        spanned, ``d..2d-1`` periodic axis ``a`` first wrapped, ``2d`` any axis
        wrapped, ``2d+1`` every periodic axis had wrapped (-1: never, or the axis is
        not of that kind).
    sums : dict
        ``{observable: float64 (2, len(n))}``: the sum over sweeps and the sum of
        squares at each recorded ``n``.
    """

    def __init__(self, *, kind, shape, periodic, N, n_sites, n_stride, seed, ranges, events,
                 sums):
        self.kind = kind
        self.shape = tuple(int(x) for x in shape)
        self.periodic = tuple(bool(x) for x in periodic)
        self.N = int(N)
        self.n_sites = int(n_sites)
        self.n_stride = int(n_stride)
        self.seed = int(seed)
        self.ranges = tuple((int(a), int(b)) for a, b in ranges)
        self.events = np.asarray(events, dtype=np.int64)
        self.sums = {k: np.asarray(v, dtype=np.float64) for k, v in sums.items()}

    def __repr__(self) -> str:
        return (f"NZResult(kind={self.kind!r}, shape={self.shape}, periodic={self.periodic}, "
                f"N={self.N}, sweeps={self.sweeps}, observables={self.observables})")

    def __eq__(self, other) -> bool:
        if not isinstance(other, NZResult):
            return NotImplemented
        return (self._key() == other._key() and self.ranges == other.ranges
                and np.array_equal(self.events, other.events)
                and self.sums.keys() == other.sums.keys()
                and all(np.array_equal(v, other.sums[k]) for k, v in self.sums.items()))

    __hash__ = None

    def _key(self):
        return (self.kind, self.shape, self.periodic, self.N, self.n_sites, self.n_stride,
                self.seed)

    @property
    def sweeps(self) -> int:
        return int(self.events.shape[0])

    @property
    def observables(self) -> tuple:
        return tuple(self.sums)

    @property
    def n(self) -> np.ndarray:
        """The occupation numbers at which observables were recorded."""
        return np.arange(0, self.N + 1, self.n_stride, dtype=np.int64)

    # -- merging -------------------------------------------------------------------------
    def merge(self, *others) -> "NZResult":
        """This result and ``others`` (runs of other sweeps on the same lattice with the
        same options) as one: events concatenated, sums added.

        Raises
        ------
        TypeError
            An argument is not an :class:`NZResult`.
        ValueError
            The runs differ in lattice, kind, N, seed, stride or observables, or hold a
            sweep twice.
        """
        parts = (self,) + others
        for r in others:
            if not isinstance(r, NZResult):
                raise TypeError(f"can only merge NZResult objects, got {type(r).__name__}")
            if r._key() != self._key() or r.observables != self.observables:
                raise ValueError(f"cannot merge {r!r} into {self!r}: the runs differ (lattice, "
                                 "kind, seed, n_stride or observables)")
        ranges = [rg for r in parts for rg in r.ranges]
        spans = sorted(rg for rg in ranges if rg[1] > rg[0])
        for (_, a1), (b0, b1) in zip(spans, spans[1:]):
            if b0 < a1:
                raise ValueError(f"sweeps {b0}..{min(a1, b1) - 1} are in two of the results")
        sums = {k: sum(r.sums[k] for r in parts) for k in self.observables}
        return NZResult(kind=self.kind, shape=self.shape, periodic=self.periodic, N=self.N,
                        n_sites=self.n_sites, n_stride=self.n_stride, seed=self.seed,
                        ranges=ranges, events=np.concatenate([r.events for r in parts]),
                        sums=sums)

    # -- per sweep -----------------------------------------------------------------------
    def event(self, what: str, axis=None) -> np.ndarray:
        """The occupation number of event ``what`` in every sweep (int64, -1 never):
        ``"span"`` (an open ``axis``), ``"wrap"`` (a periodic ``axis``), ``"wrap_any"``,
        ``"wrap_all"``."""
        d = len(self.shape)
        if what not in EVENTS:
            raise ValueError(f"unknown event {what!r}; use one of {EVENTS}")
        if what in ("wrap_any", "wrap_all"):
            if axis is not None:
                raise ValueError(f"event {what!r} takes no axis, got axis={axis!r}")
            if not any(self.periodic):
                raise ValueError(f"event {what!r} needs a periodic axis; this lattice has none")
            return self.events[:, 2 * d + (what == "wrap_all")]
        if axis is None:
            raise ValueError(f"event {what!r} needs an axis")
        if isinstance(axis, bool) or not isinstance(axis, (numbers.Integral, np.integer)):
            raise TypeError(f"axis must be an integer, got {axis!r}")
        if not -d <= axis < d:
            raise ValueError(f"axis {axis} out of range for a {d}-D lattice")
        a = int(axis) % d
        if what == "span" and self.periodic[a]:
            raise ValueError(f"axis {a} is periodic: it wraps ('wrap'), it is not spanned")
        if what == "wrap" and not self.periodic[a]:
            raise ValueError(f"axis {a} is open: it is spanned ('span'), it does not wrap")
        return self.events[:, a if what == "span" else d + a]

    def _check_observable(self, what):
        if what not in self.sums:
            if what in OBSERVABLES:
                raise ValueError(f"observable {what!r} was not recorded (observables="
                                 f"{self.observables})")
            raise ValueError(f"unknown observable or event {what!r}; use one of "
                             f"{OBSERVABLES + EVENTS}")

    # -- microcanonical ----------------------------------------------------------------
    def microcanonical(self, what: str, *, axis=None, moment: int = 1):
        """``(mean, stderr)`` over the sweeps at every recorded ``n`` (:attr:`n`).

        ``what``: an observable (``moment=2``: the mean of its square, with a NaN error)
        or an event (its probability of having happened by ``n``; ``axis`` for ``"span"``
        and ``"wrap"``)."""
        S = self.sweeps
        if what in EVENTS:
            ev = self.event(what, axis)
            counts = np.bincount(ev[ev >= 0], minlength=self.N + 1)
            prob = np.cumsum(counts)[self.n] / S
            err = np.sqrt(prob * (1 - prob) / max(S - 1, 1))
            return prob, err
        self._check_observable(what)
        total, squares = self.sums[what]
        if moment == 2:
            return squares / S, np.full(len(total), np.nan)
        if moment != 1:
            raise ValueError(f"moment must be 1 or 2, got {moment!r}")
        mean = total / S
        var = np.maximum(squares / S - mean * mean, 0.0) * S / max(S - 1, 1)
        return mean, np.sqrt(var / S)

    # -- canonical ---------------------------------------------------------------------
    def canonical(self, what: str, p, *, axis=None, moment: int = 1):
        """``(mean, stderr)`` at occupation probability ``p`` (a number or an array; the
        results have its shape): the binomial convolution of the microcanonical curve
        (module docstring). With ``n_stride > 1`` the curve is interpolated linearly
        between the recorded ``n``.

        Raises
        ------
        ValueError
            ``p`` outside [0, 1] (or NaN), an unknown or unrecorded ``what``.
        """
        ps, scalar = _probabilities(p)
        if what in EVENTS:
            ev = self.event(what, axis)
            vals, counts = np.unique(ev[ev >= 0], return_counts=True)
            S = self.sweeps
            flat = ps.reshape(-1)
            m1 = np.empty(flat.shape)
            m2 = np.empty(flat.shape)
            step = max(1, 2**22 // max(len(vals), 1))  # a (values x p) block of <= 32 MiB
            for lo in range(0, len(flat), step):
                r = _sf(vals[:, None], self.N, flat[None, lo:lo + step])
                m1[lo:lo + step] = counts @ r / S
                m2[lo:lo + step] = counts @ (r * r) / S
            mean = m1.reshape(ps.shape)
            err = np.sqrt(np.maximum(m2 - m1 * m1, 0.0) / max(S - 1, 1)).reshape(ps.shape)
        else:
            mu, se = self.microcanonical(what, moment=moment)
            grid = self.n
            mean = np.empty(ps.shape)
            err = np.empty(ps.shape)
            for idx, q in np.ndenumerate(ps):
                n, w = binomial_window(self.N, float(q))
                if self.n_stride == 1:
                    mean[idx] = w @ mu[n]
                    err[idx] = w @ se[n]
                else:
                    mean[idx] = w @ np.interp(n, grid, mu)
                    err[idx] = w @ np.interp(n, grid, se)
        if scalar:
            return float(mean[()]), float(err[()])
        return mean, err


def _sf(vals, N, p) -> np.ndarray:
    """``P(Binomial(N, p) >= v)`` for each event occupation ``v``."""
    from scipy.stats import binom

    return binom.sf(vals - 1, N, p)


def _blocks(res: NZResult, what, axis, B):
    """Per block of sweeps (contiguous, B of them): the event's distinct values and the
    counts of each per block."""
    ev = res.event(what, axis)
    S = len(ev)
    block = (np.arange(S) * B) // S
    keep = ev >= 0
    vals, inv = np.unique(ev[keep], return_inverse=True)
    counts = np.zeros((B, len(vals)))
    np.add.at(counts, (block[keep], inv), 1.0)
    sizes = np.bincount(block, minlength=B).astype(np.float64)
    return vals, counts, sizes


def _solve(f, what):
    """The root of the increasing ``f`` on [0, 1] (brentq), or a ValueError."""
    from scipy.optimize import brentq

    lo, hi = f(0.0), f(1.0)
    if not lo < 0 < hi:
        raise ValueError(f"the {what} does not cross in p in [0, 1] (difference "
                         f"{lo:+.3g} at p = 0, {hi:+.3g} at p = 1)")
    return brentq(f, 0.0, 1.0, xtol=1e-13, rtol=4 * np.finfo(float).eps)


def _jackknife(estimates, full, B) -> float:
    est = np.asarray(estimates)
    return float(math.sqrt((B - 1) / B * np.sum((est - est.mean()) ** 2)))


def threshold(result: NZResult, what: str, target: float, *, axis=None,
              blocks: int = 16) -> Estimate:
    """The occupation probability at which the canonical probability of event ``what``
    equals ``target``, with its jackknife error over ``blocks`` blocks of sweeps.

    Parameters
    ----------
    result : NZResult
    what : {"span", "wrap", "wrap_any", "wrap_all"}
    target : float
        In (0, 1); e.g. :data:`TARGETS` ``["square_wrap_any"]`` for ``"wrap_any"`` on
        an L x L square torus.
    axis : int, optional
        For ``"span"`` and ``"wrap"``.
    blocks : int, default 16
        Jackknife blocks (at most the number of sweeps).

    Returns
    -------
    Estimate
        ``(value, stderr, blocks)``.

    Raises
    ------
    ValueError
        ``target`` outside (0, 1), too few sweeps, or a curve that does not reach
        ``target``.

    Notes
    -----
    Each evaluation of the curve costs one binomial tail per distinct event value; a
    root takes about 40 evaluations, done ``blocks + 1`` times.
    """
    if not isinstance(result, NZResult):
        raise TypeError(f"result must be an NZResult, got {type(result).__name__}")
    t = float(target)
    if not 0.0 < t < 1.0:
        raise ValueError(f"target must be in (0, 1), got {target!r}")
    B = _block_count(blocks, result.sweeps)
    vals, counts, sizes = _blocks(result, what, axis, B)
    N = result.N

    def curve(c, size):
        return lambda p: float(c @ _sf(vals, N, p)) / size - t

    full = _solve(curve(counts.sum(0), sizes.sum()), f"probability of {what!r} minus {t}")
    loo = [_solve(curve(counts.sum(0) - counts[i], sizes.sum() - sizes[i]),
                  f"probability of {what!r} minus {t} (jackknife block {i})")
           for i in range(B)]
    return Estimate(full, _jackknife(loo, full, B), B)


def crossing(a: NZResult, b: NZResult, what: str, *, axis=None, blocks: int = 16) -> Estimate:
    """Where the canonical probabilities of event ``what`` in two results (two lattice
    sizes) cross, with the jackknife error over ``blocks`` blocks of each (block ``i``
    of both left out together).

    Raises
    ------
    ValueError
        Too few sweeps, or curves that do not cross in (0, 1) with ``b``'s rising
        through ``a``'s (pass the smaller lattice as ``a``: its curve is the flatter,
        above the larger one's below the crossing and below it above).
    """
    for r in (a, b):
        if not isinstance(r, NZResult):
            raise TypeError(f"results must be NZResult objects, got {type(r).__name__}")
    B = _block_count(blocks, min(a.sweeps, b.sweeps))
    va, ca, sa = _blocks(a, what, axis, B)
    vb, cb, sb = _blocks(b, what, axis, B)

    def curve(xa, na, xb, nb):
        return lambda p: float(xb @ _sf(vb, b.N, p)) / nb - float(xa @ _sf(va, a.N, p)) / na

    f = curve(ca.sum(0), sa.sum(), cb.sum(0), sb.sum())
    # the curves meet at p = 0 and 1: bracket the crossing between b's deepest dip
    # below a and its highest rise above it, on a grid strictly inside (0, 1)
    grid = np.linspace(0.0, 1.0, 101)[1:-1]
    g = np.array([f(p) for p in grid])
    i, j = int(np.argmin(g)), int(np.argmax(g))
    if not (g[i] < 0 < g[j] and i < j):
        raise ValueError(f"the {what!r} curves do not cross with the second result's "
                         "curve rising through the first's (pass the smaller lattice "
                         "first)")
    lo, hi = grid[i], grid[j]

    def solve(h, label):
        from scipy.optimize import brentq

        if not h(lo) < 0 < h(hi):
            raise ValueError(f"the {label} changes sign outside [{lo}, {hi}]")
        return brentq(h, lo, hi, xtol=1e-13, rtol=4 * np.finfo(float).eps)

    full = solve(f, f"difference of the two {what!r} curves")
    loo = [solve(curve(ca.sum(0) - ca[i], sa.sum() - sa[i], cb.sum(0) - cb[i],
                       sb.sum() - sb[i]),
                 f"difference of the two {what!r} curves (jackknife block {i})")
           for i in range(B)]
    return Estimate(full, _jackknife(loo, full, B), B)

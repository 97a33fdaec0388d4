"""The router: which backend runs a call, and why.

Two separate questions, each answered with a reason:

1. *Can* a backend run this call? (registered implementation, backend available,
   implementation supports these arguments: dtype, options, size.)
2. Is it *worth it*? Among those that can, the one with the lowest predicted cost
   ``overhead_s + work / throughput + terms``, where ``(overhead_s, throughput)`` per
   (operation, backend) comes from calibration measured on this machine
   (``catalytic calibrate``), or from the implementation's default until calibrated,
   and the optional ``terms`` are what an implementation adds for costs the work count
   cannot see (a GPU's launches per BFS level, its PCIe copies; see
   :class:`~catalytic.registry.Implementation`), each named in the decision.

``explain()`` returns the :class:`Decision` with every backend's prediction and every
rejection's reason. ``stats()`` counts decisions and keeps measured times next to the
predictions so the model can be checked against reality.

Plugin failures while routing. An implementation's ``supports()`` that raises rules
out that backend for the call; the rejection reason names the plugin, the hook, and
the exception (:class:`~catalytic.errors.HookFailure`). Only when no backend can run
the call, and at least one was ruled out that way, is
:class:`~catalytic.errors.PluginError` raised, chained from the plugin's exception; a
backend forced with ``backend=`` or ``CATALYTIC_BACKEND`` whose ``supports()`` raises
gets that ``PluginError`` at once. An operation's ``work()`` that raises, or that
returns anything but a finite number >= 0 (NaN, an infinity, a negative count), leaves
no cost to compare: the call goes to the first backend in preference order (numpy,
numba-cpu, cuda, then the others in registration order; :func:`preference_order`) that
can run it, ``Decision.predictions`` is empty, ``Decision.work`` is NaN, and
``Decision.reason`` names the plugin and the exception (for a bad value, a
``ValueError`` that shows it). No prediction is ever made from such a count, so none
reaches ``router.stats()`` or the profiler's exports. Exceptions from ``validate``
(the user's bad arguments) are not caught: they reach the caller unchanged.

Calibration files are validated when they are read (:func:`read_calibration`); a file
that is not JSON or does not follow the schema is a
:class:`~catalytic.errors.CalibrationError` naming the file and the key. A bad file
named by ``CATALYTIC_CALIBRATION`` (or ``calibration_path=``) stops the engine from
being built; a bad file at the user path (:func:`user_calibration_path`) is reported
with a ``RuntimeWarning``, kept in ``Router.calibration_problem`` (``catalytic info``
prints it and exits with status 1), and the shipped file is used instead, so that
``catalytic calibrate`` can still run and overwrite it.
"""

from __future__ import annotations

import json
import math
import os
import threading
import warnings
from importlib import resources
from pathlib import Path

import numpy as np

from catalytic.errors import (
    CalibrationError,
    HookFailure,
    InsufficientMemoryError,
    MemoryShortfall,
    NoBackendError,
    PluginError,
)
from catalytic.catalogue import BATCHED_PREFIX, on_device
from catalytic.registry import keywords_of

#: cost used for an implementation with neither calibration nor a default
GENERIC_COST = (50e-6, 1e7)
#: order of preference when predictions tie exactly
_PREFERENCE = ("numpy", "numba-cpu", "cuda")
#: why a CPU backend cannot take a call whose arguments live on the GPU
GPU_INPUT_REASON = "input lives on the GPU (a GPU backend runs it; or .copy_to_host() it)"
BONDS_REASON = "does not honour bonds (the lattice has bonds or bond weights)"


def gpu_input(args, kwargs) -> bool:
    """True when any argument is a GPU array: only backends on a GPU device take those."""
    for a in args:
        if on_device(a):
            return True
    for a in kwargs.values():
        if on_device(a):
            return True
    return False


class Decision:
    """The router's answer for one call.

    Attributes
    ----------
    op, backend : str
    reason : str
        Why this backend, in words.
    predictions : dict
        backend -> predicted seconds, for every backend that can run the call (empty
        when the operation's ``work()`` raised: nothing could be predicted).
    rejected : dict
        backend -> reason it cannot run the call.
    sources : dict
        backend -> where its cost parameters came from (calibrated, plugin default).
    work : float
        Work units of the call, as the operation's work function counts them (NaN when
        that function raised).
    forced : bool
        True when ``backend=`` or ``CATALYTIC_BACKEND`` chose the backend.
    terms : dict
        backend -> ``{name: seconds}`` of the cost terms included in its prediction
        (only backends whose implementation adds some).
    """

    __slots__ = ("op", "backend", "_reason", "predictions", "rejected", "sources", "work",
                 "forced", "terms")

    def __init__(self, op, backend, reason, predictions=None, rejected=None, sources=None,
                 work=0.0, forced=False, terms=None):
        self.op = op
        self.backend = backend
        self._reason = reason  # None: "lowest predicted cost", worded on first access
        self.predictions = {} if predictions is None else predictions
        self.rejected = {} if rejected is None else rejected
        self.sources = {} if sources is None else sources
        self.work = work
        self.forced = forced
        self.terms = {} if terms is None else terms

    @property
    def reason(self) -> str:
        if self._reason is None:
            if len(self.predictions) == 1:
                self._reason = "only backend that can run it"
            else:
                best = self.predictions[self.backend]
                runner_up = min(t for b, t in self.predictions.items() if b != self.backend)
                self._reason = (
                    f"lowest predicted cost for work={self.work:.3g} "
                    f"({_fmt_s(best)} vs next {_fmt_s(runner_up)})"
                )
        return self._reason

    def __repr__(self) -> str:
        return (f"Decision(op={self.op!r}, backend={self.backend!r}, reason={self.reason!r}, "
                f"predictions={self.predictions!r}, rejected={self.rejected!r}, "
                f"work={self.work!r}, forced={self.forced!r})")

    def __str__(self) -> str:
        lines = [f"{self.op} -> {self.backend}: {self.reason}"]
        for b, t in sorted(self.predictions.items(), key=lambda kv: kv[1]):
            extra = "".join(f"; {name} {_fmt_s(sec)}"
                            for name, sec in self.terms.get(b, {}).items())
            lines.append(f"  {b:<10} predicted {_fmt_s(t):>10}  ({self.sources.get(b, '')}"
                         f"{extra})")
        for b, why in self.rejected.items():
            lines.append(f"  {b:<10} cannot run: {why}")
        return "\n".join(lines)


#: what a routed call costs besides its implementation (validation, routing, the
#: engine's bookkeeping), which calibration does not time: a loop of single calls pays
#: it per item, a batched twin per call (``benchmarks/bench_small_calls.py``)
ROUTED_CALL_S = 5e-6


class BatchChoice:
    """The router's answer to "a batched twin or a loop of single calls?" for one group
    of items (:meth:`Router.compare_batch`).

    Attributes
    ----------
    batched : bool
        True: run the group as calls of the twin.
    reason : str
        Why, with both predictions.
    seconds : dict
        ``{"batched": s, "loop": s}``: predicted seconds of the whole group each way
        (NaN where nothing could be predicted).
    backends : dict
        ``{"batched": name, "loop": name}``: where each would run.
    """

    __slots__ = ("batched", "reason", "seconds", "backends")

    def __init__(self, batched, reason, seconds, backends):
        self.batched = batched
        self.reason = reason
        self.seconds = seconds
        self.backends = backends

    def __repr__(self) -> str:
        return (f"BatchChoice(batched={self.batched!r}, reason={self.reason!r}, "
                f"seconds={self.seconds!r}, backends={self.backends!r})")


def _fmt_s(t: float) -> str:
    if t < 1e-3:
        return f"{t * 1e6:.1f} us"
    if t < 1:
        return f"{t * 1e3:.2f} ms"
    return f"{t:.2f} s"


def shipped_calibration_path() -> Path:
    return Path(str(resources.files("catalytic").joinpath("data/calibration.json")))


def user_calibration_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "catalytic" / "calibration.json"


#: calibration file format this version reads and ``catalytic calibrate`` writes
CALIBRATION_VERSION = 1
#: top-level keys of a calibration file: required ones, then optional ones, with types
_CAL_REQUIRED = {"version": int, "entries": dict}
_CAL_OPTIONAL = {"created": str, "machine": dict, "model": str, "terms": dict}
#: keys of one ``entries.<op>.<backend>`` object
_ENTRY_REQUIRED = ("overhead_s", "throughput")
_ENTRY_OPTIONAL = ("samples",)


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _shown(x) -> str:
    text = repr(x)
    return text if len(text) <= 60 else text[:57] + "..."


def validate_calibration(doc, path) -> None:
    """Check a calibration document against the schema ``catalytic calibrate`` writes.

    Parameters
    ----------
    doc : object
        The parsed JSON.
    path : str or os.PathLike
        The file it came from, for the error message.

    Raises
    ------
    CalibrationError
        Naming the file and the key path of the first problem: an unknown or missing
        key, a wrong type, a negative ``overhead_s``, a ``throughput`` that is not
        positive, a ``samples`` row that is not ``[work, seconds]``, a ``terms``
        parameter that is not a finite number >= 0. Operations and backends under
        ``entries`` and ``terms`` may be any names (their plugins may be absent).

    Notes
    -----
    The schema (``version`` 1)::

        {"version": 1, "created": str, "machine": {...}, "model": str,
         "entries": {op: {backend: {"overhead_s": float >= 0, "throughput": float > 0,
                                    "samples": [[work, seconds], ...]}}},
         "terms": {backend: {parameter: float >= 0}}}

    ``version`` and ``entries`` are required, the other top-level keys optional;
    ``samples`` is optional. ``terms`` holds the parameters of a backend's cost terms
    (``launch_s``, ``pcie_bytes_per_s`` of the cuda backend), measured by
    ``catalytic calibrate``. O(number of entries and samples).

    Examples
    --------
    >>> validate_calibration({"version": 1, "entries": {}}, "cal.json")
    >>> validate_calibration({"version": 1, "entries": {"op": {"numpy": {
    ...     "overhead_s": 1e-6, "throughput": 0}}}}, "cal.json")
    Traceback (most recent call last):
    ...
    catalytic.errors.CalibrationError: calibration file 'cal.json': entries.op.numpy.throughput: must be a finite number > 0, got 0
    """
    if not isinstance(doc, dict):
        raise CalibrationError(path, f"the top level must be a JSON object, got {_shown(doc)}")
    allowed = {**_CAL_REQUIRED, **_CAL_OPTIONAL}
    for key in doc:
        if key not in allowed:
            raise CalibrationError(path, f"unknown key (allowed: {', '.join(allowed)})", key)
    for key in _CAL_REQUIRED:
        if key not in doc:
            raise CalibrationError(path, "missing (required: version, entries)", key)
    for key, kind in allowed.items():
        value = doc.get(key)
        if key in doc and (not isinstance(value, kind) or isinstance(value, bool)):
            want = {int: "an integer", dict: "an object", str: "a string"}[kind]
            raise CalibrationError(path, f"must be {want}, got {_shown(value)}", key)
    if doc["version"] != CALIBRATION_VERSION:
        raise CalibrationError(
            path, f"unsupported version {doc['version']!r} (this catalytic reads version "
            f"{CALIBRATION_VERSION}; run catalytic calibrate to write a new file)", "version")
    for op, per in doc["entries"].items():
        if not isinstance(per, dict):
            raise CalibrationError(path, f"must be an object of backends, got {_shown(per)}",
                                   f"entries.{op}")
        for backend, entry in per.items():
            at = f"entries.{op}.{backend}"
            if not isinstance(entry, dict):
                raise CalibrationError(path, f"must be an object, got {_shown(entry)}", at)
            for key in entry:
                if key not in _ENTRY_REQUIRED + _ENTRY_OPTIONAL:
                    raise CalibrationError(
                        path, "unknown key (allowed: overhead_s, throughput, samples)",
                        f"{at}.{key}")
            for key in _ENTRY_REQUIRED:
                if key not in entry:
                    raise CalibrationError(path, "missing (required: overhead_s, throughput)",
                                           f"{at}.{key}")
            overhead, throughput = entry["overhead_s"], entry["throughput"]
            if not _is_number(overhead) or overhead < 0:
                got = _shown(overhead)
                raise CalibrationError(path, f"must be a finite number >= 0, got {got}",
                                       f"{at}.overhead_s")
            if not _is_number(throughput) or throughput <= 0:
                got = _shown(throughput)
                raise CalibrationError(path, f"must be a finite number > 0, got {got}",
                                       f"{at}.throughput")
            samples = entry.get("samples", [])
            if not isinstance(samples, list):
                got = _shown(samples)
                raise CalibrationError(path, f"must be a list of [work, seconds], got {got}",
                                       f"{at}.samples")
            for i, row in enumerate(samples):
                if (not isinstance(row, list) or len(row) != 2
                        or not all(_is_number(v) and v >= 0 for v in row)):
                    raise CalibrationError(
                        path, f"must be [work, seconds], two finite numbers >= 0, got "
                        f"{_shown(row)}", f"{at}.samples[{i}]")
    for backend, params in doc.get("terms", {}).items():
        if not isinstance(params, dict):
            raise CalibrationError(path, f"must be an object of parameters, got "
                                   f"{_shown(params)}", f"terms.{backend}")
        for key, value in params.items():
            if not _is_number(value) or value < 0:
                raise CalibrationError(path, f"must be a finite number >= 0, got "
                                       f"{_shown(value)}", f"terms.{backend}.{key}")


def read_calibration(path: str | os.PathLike) -> dict:
    """Read one calibration file and validate it (:func:`validate_calibration`).

    Returns
    -------
    dict
        The whole document; the router uses its ``entries``.

    Raises
    ------
    CalibrationError
        The file cannot be read, is not JSON (the message gives line and column), or
        does not follow the schema (the message gives the key path).
    """
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except json.JSONDecodeError as err:
        raise CalibrationError(
            path, f"not valid JSON: {err.msg} (line {err.lineno}, column {err.colno})"
        ) from err
    except (OSError, UnicodeDecodeError) as err:
        raise CalibrationError(path, f"cannot be read: {type(err).__name__}: {err}") from err
    validate_calibration(doc, path)
    return doc


def load_calibration(path: str | os.PathLike | None = None) -> tuple[dict, str]:
    """Calibration entries and where they came from (:func:`load_calibration_doc`'s
    ``entries``)."""
    doc, source = load_calibration_doc(path)
    return doc.get("entries", {}), source


def load_calibration_doc(path: str | os.PathLike | None = None) -> tuple[dict, str]:
    """The whole calibration document and where it came from (an empty one, "none",
    when there is no file).

    Order: ``path`` (or ``CATALYTIC_CALIBRATION``), the user's file written by
    ``catalytic calibrate``, then the file shipped with the package. The first file
    that exists is read and validated; a bad one raises :class:`CalibrationError`
    (the :class:`Router` decides what a bad user file means, see the module docstring).

    Raises
    ------
    FileNotFoundError
        ``path`` was given and is not a file.
    CalibrationError
        The file found is not valid (see :func:`read_calibration`).
    """
    candidates = [path] if path else [user_calibration_path(), shipped_calibration_path()]
    for p in candidates:
        p = Path(p)
        if p.is_file():
            return read_calibration(p), str(p)
        if path:
            raise FileNotFoundError(
                f"calibration file {str(p)!r} does not exist or is not a file"
            )
    return {"version": CALIBRATION_VERSION, "entries": {}}, "none"


class Router:
    """Per-call backend choice with reasons; see the module docstring."""

    def __init__(self, registry, settings, calibration_path=None):
        self.registry = registry
        self.settings = settings
        path = calibration_path or settings.calibration_path
        #: why the user's calibration file was not used (None when it was, or is absent)
        self.calibration_problem: str | None = None
        try:
            doc, self.calibration_source = load_calibration_doc(path)
        except CalibrationError as err:
            if path or Path(err.path) != user_calibration_path():
                raise
            # the user's own file is bad: say so, and use the shipped one, so that
            # `catalytic calibrate` (which builds an engine) can still overwrite it
            self.calibration_problem = (
                f"{err}; using the shipped calibration instead (fix or delete the file, "
                "or run catalytic calibrate)"
            )
            warnings.warn(self.calibration_problem, RuntimeWarning, stacklevel=3)
            doc, self.calibration_source = load_calibration_doc(shipped_calibration_path())
        #: op -> backend -> calibrated cost entry
        self.calibration = doc["entries"]
        #: backend -> parameters of its cost terms (measured; empty: its defaults)
        self.term_params = doc.get("terms", {})
        self._lock = threading.Lock()
        self._stats: dict = {}
        self._plans: dict = {}

    # -- cost model ---------------------------------------------------------------------
    def cost_params(self, op: str, backend: str) -> tuple[float, float, str]:
        """``(overhead_s, throughput, source)`` for (op, backend)."""
        entry = self.calibration.get(op, {}).get(backend)
        if entry:
            return entry["overhead_s"], entry["throughput"], "calibrated"
        impl = self.registry.implementations.get(op, {}).get(backend)
        if impl is not None and impl.cost is not None:
            return impl.cost[0], impl.cost[1], "plugin default, uncalibrated"
        return GENERIC_COST[0], GENERIC_COST[1], "generic default, uncalibrated"

    def predict(self, op: str, backend: str, work: float) -> float:
        """``overhead_s + work / throughput`` (without the call-dependent terms)."""
        overhead, throughput, _ = self.cost_params(op, backend)
        return overhead + work / throughput

    def _terms(self, impl, args, kwargs):
        """``impl.terms(params, *args, **kwargs)``, ``{}`` when it has none, or a
        :class:`HookFailure` when it raised."""
        if impl.terms is None:
            return {}
        try:
            out = {str(k): float(v) for k, v in
                   impl.terms(self.term_params.get(impl.backend, {}), *args, **kwargs).items()}
            bad = [k for k, v in out.items() if not (math.isfinite(v) and v >= 0)]
            if bad:
                raise ValueError(f"cost terms must be finite seconds >= 0, got "
                                 f"{ {k: out[k] for k in bad} }")
            return out
        except Exception as err:
            return HookFailure(impl.plugin, "terms()", err,
                               f"operation {impl.op!r}, backend {impl.backend!r}")

    # -- decisions ----------------------------------------------------------------------
    def explain(self, op: str, *args, backend: str | None = None, **kwargs) -> Decision:
        """The decision for ``op(*args, **kwargs)`` without running it.

        Arguments are validated as ``run`` would.

        Examples
        --------
        >>> import catalytic as cat
        >>> L = cat.Lattice(shape=(8, 8))
        >>> d = cat.get_engine().router.explain("distance_field", L, 0)
        >>> d.backend in d.predictions
        True
        """
        spec = self.registry.operation(op)
        if spec.validate is not None:
            args, kwargs = spec.validate(*args, **kwargs)
        return self.decide(op, args, kwargs, backend=backend)

    def decide(self, op, args, kwargs, *, backend=None, on_gpu=None):
        """Decide where ``op(*args, **kwargs)`` runs (arguments already validated).

        A first argument with a ``routing_policy()`` method (a lattice: its
        ``enable_gpu`` and ``enable_smart_routing``) brings its policy. ``on_gpu``: whether an argument is a GPU array, when
        the caller has already looked (:func:`gpu_input`)."""
        spec = self.registry.operation(op)
        policy = getattr(args[0], "routing_policy", None) if args else None
        allowed, reference_only, bonds = policy() if policy is not None else (None, False, False)
        bonds = bonds and spec.topology
        impls = self.registry.implementations.get(op, {})
        work, no_work = self._work(spec, args, kwargs)
        forced = backend or self.settings.backend
        if forced:
            return self._forced(op, impls, forced, args, kwargs, work, explicit=bool(backend),
                                no_work=no_work)
        candidates, static_rejected = self._plan(op, impls, allowed, reference_only, bonds)
        predictions, sources, terms = {}, {}, {}
        rejected = dict(static_rejected)
        best, best_t = None, None
        if on_gpu is None:
            on_gpu = gpu_input(args, kwargs)
        for name, impl, overhead, throughput, src, device in candidates:
            if on_gpu and device == "cpu":
                rejected[name] = GPU_INPUT_REASON
                continue
            why = self._supports(impl, args, kwargs)
            if why is not None:
                rejected[name] = why
                continue
            if no_work is not None:  # no cost to compare: the first that can run it
                best = name
                break
            extra = self._terms(impl, args, kwargs)
            if isinstance(extra, HookFailure):
                rejected[name] = extra
                continue
            t = overhead + work / throughput + sum(extra.values())
            predictions[name] = t
            sources[name] = src
            if extra:
                terms[name] = extra
            if best is None or t < best_t:  # candidates are in preference order
                best, best_t = name, t
        if best is None:
            short = [w for w in rejected.values() if isinstance(w, MemoryShortfall)]
            if short and len(short) == len(rejected):
                worst = min(short, key=lambda w: w.needed)
                raise InsufficientMemoryError(f"operation {op!r} ({worst.what})",
                                              worst.needed, worst.available)
            message = self._no_backend_message(op, impls, rejected)
            failed = [w for w in rejected.values() if isinstance(w, HookFailure)]
            if failed:
                raise PluginError(message) from failed[0].error
            raise NoBackendError(message)
        if no_work is not None:
            reason = (f"no cost prediction ({no_work}); first backend in preference order "
                      "that can run it")
            return Decision(op, best, reason, {}, rejected, {}, work, False)
        return Decision(op, best, None, predictions, rejected, sources, work, False, terms)

    @staticmethod
    def _work(spec, args, kwargs) -> tuple[float, HookFailure | None]:
        """``(work, None)``, or ``(nan, failure)`` when the operation's ``work()`` raised
        or gave no finite count >= 0."""
        try:
            work = float(spec.work(*args, **kwargs))
            if not (math.isfinite(work) and work >= 0):  # NaN fails both
                raise ValueError(f"work() must return a finite number >= 0, got {work!r}")
            return work, None
        except Exception as err:
            return math.nan, HookFailure(spec.plugin, "work()", err, f"operation {spec.name!r}")

    @staticmethod
    def _supports(impl, args, kwargs) -> str | None:
        """Why ``impl`` cannot run the call: a keyword argument its function does not
        take (an implementation written before the operation grew an option), or
        ``impl.supports(*args, **kwargs)``, or a :class:`HookFailure` when that raised.
        None when it can."""
        names = keywords_of(impl.func)
        if names is not None:
            extra = sorted(k for k in kwargs if k not in names)
            if extra:
                return (f"its implementation (plugin {impl.plugin!r}) takes no "
                        f"{', '.join(extra)}")
        if impl.supports is None:
            return None
        try:
            return impl.supports(*args, **kwargs)
        except Exception as err:
            return HookFailure(impl.plugin, "supports()", err,
                               f"operation {impl.op!r}, backend {impl.backend!r}")

    def _plan(self, op, impls, allowed, reference_only, bonds=False):
        """What does not depend on the call's arguments, cached until the registry
        changes: candidate backends in preference order with their cost parameters,
        and the backends ruled out (with reasons)."""
        key = (op, allowed, reference_only, bonds)
        version = self.registry.version
        hit = self._plans.get(key)
        if hit is not None and hit[0] == version:
            return hit[1], hit[2]
        candidates, rejected = [], {}
        for name in preference_order(impls):
            impl = impls[name]
            why = self._cannot(name, impl, (), {}, allowed, check_supports=False, bonds=bonds)
            if why is None and reference_only and name != "numpy":
                why = "smart routing is off for this lattice (reference backend only)"
            if why is not None:
                rejected[name] = why
                continue
            overhead, throughput, src = self.cost_params(op, name)
            device = self.registry.backends[name].device
            candidates.append((name, impl, overhead, throughput, src, device))
        self._plans[key] = (version, candidates, rejected)
        return candidates, rejected

    def _forced(self, op, impls, name, args, kwargs, work, explicit, no_work=None):
        via = "backend= argument" if explicit else "CATALYTIC_BACKEND"
        if name not in self.registry.backends:
            raise ValueError(
                f"{via} names unknown backend {name!r}; registered: "
                f"{', '.join(sorted(self.registry.backends))}"
            )
        impl = impls.get(name)
        if impl is None:
            raise NoBackendError(
                f"operation {op!r} has no {name!r} implementation (forced by {via}); "
                f"implementations: {', '.join(sorted(impls)) or 'none'}"
            )
        why = self._cannot(name, impl, args, kwargs, None)
        if isinstance(why, MemoryShortfall):
            raise InsufficientMemoryError(
                f"operation {op!r} on backend {name!r} (forced by {via}; {why.what})",
                why.needed, why.available,
            )
        if isinstance(why, HookFailure):
            raise PluginError(
                f"backend {name!r} (forced by {via}) cannot run {op!r}: {why}"
            ) from why.error
        if why is not None:
            raise NoBackendError(f"backend {name!r} (forced by {via}) cannot run {op!r}: {why}")
        if no_work is not None:
            reason = f"forced by {via}; no cost prediction ({no_work})"
            return Decision(op, name, reason, {}, {}, {}, work, True)
        overhead, throughput, src = self.cost_params(op, name)
        extra = self._terms(impl, args, kwargs)
        if isinstance(extra, HookFailure):  # nothing to add: the call still runs there
            extra = {}
        pred = {name: overhead + work / throughput + sum(extra.values())}
        return Decision(op, name, f"forced by {via}", pred, {}, {name: src}, work, True,
                        {name: extra} if extra else {})

    def _cannot(self, name, impl, args, kwargs, allowed, check_supports=True, bonds=None):
        """Why backend ``name`` cannot run ``impl`` here (None when it can). ``bonds``:
        whether the call needs an implementation that honours bonds (None: ask the
        call's first argument)."""
        if bonds is None:
            bonds = self._needs_bonds(impl.op, args)
        if bonds and not impl.bonds:
            return BONDS_REASON
        backend = self.registry.backends.get(name)
        if backend is None:
            return f"backend {name!r} is not registered (implementation from plugin {impl.plugin!r})"
        if allowed is not None and not allowed(backend):
            return f"disabled for this lattice ({backend.device} backends off)"
        ok, why = backend.status()
        if not ok:
            return f"backend unavailable: {why}"
        if check_supports and backend.device == "cpu" and gpu_input(args, kwargs):
            return GPU_INPUT_REASON
        if check_supports:
            return self._supports(impl, args, kwargs)
        return None

    def compare_batch(self, op, single, twin, rows, per_call, *, backend=None) -> BatchChoice:
        """Whether ``rows`` items of ``op`` are predicted to cost less as calls of its
        batched twin than as a loop of single calls.

        Parameters
        ----------
        op : str
            The operation; its twin is ``catalogue.BATCHED_PREFIX + op``.
        single : tuple
            ``(args, kwargs)`` of one single call, validated (a representative item: the
            items of a group share the geometry the work counts).
        twin : tuple
            ``(args, kwargs)`` of a call of the twin on a stack of one row, validated;
            ``args[1]`` is that stack.
        rows : int
            Items in the group.
        per_call : int
            Rows per call of the twin (the memory-bound batch size).
        backend : str, optional
            A forced backend, as ``backend=`` of a single call.

        Returns
        -------
        BatchChoice
            The loop costs ``rows * (prediction + ROUTED_CALL_S)``; the twin, over its
            calls of ``per_call`` rows (the last one shorter), ``prediction +
            ROUTED_CALL_S`` each, its prediction made for a stack of that many rows (a
            read-only broadcast of the one row: the work and memory models see the real
            size, nothing is copied). The cheaper wins; a tie goes to the twin. When
            either side has no prediction (an operation's ``work()`` raised) or only
            the generic guess (neither calibrated nor declared by its plugin), the twin
            runs, as before cost was compared.

        Examples
        --------
        >>> import numpy as np, catalytic as cat
        >>> from catalytic.catalogue import check_stack
        >>> L = cat.Lattice(shape=(16, 16))
        >>> one = check_stack(L, np.ones((1, 16, 16), bool))
        >>> c = cat.get_engine().router.compare_batch(
        ...     "percolates", ((L,), {"axis": 0}), ((L, one), {"axis": 0}), 100, 100)
        >>> sorted(c.seconds)
        ['batched', 'loop']
        """
        name = BATCHED_PREFIX + op
        (a1, k1), (a2, k2) = single, twin
        one = np.asarray(a2[1])
        calls = [(per_call, rows // per_call)] if rows >= per_call else []
        if rows % per_call:
            calls.append((rows % per_call, 1))
        t_twin, twin_backend, unknown = 0.0, None, []
        for size, count in calls:
            stack = np.broadcast_to(one[:1], (size,) + one.shape[1:])
            d = self.decide(name, (a2[0], stack, *a2[2:]), k2, backend=backend)
            twin_backend = d.backend
            t_twin += count * (d.predictions.get(d.backend, math.nan) + ROUTED_CALL_S)
        if self.cost_params(name, twin_backend)[2].startswith("generic"):
            unknown.append(f"{name!r} on {twin_backend}")
        d = self.decide(op, a1, k1, backend=backend)
        t_loop = rows * (d.predictions.get(d.backend, math.nan) + ROUTED_CALL_S)
        if self.cost_params(op, d.backend)[2].startswith("generic"):
            unknown.append(f"{op!r} on {d.backend}")
        seconds = {"batched": t_twin, "loop": t_loop}
        backends = {"batched": twin_backend, "loop": d.backend}
        n_calls = sum(c for _, c in calls)
        twin_words = (f"{n_calls} call{'s' if n_calls != 1 else ''} of {name!r} on "
                      f"{twin_backend}")
        loop_words = f"{rows} single calls on {d.backend}"
        if math.isnan(t_twin) or math.isnan(t_loop):
            return BatchChoice(True, f"batched: {twin_words}; no cost prediction to compare "
                               "with a loop", seconds, backends)
        if unknown:  # a generic guess on either side decides nothing: the twin, as registered
            return BatchChoice(True, f"batched: {twin_words}; no calibrated or declared cost "
                               f"for {' or '.join(unknown)} to compare with a loop (catalytic "
                               "calibrate measures the built-in ones)", seconds, backends)
        if t_twin <= t_loop:
            return BatchChoice(True, f"batched: {twin_words} predicted {_fmt_s(t_twin)}, "
                               f"{loop_words} {_fmt_s(t_loop)}", seconds, backends)
        return BatchChoice(False, f"a loop: {loop_words} predicted {_fmt_s(t_loop)}, "
                           f"{twin_words} {_fmt_s(t_twin)}", seconds, backends)

    def can_run(self, name, args, kwargs, op) -> bool:
        """Whether backend ``name`` can run ``op(*args, **kwargs)`` (arguments already
        validated): registered, available and supporting these arguments (a
        ``supports()`` that raises counts as "no")."""
        impl = self.registry.implementations.get(op, {}).get(name)
        return impl is not None and self._cannot(name, impl, args, kwargs, None) is None

    def _needs_bonds(self, op, args) -> bool:
        """Whether ``op`` reads the graph of a first argument (a lattice) with bonds."""
        policy = getattr(args[0], "routing_policy", None) if args else None
        if policy is None:
            return False
        spec = self.registry.operations.get(op)
        return bool(policy()[2]) and (spec is None or spec.topology)

    def _no_backend_message(self, op, impls, rejected):
        if not impls:
            return (
                f"operation {op!r} has no implementation; install or register the plugin "
                "that provides one"
            )
        if rejected and all(w == BONDS_REASON for w in rejected.values()):
            return (
                f"operation {op!r} does not honour bonds on any backend "
                f"({', '.join(rejected)}), and this lattice has bonds or bond weights, "
                "which it would ignore. Fix: run it on a lattice without them, or model a "
                "bond as a site of a finer lattice"
            )
        reasons = "; ".join(f"{b}: {w}" for b, w in rejected.items())
        failed = sorted({w.plugin for w in rejected.values() if isinstance(w, HookFailure)})
        if failed:
            return (
                f"no backend can run {op!r} ({reasons}). Fix: fix the plugin that raised, "
                f"or unregister it (engine.unregister_plugin({failed[0]!r}))"
            )
        return (
            f"no backend can run {op!r} ({reasons}). Fix: install the missing extra "
            '(e.g. pip install "catalytic[cuda]"), force another backend with backend= '
            "or CATALYTIC_BACKEND, or free memory"
        )

    # -- statistics ---------------------------------------------------------------------
    def record(self, decision: Decision, backend: str, seconds: float, fallback_from=None):
        """Count a finished call and its measured time next to its prediction."""
        with self._lock:
            per_op = self._stats.setdefault(decision.op, {})
            s = per_op.get(backend)
            if s is None:
                # the first call of a process pays JIT compilation or cache loading: keep
                # it apart so it does not skew the model check
                per_op[backend] = {
                    "calls": 1, "forced": int(decision.forced),
                    "fallbacks": int(fallback_from is not None), "first_call_s": seconds,
                    "measured_s": 0.0, "predicted_s": 0.0, "timed_calls": 0,
                }
                return
            s["calls"] += 1
            s["forced"] += decision.forced
            s["fallbacks"] += fallback_from is not None
            pred = decision.predictions.get(backend)
            if pred is not None:
                s["timed_calls"] += 1
                s["measured_s"] += seconds
                s["predicted_s"] += pred

    def stats(self) -> dict:
        """Per operation and backend: ``calls``, ``forced``, ``fallbacks``,
        ``first_call_s`` (the first call, which includes JIT compilation or cache loading),
        and over the later calls (``timed_calls``): total ``measured_s`` and
        ``predicted_s``, ``mean_measured_s`` and ``measured_over_predicted`` (1.0 is a
        perfect model; None until a second call)."""
        with self._lock:
            out = {}
            for op, per in self._stats.items():
                out[op] = {}
                for b, s in per.items():
                    row = dict(s)
                    timed = s["timed_calls"]
                    row["mean_measured_s"] = s["measured_s"] / timed if timed else None
                    row["measured_over_predicted"] = (
                        s["measured_s"] / s["predicted_s"] if timed and s["predicted_s"] > 0 else None
                    )
                    out[op][b] = row
            return out

    def reset_stats(self) -> None:
        with self._lock:
            self._stats.clear()


def _rank(backend: str) -> int:
    return _PREFERENCE.index(backend) if backend in _PREFERENCE else len(_PREFERENCE)


def preference_order(backends) -> list[str]:
    """Backend names in the router's order of preference (numpy, numba-cpu, cuda, then
    the others in the order given, i.e. registration order): the order ties are broken
    in, and the order used when an operation's ``work()`` raised and nothing can be
    predicted.

    Examples
    --------
    >>> preference_order(["cuda", "zeta", "alpha", "numpy"])
    ['numpy', 'cuda', 'zeta', 'alpha']
    """
    return sorted(backends, key=_rank)

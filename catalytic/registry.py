"""Operation specs, backends, and per-backend implementations.

Plugins fill the registry through the hooks in :mod:`catalytic.hookspecs`.

Examples
--------
A plugin adding an operation with two backends, registered on an engine of its own (the
process-wide one, ``cat.get_engine()``, is shared by every caller):

>>> import numpy as np, catalytic as cat
>>> class Twice:
...     @cat.hookimpl
...     def catalytic_add_operations(self, registry):
...         registry.add_operation("twice_doc_example", work=lambda x: x.size)
...         registry.add_implementation("twice_doc_example", "numpy", lambda x: 2 * x)
...         registry.add_implementation("twice_doc_example", "numba-cpu", lambda x: x + x)
>>> eng = cat.Engine(disable_plugin_autoload=True)
>>> eng.register_plugin(Twice(), "twice-doc-example")
'twice-doc-example'
>>> eng.run("twice_doc_example", np.arange(3)).tolist()
[0, 2, 4]
>>> eng.unregister_plugin("twice-doc-example")
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from catalytic.errors import PluginError

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")


@dataclass
class Backend:
    """A place operations run: ``numpy``, ``numba-cpu``, ``cuda``, or a plugin's own.

    ``available`` is a callable returning ``(ok, reason)``; it is asked once and cached
    (``Registry.refresh()`` asks again). ``disabled`` is set when the engine has taken
    the backend out of service for the process (repeated failures, see
    :meth:`Registry.disable_backend`); it wins over the probe until
    :meth:`Registry.enable_backend`.

    The lifecycle a device backend declares (all optional; see
    :meth:`Registry.add_backend`): ``fatal_error(err)``, ``synchronize()``,
    ``cleanup()``, ``release(lattice)`` and ``monitored``.
    """

    name: str
    available: Callable[[], tuple[bool, str]]
    device: str = "cpu"
    plugin: str = ""
    description: str = ""
    fatal_error: Callable[[BaseException], str | None] | None = None
    synchronize: Callable[[], None] | None = None
    cleanup: Callable[[], None] | None = None
    release: Callable[[Any], Any] | None = None
    monitored: bool = False
    _status: tuple[bool, str] | None = field(default=None, repr=False)
    disabled: str | None = field(default=None, repr=False)

    def status(self) -> tuple[bool, str]:
        """``(available, reason)``: the cached probe, or ``(False, why)`` when disabled."""
        if self.disabled is not None:
            return False, self.disabled
        if self._status is None:
            try:
                ok, reason = self.available()
            except Exception as err:  # a probe that crashes means "not available"
                ok, reason = False, f"availability check raised {type(err).__name__}: {err}"
            self._status = (bool(ok), str(reason))
        return self._status


@dataclass(frozen=True)
class Operation:
    """What an operation is, independent of where it runs.

    Parameters
    ----------
    name : str
    work : callable(*args, **kwargs) -> float
        Work units of a call (sites x stencil size, elements, ...); the cost model's
        ``overhead + work / throughput`` uses it. Must be cheap, and return a finite
        number >= 0: the router makes no prediction from anything else (see
        :mod:`catalytic.router`).
    memory : callable(*args, **kwargs) -> int, optional
        Host bytes the call will allocate; checked against free memory before running.
    validate : callable(*args, **kwargs) -> (args, kwargs), optional
        Normalises and checks arguments before routing (clear errors, no work).
    borrows : callable(*args, **kwargs) -> ndarray or None, optional
        The auxiliary buffer the call borrows; the engine verifies it comes back
        bit-identical.
    topology : bool
        Whether the operation reads the lattice's neighbour graph. On a lattice with
        bonds (or bond weights), such an operation runs only on implementations that
        declare ``bonds=True``; the others refuse the call rather than ignore the bonds.
    """

    name: str
    work: Callable[..., float]
    memory: Callable[..., int] | None = None
    validate: Callable[..., tuple[tuple, dict]] | None = None
    borrows: Callable[..., Any] | None = None
    doc: str = ""
    plugin: str = ""
    topology: bool = True


@dataclass(frozen=True)
class Implementation:
    """One backend's implementation of one operation.

    ``supports(*args, **kwargs)`` returns ``None`` when this implementation can run the
    call, or a reason string when it cannot (dtype, option, size). ``cost`` optionally
    gives a default ``(overhead_s, throughput)`` used until calibration measures one
    (finite numbers, ``overhead_s >= 0`` and ``throughput > 0``).
    ``terms(params, *args, **kwargs)`` optionally adds costs the work count cannot see,
    as ``{name: seconds}`` (a GPU's kernel launches per BFS level, its PCIe copies);
    ``params`` is the backend's ``terms`` object of the calibration file (empty until
    calibrated: the function then uses its own defaults).
    ``bonds`` says whether ``func`` honours a lattice's bonds and bond weights (see
    :class:`Operation`'s ``topology``).
    """

    op: str
    backend: str
    func: Callable
    supports: Callable[..., str | None] | None = None
    cost: tuple[float, float] | None = None
    plugin: str = ""
    terms: Callable[..., dict] | None = None
    bonds: bool = False


@functools.lru_cache(maxsize=None)
def keywords_of(func) -> frozenset | None:
    """The names ``func`` takes as keyword arguments, or None when it takes any (it has
    ``**kwargs``, or no signature can be read). An operation that grows an option
    passes it only when the caller gives it, and the router refuses a call with it to
    an implementation that does not take it."""
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):
        return None
    params = sig.parameters.values()
    if any(p.kind == p.VAR_KEYWORD for p in params):
        return None
    return frozenset(p.name for p in params
                     if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))


class Registry:
    """Backends, operations and implementations, with the plugin that added each."""

    def __init__(self):
        self.backends: dict[str, Backend] = {}
        self.operations: dict[str, Operation] = {}
        self.implementations: dict[str, dict[str, Implementation]] = {}
        self._current_plugin = ""
        #: bumped on every change, so caches built from the registry know they are stale
        self.version = 0

    # -- adding ------------------------------------------------------------------------
    def add_backend(self, name: str, *, available=None, device: str = "cpu",
                    description: str = "", fatal_error=None, synchronize=None, cleanup=None,
                    release=None, monitored: bool = False):
        """Add a backend.

        Parameters
        ----------
        name : str
            Letters, digits, ``_``, ``.`` and ``-``, starting with a letter or ``_``.
        available : bool, (bool, str) or callable returning (bool, str), optional
            Whether the backend can run here, and why not; a callable is asked once
            (``refresh()`` asks again). Default: always available.
        device : str, default "cpu"
            ``"cpu"`` for host backends; anything else is a device, whose calls the
            engine retries once and then falls back to a CPU backend when they fail.
        description : str, optional
        fatal_error : callable(BaseException) -> str or None, optional
            For a device backend: why a failure leaves the device unusable for the rest
            of the process (a sticky CUDA error), or None when a retry may succeed. A
            fatal failure disables the backend at once.
        synchronize : callable() -> None, optional
            Waits for the device after each call, so the time recorded is device time
            and an asynchronous failure surfaces inside the failure handling.
        cleanup : callable() -> None, optional
            Frees the backend's caches after a failed call, before the retry.
        release : callable(lattice), optional
            Frees what the backend holds for one lattice (its
            ``lattice.backend_cache(name)``); ``lattice.cleanup()`` calls it.
        monitored : bool, default False
            Whether the device-memory monitor reads the device after each call (and
            cleans up at the threshold).

        Raises
        ------
        PluginError
            The name is taken.
        TypeError
            A lifecycle argument is not callable, or ``monitored`` is not a bool.
        """
        _check_name(name, "backend")
        if name in self.backends:
            raise PluginError(
                f"backend {name!r} is already registered by plugin "
                f"{self.backends[name].plugin!r}"
            )
        if available is None:
            probe = lambda: (True, "always available")  # noqa: E731
        elif callable(available):
            probe = available
        else:
            ok = available if isinstance(available, bool) else available[0]
            why = "" if isinstance(available, bool) else available[1]
            probe = lambda: (ok, why)  # noqa: E731
        for what, func in (("fatal_error", fatal_error), ("synchronize", synchronize),
                           ("cleanup", cleanup), ("release", release)):
            if func is not None and not callable(func):
                raise TypeError(f"{what} of backend {name!r} must be callable or None, "
                                f"got {func!r}")
        if not isinstance(monitored, bool):
            raise TypeError(f"monitored of backend {name!r} must be True or False, "
                            f"got {monitored!r}")
        self.backends[name] = Backend(name, probe, device, self._current_plugin, description,
                                      fatal_error, synchronize, cleanup, release, monitored)
        self.version += 1

    def add_operation(self, name: str, *, work, memory=None, validate=None, borrows=None, doc="",
                      topology=True):
        """Declare an operation (see :class:`Operation` for what each callable does).

        Parameters
        ----------
        name : str
            Letters, digits, ``_``, ``.`` and ``-``, starting with a letter or ``_``.
        work : callable(*args, **kwargs) -> float
            Work units of a call, for the cost model.
        memory : callable(*args, **kwargs) -> int, optional
            Host bytes a call allocates, checked against free memory before it runs.
        validate : callable(*args, **kwargs) -> (args, kwargs), optional
            Checks and normalises a call's arguments before routing.
        borrows : callable(*args, **kwargs) -> ndarray or None, optional
            The auxiliary buffer a call borrows (verified bit-identical afterwards).
        doc : str, optional
            One line saying what the operation computes (kept as ``Operation.doc``).
        topology : bool, default True
            Whether the operation reads the lattice's neighbour graph (then, on a
            lattice with bonds, only implementations declared with ``bonds=True`` run
            it). False for operations on data alone (``xor_transform``, ``reduce``).

        Raises
        ------
        PluginError
            Any plugin already declared ``name``.
        TypeError
            ``work`` is not callable.
        ValueError
            ``name`` is not an identifier-like string.
        """
        _check_name(name, "operation")
        if name in self.operations:
            raise PluginError(
                f"operation {name!r} is already registered by plugin "
                f"{self.operations[name].plugin!r}; plugin {self._current_plugin!r} "
                "cannot register it again (choose another name)"
            )
        if not callable(work):
            raise TypeError(f"work for operation {name!r} must be callable, got {work!r}")
        self.operations[name] = Operation(
            name, work, memory, validate, borrows, doc, self._current_plugin, bool(topology)
        )
        self.implementations.setdefault(name, {})
        self.version += 1

    def add_implementation(self, op: str, backend: str, func, *, supports=None, cost=None,
                           terms=None, bonds=False):
        """Give ``backend``'s implementation of ``op``.

        The operation and the backend may be declared later (by this plugin or another);
        a call is routed to the implementation only once both exist.

        Parameters
        ----------
        op, backend : str
            Names of the operation and the backend.
        func : callable
            Takes the arguments ``op``'s ``validate`` returns and returns what the
            reference (numpy) implementation returns for them.
        supports : callable(*args, **kwargs) -> str or None, optional
            None when ``func`` can run the call, else the reason it cannot.
        cost : (float, float), optional
            Default ``(overhead_s, throughput)`` until calibration gives one: finite,
            ``overhead_s >= 0``, ``throughput > 0``.
        terms : callable(params, *args, **kwargs) -> dict, optional
            Costs the work count cannot see, ``{name: seconds}`` (see
            :class:`Implementation`).
        bonds : bool, default False
            True when ``func`` honours the lattice's bonds and bond weights. An
            implementation that does not is never given a lattice that has them (for an
            operation declared with ``topology=True``).

        Raises
        ------
        PluginError
            ``backend`` already has an implementation of ``op``.
        TypeError
            ``func`` or ``terms`` is not callable, or ``cost`` is not a pair of numbers.
        ValueError
            A name that is not identifier-like, or a ``cost`` out of range.
        """
        _check_name(op, "operation")
        _check_name(backend, "backend")
        if not callable(func):
            raise TypeError(f"implementation of {op!r} on {backend!r} must be callable")
        if terms is not None and not callable(terms):
            raise TypeError(f"terms of {op!r} on {backend!r} must be callable")
        impls = self.implementations.setdefault(op, {})
        if backend in impls:
            raise PluginError(
                f"operation {op!r} already has a {backend!r} implementation from plugin "
                f"{impls[backend].plugin!r}"
            )
        if cost is not None:
            cost = _check_cost(cost, op, backend)
        impls[backend] = Implementation(op, backend, func, supports, cost, self._current_plugin,
                                        terms, bool(bonds))
        self.version += 1

    # -- removing ------------------------------------------------------------------------
    def remove_plugin(self, plugin: str) -> None:
        """Forget everything ``plugin`` added."""
        self.backends = {k: v for k, v in self.backends.items() if v.plugin != plugin}
        self.operations = {k: v for k, v in self.operations.items() if v.plugin != plugin}
        for op in list(self.implementations):
            impls = {k: v for k, v in self.implementations[op].items() if v.plugin != plugin}
            if impls or op in self.operations:
                self.implementations[op] = impls
            else:
                del self.implementations[op]
        self.version += 1

    def refresh(self) -> None:
        """Ask every backend's availability probe again.

        A backend disabled by :meth:`disable_backend` stays disabled: the probe says
        whether the device is there, not whether calls on it succeed. Use
        :meth:`enable_backend` (or ``Engine.reset_backend``) to put it back.
        """
        for b in self.backends.values():
            b._status = None
        self.version += 1

    def disable_backend(self, name: str, reason: str) -> None:
        """Take backend ``name`` out of service: ``status()`` is ``(False, reason)`` and
        the router rejects it with that reason until :meth:`enable_backend`."""
        self.backend(name).disabled = str(reason)
        self.version += 1

    def enable_backend(self, name: str) -> None:
        """Undo :meth:`disable_backend` and ask the backend's probe again."""
        b = self.backend(name)
        b.disabled = None
        b._status = None
        self.version += 1

    # -- lookup --------------------------------------------------------------------------
    def operation(self, name: str) -> Operation:
        try:
            return self.operations[name]
        except KeyError:
            close = [n for n in self.operations if name.lower() in n.lower()]
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(
                f"unknown operation {name!r}{hint} (registered: {', '.join(sorted(self.operations))})"
            ) from None

    def backend(self, name: str) -> Backend:
        try:
            return self.backends[name]
        except KeyError:
            raise ValueError(
                f"unknown backend {name!r}; registered: {', '.join(sorted(self.backends))}"
            ) from None


def _check_name(name, kind):
    # fullmatch: with match and "$", a name ending in a newline would pass
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"{kind} name must be an identifier-like string, got {name!r}")


def _check_cost(cost, op, backend) -> tuple[float, float]:
    """``cost`` as ``(overhead_s, throughput)`` floats: finite, ``>= 0`` and ``> 0``."""
    if (not isinstance(cost, (tuple, list)) or len(cost) != 2
            or any(isinstance(c, bool) or not isinstance(c, numbers.Real) for c in cost)):
        raise TypeError(f"cost of {op!r} on {backend!r} must be a pair of numbers "
                        f"(overhead_s, throughput), got {cost!r}")
    overhead, throughput = float(cost[0]), float(cost[1])
    if not (math.isfinite(overhead) and overhead >= 0
            and math.isfinite(throughput) and throughput > 0):
        raise ValueError(f"cost of {op!r} on {backend!r} must be (overhead >= 0, "
                         f"throughput > 0), both finite, got {cost!r}")
    return overhead, throughput

"""The engine: plugin manager + registry + router + policy around every call.

``Engine.run(op, *args, backend=None, **kwargs)`` is the one road every operation takes:

1. validate and normalise the arguments (the operation's ``validate``), before any work;
2. check host memory for what the call will allocate (``InsufficientMemoryError``);
3. ask the router which backend runs it (and why);
4. if the call borrows auxiliary memory, hold that buffer for this thread (other
   threads wait) and take its digest;
5. run, timing it; a failure on a non-CPU backend is retried once and then falls back
   to the best CPU backend, with the reason recorded (unless fallback is off); after
   ``BACKEND_FAILURE_LIMIT`` such calls in a row the backend is disabled for the
   process (``Engine.reset_backend`` re-enables it);
6. verify the borrowed memory came back bit-identical, also when the call raised;
7. record the measured time next to the router's prediction.
"""

from __future__ import annotations

import importlib
import os
import threading
import time
import warnings
import zlib
from importlib import metadata

import numpy as np
import pluggy

from catalytic import hookspecs
from catalytic.catalysis import lend
from catalytic.config import Settings, load_settings
from catalytic.errors import CatalyticViolation, ConvergenceError, PluginError
from catalytic.memory import check_host_memory
from catalytic.profiler import active as profiler_active
from catalytic.registry import Registry
from catalytic.router import Decision, Router, gpu_input, preference_order

#: plugins written for 0.1 took the marker from here; it lives in the plugin API now
hookimpl = hookspecs.hookimpl

#: the built-in plugins, registered in this order at start-up: (plugin name, module,
#: optional). A required one that fails to load raises; an optional one (a device that
#: may be absent) is reported in ``plugin_errors`` with a RuntimeWarning.
BUILTIN_PLUGINS = (
    ("catalytic", "catalytic.catalogue", False),  # the operations themselves
    ("numpy", "catalytic.backends.numpy_backend", False),
    ("numba-cpu", "catalytic.backends.numba_cpu", False),
    ("cuda", "catalytic.backends.cuda_backend", True),
)

#: errors that are the call's answer, not a fault of the backend: raised as they are, never
#: retried or sent to another backend (a solve that stopped at the caller's iteration
#: limit says so, whichever backend ran it)
_USER_ERRORS = (ValueError, TypeError, IndexError, KeyError, MemoryError, ConvergenceError)
#: consecutive calls that fail twice (call + retry) with the same exception type before
#: the engine disables a non-CPU backend for the process (see ``Engine._recover``)
BACKEND_FAILURE_LIMIT = 3
#: how many recent fallbacks ``Engine.fallbacks`` keeps (``fallback_count`` counts all)
FALLBACK_RECORD_MAX = 100
_REGISTRATION_HOOKS = ("catalytic_add_backends", "catalytic_add_operations")


#: buffers up to this size are compared byte for byte (a copy is cheaper than a CRC)
_SNAPSHOT_MAX_BYTES = 64 * 1024


def buffer_digest(buf):
    """A digest of a buffer's raw bytes (any contiguous array or memmap): the bytes
    themselves up to 64 KiB, else ``(nbytes, crc32)``. Equal digests = same contents
    (exactly below 64 KiB; up to CRC-32 collisions above)."""
    if not buf.flags.c_contiguous:
        raise ValueError("auxiliary memory must be a C-contiguous array")
    if buf.nbytes <= _SNAPSHOT_MAX_BYTES:
        return buf.tobytes()
    return buf.nbytes, zlib.crc32(buf.reshape(-1).view(np.uint8))


class Engine:
    """Plugin manager, registry, router and call policy.

    Most code uses the process-wide engine (:func:`get_engine`); an engine of one's own
    (a lattice's ``engine=``) keeps plugins and settings apart from it.

    Parameters
    ----------
    settings : Settings, optional
        Complete settings (``overrides`` are then ignored); default: read from the
        ``CATALYTIC_*`` environment (:mod:`catalytic.config`).
    **overrides
        Setting names (``backend``, ``fallback``, ``memory_threshold``,
        ``disable_plugin_autoload``, ``calibration_path``) overriding the environment.

    Raises
    ------
    ValueError
        A bad ``CATALYTIC_*`` value or override.
    CalibrationError
        The calibration file named by ``CATALYTIC_CALIBRATION`` (or
        ``calibration_path=``) is not valid.

    Notes
    -----
    The built-in plugins (:data:`BUILTIN_PLUGINS`) are registered first, then the
    entry points of the ``catalytic`` group unless ``disable_plugin_autoload``; an
    entry point that fails to load is kept in ``plugin_errors`` with a
    ``RuntimeWarning``. A ``backend`` setting that names no registered backend is a
    ``RuntimeWarning`` too (calls then raise).

    Examples
    --------
    >>> import catalytic as cat
    >>> eng = cat.Engine(disable_plugin_autoload=True, backend="numpy")
    >>> cat.Lattice(shape=(4, 4), engine=eng).connected_components().count
    1
    >>> eng.last_decision.backend
    'numpy'
    """

    def __init__(self, settings: Settings | None = None, **overrides):
        self.settings = settings if settings is not None else load_settings(**overrides)
        self.pm = pluggy.PluginManager("catalytic")
        self.pm.add_hookspecs(hookspecs)
        self.registry = Registry()
        self.router = Router(self.registry, self.settings)
        self.plugin_errors: dict[str, str] = {}
        #: the last FALLBACK_RECORD_MAX fallbacks, oldest first ({op, from, to, reason})
        self.fallbacks: list[dict] = []
        #: every fallback of this engine, also those no longer in ``fallbacks``
        self.fallback_count = 0
        # backend -> (exception type, consecutive calls that failed twice with it)
        self._failures: dict[str, tuple[type, int]] = {}
        self._failures_lock = threading.Lock()
        self._local = threading.local()
        self._register_builtins()
        if not self.settings.disable_plugin_autoload:
            self._load_entrypoints()
        from catalytic.memory import get_monitor

        get_monitor().add_listener(self._memory_pressure)
        problem = self.backend_setting_problem()
        if problem is not None:
            warnings.warn(problem, RuntimeWarning, stacklevel=2)

    # -- plugins ------------------------------------------------------------------------
    def _register_builtins(self):
        for name, module, optional in BUILTIN_PLUGINS:
            try:
                self.register_plugin(importlib.import_module(module), name)
            except Exception as err:  # an optional one is reported, never silently skipped
                if not optional:
                    raise
                msg = f"built-in plugin {name!r} failed to load: {type(err).__name__}: {err}"
                self.plugin_errors[name] = msg
                warnings.warn(msg, RuntimeWarning, stacklevel=3)

    def _load_entrypoints(self):
        for ep in metadata.entry_points(group="catalytic"):
            if self.pm.get_plugin(ep.name) is not None or self.pm.is_blocked(ep.name):
                continue
            try:
                plugin = ep.load()
                self.register_plugin(plugin, ep.name)
            except Exception as err:  # a broken plugin must not take the engine down
                msg = f"plugin {ep.name!r} ({ep.value}) failed to load: {type(err).__name__}: {err}"
                self.plugin_errors[ep.name] = msg
                warnings.warn(msg, RuntimeWarning, stacklevel=2)

    def register_plugin(self, plugin, name: str | None = None) -> str:
        """Register a plugin and run its registration hooks.

        All or nothing: if a hook raises, everything the plugin added is removed and a
        :class:`PluginError` naming the plugin and the hook is raised.

        Parameters
        ----------
        plugin : object or module
            Holds functions marked ``@catalytic.hookimpl``.
        name : str, optional
            Default: pluggy's canonical name of ``plugin``.

        Returns
        -------
        str
            The name it was registered under (for :meth:`unregister_plugin`).

        Raises
        ------
        PluginError
            The name is taken (or blocked), the object is already registered under
            another name, a hook implementation does not match its specification, or a
            registration hook raised.
        """
        wanted = name if name is not None else self.pm.get_canonical_name(plugin)
        if self.pm.is_blocked(wanted):
            raise PluginError(f"plugin name {wanted!r} is blocked")
        holder = self.pm.get_plugin(wanted)
        if holder is not None:
            raise PluginError(
                f"plugin name {wanted!r} is already registered (by {holder!r}); "
                "register under another name, or unregister_plugin() it first"
            )
        taken = self.pm.get_name(plugin)
        if taken is not None:
            raise PluginError(f"plugin {plugin!r} is already registered as {taken!r}")
        try:
            name = self.pm.register(plugin, wanted)
        except (ValueError, pluggy.PluginValidationError) as err:
            raise PluginError(f"plugin {wanted!r} cannot be registered: {err}") from err
        if name is None:
            raise PluginError(f"plugin {plugin!r} is blocked or already registered")
        for hook_name in _REGISTRATION_HOOKS:
            caller = getattr(self.pm.hook, hook_name)
            for impl in caller.get_hookimpls():
                if impl.plugin is not plugin:
                    continue
                self.registry._current_plugin = name
                try:
                    impl.function(registry=self.registry)
                except Exception as err:
                    self.registry.remove_plugin(name)
                    self.pm.unregister(plugin)
                    if isinstance(err, PluginError):
                        raise PluginError(f"plugin {name!r}, hook {hook_name}: {err}") from err
                    raise PluginError(
                        f"plugin {name!r} failed in hook {hook_name}: {type(err).__name__}: {err}"
                    ) from err
                finally:
                    self.registry._current_plugin = ""
        return name

    def unregister_plugin(self, name: str) -> None:
        """Remove a plugin and everything it added (backends, operations,
        implementations).

        Raises
        ------
        ValueError
            No plugin has that name (the message lists the registered ones).
        """
        plugin = self.pm.get_plugin(name)
        if plugin is None:
            raise ValueError(f"no plugin named {name!r}; registered: {self.plugin_names()}")
        self.registry.remove_plugin(name)
        self.pm.unregister(plugin)

    def plugin_names(self) -> list[str]:
        """Names of the registered plugins, sorted."""
        return sorted(n for n, _ in self.pm.list_name_plugin())

    # -- calls --------------------------------------------------------------------------
    def _prepare(self, op, args, kwargs):
        spec = self.registry.operation(op)
        if spec.validate is not None:
            args, kwargs = spec.validate(*args, **kwargs)
        return spec, args, kwargs

    def explain(self, op: str, *args, backend: str | None = None, **kwargs) -> Decision:
        """The router's decision for ``op(*args, **kwargs)``, without running it.

        The arguments are validated as :meth:`run` validates them (the same validation
        errors); see :meth:`catalytic.router.Router.explain`.

        Returns
        -------
        Decision
            The backend, the reason, every backend's prediction or why it cannot run.
        """
        return self.router.explain(op, *args, backend=backend, **kwargs)

    @property
    def last_decision(self) -> Decision | None:
        """The decision of the last call made from this thread."""
        return getattr(self._local, "decision", None)

    def run(self, op: str, *args, backend: str | None = None, **kwargs):
        """Run a registered operation on the backend the router picks (or ``backend``).

        Parameters
        ----------
        op : str
            A registered operation (:meth:`operations`).
        *args, **kwargs
            The operation's arguments (a lattice operation takes the lattice first).
        backend : str, optional
            Run on this backend (else ``CATALYTIC_BACKEND``, else the router's choice).

        Returns
        -------
        object
            What the operation returns; the same on every backend.

        Raises
        ------
        ValueError
            An unknown operation or backend name; and the operation's own validation
            errors (``ValueError``, ``TypeError``, ``IndexError``), before any work.
        InsufficientMemoryError
            The host memory the call allocates (by its memory model) is not available,
            or memory is why no backend can run it.
        NoBackendError
            No backend can run the call; the message says why each cannot and how to
            fix it.
        PluginError
            A plugin's hook failed and no backend is left (or the forced backend's
            ``supports()`` raised).
        CatalyticViolation
            Borrowed auxiliary memory did not come back bit-identical.

        Notes
        -----
        A failure on a non-CPU backend is retried once, then the call falls back to the
        best CPU backend with the reason recorded (module docstring), unless fallback is
        off. The decision is kept in :attr:`last_decision` (per thread).
        """
        spec, args, kwargs = self._prepare(op, args, kwargs)
        on_gpu = gpu_input(args, kwargs)
        if spec.memory is not None and not on_gpu:
            # (GPU arguments: the call allocates on the device, checked by the backend)
            check_host_memory(f"operation {op!r}", int(spec.memory(*args, **kwargs)))
        decision = self.router.decide(op, args, kwargs, backend=backend, on_gpu=on_gpu)
        self._local.decision = decision
        prof = profiler_active()
        if prof is None:
            return self._run_decided(spec, decision, args, kwargs)
        tok = prof.begin_op(decision, self.registry.backends[decision.backend].device)
        try:
            result = self._run_decided(spec, decision, args, kwargs)
        except BaseException as err:
            prof.end_op(tok, self._local.decision, err)
            raise
        prof.end_op(tok, self._local.decision)
        return result

    def _run_decided(self, spec, decision, args, kwargs):
        """:meth:`run` after routing: the call, with the borrowed-buffer check."""
        op = spec.name
        borrowed = spec.borrows(*args, **kwargs) if spec.borrows is not None else None
        if borrowed is None:
            return self._call(spec, decision, args, kwargs)
        # the buffer is this thread's from the first digest to the last (catalysis.lend)
        with lend(borrowed):
            before = buffer_digest(borrowed)
            try:
                result = self._call(spec, decision, args, kwargs)
            except BaseException as err:
                if buffer_digest(borrowed) != before:
                    raise CatalyticViolation(
                        f"operation {op!r} on {decision.backend!r} raised and did not "
                        "restore its auxiliary memory"
                    ) from err
                raise
            if buffer_digest(borrowed) != before:
                raise CatalyticViolation(
                    f"operation {op!r} on {decision.backend!r} did not restore its "
                    "auxiliary memory bit-identically"
                )
        return result

    def _call(self, spec, decision, args, kwargs):
        impls = self.registry.implementations[spec.name]
        backend = self.registry.backends[decision.backend]
        impl = impls[decision.backend]
        t0 = time.perf_counter()
        try:
            result = impl.func(*args, **kwargs)
            if backend.device != "cpu":
                self._device_done(backend, spec.name)
        except _USER_ERRORS:
            raise
        except Exception as err:
            if backend.device == "cpu":
                raise
            return self._recover(spec, decision, args, kwargs, err)
        self.router.record(decision, decision.backend, time.perf_counter() - t0)
        if backend.device != "cpu":
            self._monitor(backend, spec.name)
        if self._failures:
            self._failure_streak(decision.backend, None)
        return result

    def _recover(self, spec, decision, args, kwargs, err):
        """A non-CPU backend failed: clean up, retry once, then fall back to the CPU.

        A call whose retry fails too counts against the backend: after
        ``BACKEND_FAILURE_LIMIT`` such calls in a row with the same exception type, the
        backend is disabled for the process (:meth:`reset_backend` re-enables it) and
        the router sends later calls elsewhere, with the reason in ``explain()``. A
        call that succeeds on the backend resets the count. With fallback off, nothing
        is counted or disabled: every failure raises.
        """
        impls = self.registry.implementations[spec.name]
        backend = self.registry.backends[decision.backend]
        self._cleanup_backend(backend.name)
        fatal = self._fatal_reason(backend.name, err)
        if fatal is not None:
            # the device cannot run anything more in this process: no retry
            self.registry.disable_backend(backend.name, fatal)
            warnings.warn(f"backend {backend.name!r} {fatal}", RuntimeWarning, stacklevel=4)
            if not self.settings.fallback:
                raise err
            return self._fall_back(spec, decision, args, kwargs, err, err, True, "failed")
        t0 = time.perf_counter()
        try:
            result = impls[decision.backend].func(*args, **kwargs)
            self._device_done(backend, spec.name)
        except Exception as err2:
            self._cleanup_backend(backend.name)
            if not self.settings.fallback:
                raise err2 from err
            disabled = self._failure_streak(backend.name, err2)
            return self._fall_back(spec, decision, args, kwargs, err, err2, disabled,
                                   "failed twice")
        self.router.record(decision, decision.backend, time.perf_counter() - t0)
        self._monitor(backend, spec.name)
        self._failure_streak(backend.name, None)
        return result

    def _fall_back(self, spec, decision, args, kwargs, err, err2, disabled, how):
        """Run the call on the best CPU backend that can, recording why."""
        impls = self.registry.implementations[spec.name]
        cpu = {
            n: i for n, i in impls.items()
            if self.registry.backends.get(n) is not None
            and self.registry.backends[n].device == "cpu"
            and self.router.can_run(n, args, kwargs, spec.name)
        }
        if not cpu:
            if err2 is err:
                raise err
            raise err2 from err
        order = preference_order(cpu)
        if decision.work != decision.work:  # NaN: work() raised, nothing to predict
            target = order[0]
        else:
            target = min(order, key=lambda b: self.router.predict(spec.name, b, decision.work))
        why = f"{decision.backend} {how} ({type(err2).__name__}: {err2}); fell back to {target}"
        if disabled:
            why += f"; {decision.backend} is now disabled for this process"
        self._record_fallback(
            {"op": spec.name, "from": decision.backend, "to": target, "reason": why}
        )
        fallback = Decision(
            spec.name, target, why, decision.predictions, decision.rejected,
            decision.sources, decision.work, decision.forced, decision.terms,
        )
        self._local.decision = fallback
        t0 = time.perf_counter()
        result = cpu[target].func(*args, **kwargs)
        self.router.record(fallback, target, time.perf_counter() - t0, decision.backend)
        return result

    def _memory_pressure(self, level: str, snapshot) -> None:
        """The monitor saw the pressure level change: tell the plugins, each on its own
        (pluggy's order, last registered first), so that one that raises is reported by
        name as a ``RuntimeWarning`` and the others still hear of it."""
        given = {"level": level, "snapshot": snapshot}
        for impl in reversed(self.pm.hook.catalytic_memory_pressure.get_hookimpls()):
            if impl.wrapper or impl.hookwrapper:  # nothing to wrap: each call is its own
                warnings.warn(f"plugin {impl.plugin_name!r}: a wrapper on hook "
                              "catalytic_memory_pressure is not run (each implementation "
                              "is called on its own)", RuntimeWarning)
                continue
            try:
                impl.function(*(given[name] for name in impl.argnames))
            except Exception as err:
                warnings.warn(f"plugin {impl.plugin_name!r} failed in hook "
                              f"catalytic_memory_pressure: {type(err).__name__}: {err}",
                              RuntimeWarning)

    def _fatal_reason(self, name: str, err: BaseException) -> str | None:
        """Why ``err`` leaves backend ``name`` unusable for the rest of the process (a
        sticky CUDA error poisons the context), asked of the ``fatal_error(err)`` the
        backend declared; None when a retry may succeed."""
        backend = self.registry.backends.get(name)
        judge = backend.fatal_error if backend is not None else None
        if judge is None:
            return None
        try:
            why = judge(err)
        except Exception:  # a broken judge must not hide the original failure
            return None
        return None if why is None else f"disabled for this process: {why}"

    def _device_done(self, backend, op: str) -> None:
        """After a call on a non-CPU backend: wait for the device to finish, so the time
        recorded is device time and not launch time (the ``synchronize()`` the backend
        declared; an asynchronous launch failure surfaces here, inside the failure
        handling)."""
        if backend.synchronize is not None:
            backend.synchronize()

    def _monitor(self, backend, op: str) -> None:
        """Let the device-memory monitor read the device after a call on a backend
        declared ``monitored``, and clean up when usage reached the threshold."""
        if backend.monitored:
            from catalytic.memory import get_monitor

            get_monitor().check(op, threshold=self.settings.memory_threshold)

    def _record_fallback(self, entry: dict) -> None:
        with self._failures_lock:
            self.fallback_count += 1
            self.fallbacks.append(entry)
            if len(self.fallbacks) > FALLBACK_RECORD_MAX:
                del self.fallbacks[: len(self.fallbacks) - FALLBACK_RECORD_MAX]

    def _failure_streak(self, name: str, err: BaseException | None) -> bool:
        """Count a call on non-CPU backend ``name`` that failed twice with ``err``, or
        reset the count (``err`` None: the call succeeded). Returns True when this
        failure disables the backend."""
        with self._failures_lock:
            if err is None:
                self._failures.pop(name, None)
                return False
            kind, count = self._failures.get(name, (None, 0))
            count = count + 1 if kind is type(err) else 1
            self._failures[name] = (type(err), count)
            backend = self.registry.backends.get(name)
            if count < BACKEND_FAILURE_LIMIT or backend is None or backend.disabled:
                return False  # (disabled already: by a call that ran alongside this one)
            reason = (
                f"disabled for this process after {count} calls in a row failed twice each "
                f"with {type(err).__name__} (last: {err}); engine.reset_backend({name!r}) "
                "re-enables it"
            )
            self.registry.disable_backend(name, reason)
        warnings.warn(f"backend {name!r} {reason}", RuntimeWarning, stacklevel=5)
        return True

    def reset_backend(self, name: str) -> None:
        """Re-enable a backend the engine disabled after repeated failures.

        The failure count starts again from zero and the backend's availability probe
        is asked again. ``Registry.refresh()`` does not re-enable a disabled backend:
        the probe says whether the device is there, not whether calls on it succeed.

        Raises
        ------
        ValueError
            No backend has that name (the message lists the registered ones).
        """
        with self._failures_lock:
            self.registry.enable_backend(name)
            self._failures.pop(name, None)

    def backend_setting_problem(self) -> str | None:
        """What is wrong with the forced-backend setting (``CATALYTIC_BACKEND`` or
        ``backend=``), or None: it must name a registered backend."""
        name = self.settings.backend
        if name is None or name in self.registry.backends:
            return None
        env = os.environ.get("CATALYTIC_BACKEND", "").strip()
        via = f"CATALYTIC_BACKEND={name!r}" if env == name else f"backend setting {name!r}"
        return (
            f"{via} names no registered backend; registered: "
            f"{', '.join(sorted(self.registry.backends))} (calls will raise ValueError "
            "unless a plugin registered later adds it)"
        )

    def _cleanup_backend(self, name: str) -> None:
        backend = self.registry.backends.get(name)
        if backend is not None and backend.cleanup is not None:
            try:
                backend.cleanup()
            except Exception as err:  # cleanup must never hide the original failure
                warnings.warn(f"cleanup of backend {name!r} failed: {err}", RuntimeWarning)

    def release_lattice(self, lattice) -> None:
        """Run every backend's declared ``release(lattice)``: what each holds for that
        lattice (device copies) is freed and its accounting told (``lattice.cleanup()``)."""
        for backend in list(self.registry.backends.values()):
            if backend.release is not None:
                backend.release(lattice)

    # -- introspection -------------------------------------------------------------------
    def backends(self) -> dict[str, tuple[bool, str]]:
        """Every registered backend and its ``(available, reason)``."""
        return {n: b.status() for n, b in self.registry.backends.items()}

    def operations(self) -> list[str]:
        """Names of the registered operations, sorted."""
        return sorted(self.registry.operations)


_engine: Engine | None = None
_engine_lock = threading.Lock()


def get_engine() -> Engine:
    """The process-wide engine, created on first use from the ``CATALYTIC_*``
    environment (thread-safe); see :class:`Engine` for what building it may raise."""
    global _engine
    if _engine is None:
        with _engine_lock:
            if _engine is None:
                _engine = Engine()
    return _engine


def reset_engine(**overrides) -> Engine:
    """Replace the process-wide engine with a new one (settings from the environment
    and ``overrides``, as :class:`Engine` takes them) and return it. Lattices made
    without ``engine=`` use the new one from their next call."""
    global _engine
    with _engine_lock:
        _engine = Engine(**overrides)
    return _engine

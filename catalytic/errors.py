"""Exceptions raised by catalytic."""

from __future__ import annotations


class CatalyticError(Exception):
    """Base class for catalytic-specific errors."""


class InsufficientMemoryError(MemoryError, CatalyticError):
    """A lattice or operation would not fit in memory; raised before allocating.

    Attributes
    ----------
    needed, available : int
        Bytes the work needs and bytes available when it was checked.
    """

    def __init__(self, what: str, needed: int, available: int):
        self.needed = int(needed)
        self.available = int(available)
        super().__init__(
            f"{what} needs {_fmt(needed)} ({needed} bytes) but only {_fmt(available)} "
            f"({available} bytes) are available"
        )


class MemoryShortfall(str):
    """A backend's "cannot run" reason that is about memory; carries the byte counts so
    the router can raise :class:`InsufficientMemoryError` when memory is why nothing runs."""

    def __new__(cls, what: str, needed: int, available: int):
        text = (f"{what} needs {_fmt(needed)} ({int(needed)} bytes), only {_fmt(available)} "
                f"({int(available)} bytes) available")
        obj = super().__new__(cls, text)
        obj.what, obj.needed, obj.available = what, int(needed), int(available)
        return obj


class HookFailure(str):
    """A backend's "cannot run" reason saying that a plugin's ``supports()`` or
    ``work()`` raised; names the plugin and the hook, and keeps the exception so the
    router can raise :class:`PluginError` from it when no backend can run the call."""

    def __new__(cls, plugin: str, hook: str, error: BaseException, where: str = ""):
        at = f" ({where})" if where else ""
        text = f"plugin {plugin!r} failed in hook {hook}{at}: {type(error).__name__}: {error}"
        obj = super().__new__(cls, text)
        obj.plugin, obj.hook, obj.error = plugin, hook, error
        return obj


class CatalyticViolation(CatalyticError):
    """Auxiliary memory lent to an operation did not come back bit-identical."""


class PluginError(CatalyticError):
    """A plugin failed while registering or running; the message names plugin and hook."""


class NoBackendError(CatalyticError, RuntimeError):
    """No registered backend can run an operation; the message says how to fix it."""


class ConvergenceError(CatalyticError, RuntimeError):
    """An iterative solve stopped at its iteration limit (or a direct one lost its
    accuracy to rounding) with the residual above the tolerance asked for. No field is
    returned; ``residual`` (relative, ``|b - A x| / |b|``), ``iterations`` and ``tol``
    say how far it got."""

    def __init__(self, residual: float, iterations: int, tol: float):
        self.residual = float(residual)
        self.iterations = int(iterations)
        self.tol = float(tol)
        how = (f"after {self.iterations} iterations" if self.iterations
               else "in a direct solve")
        super().__init__(
            f"the solve reached a relative residual of {self.residual:.3g} {how}, above "
            f"the tolerance {self.tol:.3g}: raise maxiter or tol")

    def __reduce__(self):
        # rebuilt from its figures, not its message (a batch's worker process sends it)
        return type(self), (self.residual, self.iterations, self.tol)


class CalibrationError(CatalyticError, ValueError):
    """A calibration file is not valid JSON or does not follow the schema.

    Raised when the file is read (the engine is built), never later. The message names
    the file and, for schema errors, the key path (``entries.<op>.<backend>.<key>``);
    for JSON errors, the line and column.

    Attributes
    ----------
    path : str
        The file.
    key : str or None
        Dotted key path of the offending value; None for a JSON syntax error.
    """

    def __init__(self, path, problem: str, key: str | None = None):
        self.path = str(path)
        self.key = key
        where = f": {key}" if key else ""
        super().__init__(f"calibration file {self.path!r}{where}: {problem}")


def _fmt(n: float) -> str:
    try:
        n = float(n)
    except OverflowError:  # an integer past the float range: only bytes can show it
        return f"{n} B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n} B"

"""Settings from keyword arguments and ``CATALYTIC_*`` environment variables.

Keyword arguments win over the environment; the environment wins over defaults.
One rule for every variable: surrounding whitespace is stripped, and a variable that
is empty (or only whitespace) counts as unset, i.e. takes the default.

=====================================  ==============================================  ========
variable                               meaning                                         default
=====================================  ==============================================  ========
``CATALYTIC_BACKEND``                  force one backend for every operation; must     unset
                                       name a registered backend (``catalytic info``
                                       lists them; ``Engine.run`` raises
                                       ``ValueError`` otherwise)
``CATALYTIC_FALLBACK``                 ``0`` turns the CPU fallback off (a GPU         ``1``
                                       failure then raises, and the engine never
                                       disables a failing backend)
``CATALYTIC_MEMORY_THRESHOLD``         device-memory cleanup threshold in (0, 1]       ``0.85``
``CATALYTIC_DISABLE_PLUGIN_AUTOLOAD``  ``1`` skips entry-point plugins                 ``0``
``CATALYTIC_CALIBRATION``              path of a calibration JSON to use (a bad file   shipped
                                       is a ``CalibrationError``)
=====================================  ==============================================  ========

Booleans take ``1/0``, ``true/false``, ``yes/no``, ``on/off`` (any case); anything
else is a ``ValueError`` naming the variable and its value, and so is a memory threshold
that is not a number in (0, 1]. A bad variable is an error even when a keyword argument
overrides it.
"""

from __future__ import annotations

import math
import numbers
import os
from dataclasses import dataclass, field, fields, replace

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _env(name: str) -> str | None:
    """``os.environ[name]`` with surrounding whitespace stripped; None when unset or
    empty (the rule for every ``CATALYTIC_*`` variable)."""
    value = os.environ.get(name, "").strip()
    return value or None


def check_fraction(value, what: str) -> float:
    """``value`` as a float in (0, 1]; ``what`` names it in the error.

    Raises
    ------
    TypeError
        ``value`` is not a real number (a bool, a string, None).
    ValueError
        ``value`` is NaN, infinite, or outside (0, 1].

    Examples
    --------
    >>> check_fraction(0.5, "margin")
    0.5
    >>> check_fraction(1.5, "threshold")
    Traceback (most recent call last):
    ...
    ValueError: threshold must be a fraction in (0, 1], got 1.5
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{what} must be a number in (0, 1], got {value!r}")
    v = float(value)
    if not (math.isfinite(v) and 0.0 < v <= 1.0):
        raise ValueError(f"{what} must be a fraction in (0, 1], got {value!r}")
    return v


def _env_bool(name: str, default: bool) -> bool:
    value = _env(name)
    if value is None:
        return default
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise ValueError(
        f"{name}={os.environ[name]!r} is not a boolean (use 1/0, true/false, yes/no, on/off)"
    )


@dataclass(frozen=True)
class Settings:
    """Engine settings. Build with :func:`load_settings`.

    Examples
    --------
    >>> from catalytic.config import load_settings
    >>> load_settings(fallback=False).fallback
    False
    """

    backend: str | None = None
    fallback: bool = True
    memory_threshold: float = 0.85
    disable_plugin_autoload: bool = False
    calibration_path: str | None = None
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        check_fraction(self.memory_threshold, "memory_threshold")


def load_settings(**overrides) -> Settings:
    """Settings from the environment, then ``overrides`` (keyword arguments win)."""
    env = {
        "backend": _env("CATALYTIC_BACKEND"),
        "fallback": _env_bool("CATALYTIC_FALLBACK", True),
        "disable_plugin_autoload": _env_bool("CATALYTIC_DISABLE_PLUGIN_AUTOLOAD", False),
        "calibration_path": _env("CATALYTIC_CALIBRATION"),
    }
    raw = _env("CATALYTIC_MEMORY_THRESHOLD")
    if raw is not None:
        shown = f"CATALYTIC_MEMORY_THRESHOLD={os.environ['CATALYTIC_MEMORY_THRESHOLD']!r}"
        try:
            env["memory_threshold"] = float(raw)
        except ValueError as err:
            raise ValueError(f"{shown} is not a number") from err
        if not 0.0 < env["memory_threshold"] <= 1.0:  # NaN fails too
            raise ValueError(
                f"{shown} is not in (0, 1] (the used fraction of device memory at which "
                "the monitor cleans up)"
            )
    known = {f.name for f in fields(Settings)}
    unknown = set(overrides) - known
    if unknown:
        raise TypeError(f"unknown setting(s): {sorted(unknown)}; known: {sorted(known)}")
    settings = Settings(**env)
    return replace(settings, **{k: v for k, v in overrides.items()})

"""A stand-in for Hypothesis, for ``benchmarks/gpu_proof.sh`` on a machine without it.

The proof puts this folder on ``PYTHONPATH`` only where ``import hypothesis`` fails, and
installs nothing. Test modules that import Hypothesis then still import: each property
test (``@given``) is collected and skipped with :data:`REASON`, so every other test in
the same file runs. Nothing here generates data; strategies are inert placeholders.
"""

from __future__ import annotations

import inspect

import pytest

#: the skip reason of every ``@given`` test; the proof's summary counts these
REASON = "Hypothesis is not installed here: property test not run (gpu_proof stand-in)"


class _Inert:
    """What a strategy expression or a settings constant builds at import time: any
    call, attribute or ``|`` gives another placeholder."""

    def __call__(self, *args, **kwargs):
        return self

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return self

    def __or__(self, other):
        return self

    __ror__ = __or__


def given(*args, **kwargs):
    """Replace the test by one that is skipped with :data:`REASON`; its signature
    loses the parameters ``@given`` fills, so fixtures and ``parametrize`` still match."""

    def decorate(test):
        sig = inspect.signature(test)
        params = [p for name, p in sig.parameters.items() if name not in kwargs]
        if args:  # positional strategies fill the rightmost parameters, as in Hypothesis
            params = params[:len(params) - len(args)]

        def skipped(*a, **k):
            pytest.skip(REASON)

        for attr in ("__name__", "__qualname__", "__module__", "__doc__"):
            setattr(skipped, attr, getattr(test, attr))
        skipped.__signature__ = sig.replace(parameters=params)
        skipped.pytestmark = list(getattr(test, "pytestmark", [])) + [pytest.mark.skip(reason=REASON)]
        return skipped

    return decorate


class settings:  # noqa: N801 - Hypothesis's name
    """Accepts every setting and profile call; as a decorator it changes nothing."""

    _profiles: dict = {}

    def __init__(self, parent=None, **kwargs):
        pass

    def __call__(self, test):
        return test

    @classmethod
    def register_profile(cls, name, parent=None, **kwargs):
        cls._profiles[name] = cls()

    @classmethod
    def get_profile(cls, name):
        return cls._profiles.get(name, cls())

    @classmethod
    def load_profile(cls, name):
        pass


def _unchanged(*args, **kwargs):
    return lambda test: test


example = seed = reproduce_failure = _unchanged


def assume(condition):
    return True


def note(value):
    pass


def event(value, payload=""):
    pass


def __getattr__(name):  # HealthCheck, Phase, Verbosity, ...
    if name.startswith("__") or name in ("strategies", "extra"):
        raise AttributeError(name)  # a submodule: imported, never a placeholder
    return _Inert()

"""Shared fixtures: the ``backend`` parametrisation, the hypothesis profiles, and (from
``tests.support.cuda_passes``) the CUDA tests' markers and simulator launch recorder.

The oracles, strategies and the backend list live in ``tests/support`` (``from
tests.support.oracles import ...``).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

import catalytic as cat
import catalytic.engine as engine_mod
from tests.support.backends import available_backends

pytest_plugins = ("tests.support.cuda_passes",)

settings.register_profile(
    "catalytic",
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.register_profile(
    "catalytic-thorough",
    parent=settings.get_profile("catalytic"),
    max_examples=300,
)
settings.load_profile(os.environ.get("CATALYTIC_HYPOTHESIS_PROFILE", "catalytic"))


BACKENDS = available_backends()


@pytest.fixture(params=BACKENDS, scope="session")
def backend(request) -> str:
    """Every available backend name (``numpy`` is the reference)."""
    return request.param


@pytest.fixture
def restore_engine(monkeypatch):
    """Let a test replace the process-wide engine (``cat.reset_engine``); the engine
    that was there before comes back afterwards."""
    monkeypatch.setattr(engine_mod, "_engine", engine_mod.get_engine())
    yield
    # monkeypatch puts the saved engine back


def run_on(backend, method, *args, **kwargs):
    """Call a lattice method on ``backend``; skip (with the router's reason) when that
    backend declines this case. The reference backend must never decline."""
    try:
        return method(*args, backend=backend, **kwargs)
    except cat.NoBackendError as err:
        if backend == "numpy":
            raise
        pytest.skip(f"{backend} does not run this case: {err}")


@pytest.fixture(scope="session")
def on_backend(backend):
    """``on_backend(L.method, *args)`` runs the method on the parametrised backend and
    checks the router really sent it there."""

    def call(method, *args, **kwargs):
        result = run_on(backend, method, *args, **kwargs)
        dec = cat.get_engine().last_decision
        assert dec is not None and dec.backend == backend and dec.forced
        return result

    return call


@pytest.fixture
def prof():
    """The process-wide profiler, enabled and empty for the test, disabled and emptied
    after it."""
    p = cat.get_profiler()
    p.reset()
    p.enable()
    yield p
    p.disable()
    p.reset()

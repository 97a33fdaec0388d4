"""The backends a test runs on: built once, here, for the ``backend`` fixture
(``tests/conftest.py``) and for the tests that loop over every backend.

Asked through the public API (``Engine.backends()`` and ``explain``), the way a user
would.
"""

from __future__ import annotations

import catalytic as cat


def available_backends() -> list[str]:
    """Every backend the process-wide engine reports as available, the reference
    ('numpy') first."""
    names = [n for n, (ok, _) in cat.get_engine().backends().items() if ok]
    return sorted(names, key=lambda n: (n != "numpy", n))


def declines(backend: str, op: str, *args, **kwargs) -> str | None:
    """Why ``backend`` cannot run ``op(*args, **kwargs)`` (None when it can).

    Asked through the public ``explain`` with the backend forced, the way a user would.
    """
    try:
        cat.get_engine().explain(op, *args, backend=backend, **kwargs)
    except cat.NoBackendError as err:
        return str(err)
    return None

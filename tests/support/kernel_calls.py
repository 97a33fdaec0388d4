"""Counting the calls of host-called Numba kernels, for tests that check a host function
splits its work over many kernel calls (the work budget of ``kernels/cpu/_budget.py``).

Only kernels that no other kernel calls can be counted: a kernel compiled while its
callee is replaced by a Python wrapper would not type.
"""

from __future__ import annotations

from collections import Counter


def count_kernel_calls(monkeypatch, kernels) -> Counter:
    """Wrap each named kernel, a module global, so that every call is counted.

    Parameters
    ----------
    monkeypatch : pytest.MonkeyPatch
        Undoes the wrapping when the test ends.
    kernels : mapping
        Module -> names of its host-called kernels. The wrapper replaces the module
        global, where the host function reads it.

    Returns
    -------
    collections.Counter
        Name -> calls so far (0 for a kernel not called); ``clear()`` restarts the count.
    """
    calls = Counter()
    for mod, names in kernels.items():
        for name in names:

            def counted(*args, _real=getattr(mod, name), _name=name):
                calls[_name] += 1
                return _real(*args)

            monkeypatch.setattr(mod, name, counted)
    return calls

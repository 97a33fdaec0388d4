"""Inert strategies of the Hypothesis stand-in (see ``hypothesis/__init__.py``)."""

from __future__ import annotations

from hypothesis import _Inert


def composite(func):
    """A ``@composite`` strategy: calling it gives a placeholder."""
    return _Inert()


def __getattr__(name):  # integers, lists, data, sampled_from, ...
    if name.startswith("__"):
        raise AttributeError(name)
    return _Inert()

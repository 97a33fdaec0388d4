"""The plugin API: ``hookimpl``, the hook specifications, and the backend contract.

A plugin is any object or module with functions marked ``@catalytic.hookimpl`` (this
module's ``hookimpl``: a plugin needs nothing else from catalytic to declare its hooks).
Register one with ``catalytic.get_engine().register_plugin(obj, name)`` or expose it
under the ``catalytic`` entry-point group. The engine calls a plugin's registration hooks
when the plugin is registered, so a plugin registered after start-up gets the same calls
as the built-in backends, which are plugins like any other (the engine registers them
from a list of module names, ``catalytic.engine.BUILTIN_PLUGINS``).

The backend contract
--------------------
A backend is what ``registry.add_backend`` declares in ``catalytic_add_backends``: its
name, whether it can run here (``available``), its ``device`` (``"cpu"`` or a device),
and, for a device, its lifecycle: ``fatal_error(err)`` (does this failure leave the
device unusable for the process?), ``synchronize()`` (wait for the device after a call),
``cleanup()`` (free caches after a failure), ``release(lattice)`` (free what it holds
for one lattice, on ``lattice.cleanup()``) and ``monitored`` (the device-memory monitor
reads it after each call). The engine uses only what was declared there; see
:meth:`catalytic.registry.Registry.add_backend`. Operations get implementations through
``registry.add_implementation`` in ``catalytic_add_operations``: an implementation takes
the operation's validated arguments and returns what the operation's reference (numpy)
implementation returns for them (:mod:`catalytic.catalogue`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from catalytic.registry import Registry

hookspec = pluggy.HookspecMarker("catalytic")
hookimpl = pluggy.HookimplMarker("catalytic")


@hookspec
def catalytic_add_backends(registry: Registry) -> None:
    """Called once when the plugin is registered, before its operations are added.

    Add backends with ``registry.add_backend(name, available=..., device=...)`` and, for
    a device, its lifecycle (module docstring). Returns nothing.
    """


@hookspec
def catalytic_add_operations(registry: Registry) -> None:
    """Called once when the plugin is registered, after its backends are added.

    Declare operations with ``registry.add_operation(name, ...)`` and give
    implementations with ``registry.add_implementation(op, backend, func, ...)``.
    A name that another plugin already declared is an error. Returns nothing.
    """


@hookspec
def catalytic_memory_pressure(level: str, snapshot) -> None:
    """Called when the device-memory pressure level changes (after a GPU call).

    ``level`` is ``"low"`` (< 70% used), ``"elevated"`` (70-85%), ``"high"``
    (85-95%), ``"critical"`` (>= 95%) or ``"unknown"``; ``snapshot`` is the
    :class:`catalytic.memory.Snapshot` that showed the change. Called on the thread
    that made the call, with no engine or monitor lock held, so an implementation may
    free memory or call the monitor. Each plugin's implementation is called on its own
    (last registered first): an exception is reported as a ``RuntimeWarning`` naming
    the plugin and this hook, never raised into the call, and the other plugins are
    still called. A wrapper (``wrapper=True`` or ``hookwrapper=True``) on this hook is
    not run, with a warning naming its plugin. Returns nothing.
    """

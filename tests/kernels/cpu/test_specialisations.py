"""Each CPU kernel compiles once per dtype, whoever calls it.

Numba types a read-only array apart from a writable one, and a constant that one kernel
passes to another (``0``, ``False``) as a literal apart from the int64/bool that another
caller passes: either way the same kernel compiles, and is cached, twice. The check runs
in a fresh interpreter (the dispatchers of this one hold whatever earlier tests
compiled): the host functions are called with writable and read-only masks, bonds and
fields, some of them split over many calls (the windowed kernels call kernels the
one-call path calls with constants), and the lattice API as the backend calls them;
every kernel that passes a constant to another is typed again (a kernel loaded from
the cache does not tell its callees what it calls them with); then no dispatcher of
``catalytic.kernels.cpu`` may hold two signatures that are equal once read-only flags
and literal types are dropped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent(
    """
    import importlib, json, pkgutil
    import numpy as np
    from numba.core import ir, types
    from numba.core.compiler import (CompilerBase, DefaultPassBuilder, Flags, compile_extra,
                                     run_frontend)
    from numba.core.compiler_machinery import FunctionPass, register_pass
    from numba.core.registry import CPUDispatcher, cpu_target
    from numba.core.ir_utils import get_definition, guard
    from numba.core.typed_passes import NopythonTypeInference

    import catalytic as cat
    import catalytic.kernels.cpu as cpu
    from catalytic.kernels.cpu import (_budget, arrays, batched, bfs, catalytic_path,
                                       components, degree, fields, newman_ziff, winding)

    def frozen(a):
        a = a.copy()
        a.flags.writeable = False
        return a

    shape, periodic = (12, 10), np.zeros(2, np.uint8)
    off = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]], np.int64)
    slot = np.array([~0, 0, ~1, 1], np.int64)
    n = 120
    rng = np.random.default_rng(0)
    mask = rng.random(shape) < 0.8
    open_w = mask.reshape(-1).astype(np.uint8)
    bits_w = rng.integers(0, 2**32, 2 * ((n + 31) // 32), dtype=np.uint64).astype(np.uint32)
    field_w = rng.random(n)
    src = int(np.flatnonzero(open_w)[0])
    dst = int(np.flatnonzero(open_w)[-1])
    prev = _budget._BUDGET
    for make in (lambda a: a.copy(), frozen):
        open_, bits, field = make(open_w), make(bits_w), make(field_w)
        bonds = (make(slot), bits, (n + 31) // 32, make(np.zeros(0)))
        for budget in (prev, 64):  # one call, then windows of a few rows
            _budget._BUDGET = budget
            fields._BUDGET = budget
            for dedupe in (False, True):
                fields.laplacian(shape, periodic, off, open_, dedupe, field, np.empty(n))
                degree.degree(shape, periodic, off, open_, dedupe)
            fields.diffuse(shape, periodic, off, open_, False, field, 2, 0.1, np.empty(n))
            fields.laplacian(shape, periodic, off, open_, False, field, np.empty(n),
                             bonds=bonds)
            degree.degree(shape, periodic, off, open_, False, bonds=bonds)
            components.connected_components(shape, periodic, off, open_, False)
            winding.label_windings(shape, periodic, off, open_, slot, bits, bonds[2], (0,))
            bfs.bfs_distance(shape, periodic, off, open_, False, [src])
            bfs.closeness(shape, periodic, off, open_, False, [src])
            catalytic_path.catalytic_path(shape, periodic, off, open_, False, src, dst,
                                          np.zeros(n, np.uint8), bonds=bonds)
        _budget._BUDGET = prev
        fields._BUDGET = prev
        stack = make(np.stack([open_w, open_w]))
        components.connected_components_batched(shape, periodic, off, stack, False)
        batched.connected_components_rows(shape, periodic, off, stack)
        batched.bfs_distance_batched(shape, periodic, off, stack, False, [src, src])
        winding.label_windings_batched(shape, periodic, off, stack, slot, bits, bonds[2],
                                       (0,))
        newman_ziff.elements("bond", shape, periodic, off, open_, make(slot), bits,
                             bonds[2])
        arrays.xor_bytes(make(np.arange(300, dtype=np.uint8)),
                         make(np.arange(7, dtype=np.uint8)), np.empty(300, np.uint8))
    L = cat.Lattice(shape=shape, mask=mask)
    for Lb in (L, L.with_bonds(rng.random((2,) + shape) < 0.7), L.with_mask(None)):
        Lb.distance_field(src, backend="numba-cpu")
        Lb.connected_components(backend="numba-cpu")
        Lb.laplacian(field_w, backend="numba-cpu")
        Lb.degree(backend="numba-cpu")

    # A kernel loaded from the on-disk cache brings the code of the kernels it calls
    # without their dispatchers learning the signatures: type again (no code generated)
    # every kernel that passes a constant int or bool to another kernel, which makes
    # the callee load, or compile, the literal signature it is called with.
    @register_pass(mutates_CFG=False, analysis_only=True)
    class _Typed(FunctionPass):
        _name = "catalytic_typed_only"

        def __init__(self):
            FunctionPass.__init__(self)

        def run_pass(self, state):
            state.cr = True
            return False

    class TypeOnly(CompilerBase):
        def define_pipelines(self):
            pm = DefaultPassBuilder.define_untyped_pipeline(self.state)
            pm.add_pass(NopythonTypeInference, "nopython frontend")
            pm.add_pass(_Typed, "typed only")
            pm.finalize()
            return [pm]

    kernels = {}
    for info in pkgutil.iter_modules(cpu.__path__):
        mod = importlib.import_module(f"catalytic.kernels.cpu.{info.name}")
        for name, obj in vars(mod).items():
            if isinstance(obj, CPUDispatcher) and obj.py_func.__module__ == mod.__name__:
                kernels[f"{mod.__name__}.{name}"] = obj

    def kernel_of(fir, var):
        d = guard(get_definition, fir, var)
        if isinstance(d, ir.Expr) and d.op == "getattr":
            m = guard(get_definition, fir, d.value)
            d = getattr(getattr(m, "value", None), d.attr, None)
        else:
            d = getattr(d, "value", None)
        if isinstance(d, CPUDispatcher) and d.targetoptions.get("inline") != "always":
            return d
        return None

    def passes_constants(disp):
        fir = run_frontend(disp.py_func)
        for blk in fir.blocks.values():
            for call in blk.find_exprs(op="call"):
                if kernel_of(fir, call.func) is None:
                    continue
                for a in call.args:
                    c = guard(get_definition, fir, a)
                    if isinstance(c, ir.Const) and isinstance(c.value, (bool, int)):
                        return True
        return False

    callers = {k for k, d in kernels.items() if passes_constants(d)}
    typed = set()
    while True:
        todo = [(k, sig) for k in callers for sig in kernels[k].signatures
                if (k, sig) not in typed]
        if not todo:
            break
        for k, sig in todo:
            typed.add((k, sig))
            disp = kernels[k]
            flags = Flags()
            disp.targetdescr.options.parse_as_flags(flags, disp.targetoptions)
            compile_extra(cpu_target.typing_context, cpu_target.target_context,
                          disp.py_func, sig, None, flags, {}, pipeline_class=TypeOnly)

    def plain(t):
        if isinstance(t, types.Array):
            return t.copy(readonly=False)
        return types.unliteral(t)

    twice = {}
    for k, disp in kernels.items():
        seen = {}
        for sig in disp.signatures:
            seen.setdefault(tuple(plain(t) for t in sig), []).append(str(sig))
        dup = [v for v in seen.values() if len(v) > 1]
        if dup:
            twice[k] = dup
    print("RESULT", json.dumps(twice))
    """
)


def test_no_kernel_compiles_twice_for_a_read_only_flag_or_a_literal():
    root = Path(__file__).resolve().parents[3]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(root)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=900, cwd=root, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [s for s in proc.stdout.splitlines() if s.startswith("RESULT ")][-1]
    twice = json.loads(line[len("RESULT "):])
    assert twice == {}, "compiled twice: " + ", ".join(sorted(twice)) + "\n" + json.dumps(
        twice, indent=1)[:4000]

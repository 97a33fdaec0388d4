"""Checks over every CUDA kernel of every module in ``catalytic.kernels.cuda``.

* Every ``@cuda.jit`` kernel (not device function) of every module has a PTX case, in
  ``test_graph._ptx_cases`` or ``test_fields_arrays.KERNELS`` (beside this file): a new kernel,
  in a new module too, fails here until it gets one. Runs everywhere (the simulator
  included); it compiles nothing.
* Under the simulator, every such kernel ran at least once in the session
  (:func:`test_every_cuda_kernel_ran_in_the_simulator`, which ``tests.support.cuda_passes``
  moves to the end of the run): a kernel that no test launches fails there.
* Under the simulator, every launch's argument types are in the committed snapshot
  ``tests/support/launch_signatures.json`` and nothing in it is stale
  (:func:`test_every_launch_signature_is_in_the_snapshot`, run last too); ``ptx``:
  every signature of the snapshot that no hand-written case covers is compiled and
  assembled as below (on a GPU, Numba compiles a kernel once per signature: one that no
  test compiled would first fail there). After a change of what the host code launches,
  ``CATALYTIC_WRITE_LAUNCH_SIGNATURES=1`` with a full simulator pass rewrites the file.
* ``ptx``: no kernel reserves more than :data:`LOCAL_BYTES` of per-thread local memory.
  A ``cuda.local.array`` is a ``.local .b8 __local_depotN[size]`` in the PTX; the driver
  reserves ``size`` bytes for every thread that can be resident at once (about 0.5 GB
  for 2 KB on an H100), at the first launch.
* ``ptx``, assembled: ``ptxas -v`` for sm_90 turns every kernel's PTX into machine code
  as the driver would, and reports what the PTX does not show: register spills (local
  memory traffic in the hot loop) and the stack frame each function needs. No kernel
  may spill, and no stack frame may pass :data:`LOCAL_BYTES`; ptxas itself refuses a
  block of more than 48 KiB of static shared memory, which a launch could not get.
  ptxas comes with the CUDA wheels (``nvidia-cuda-nvcc``, in the dev extra) or a CUDA
  toolkit on the PATH.
* ``ptx``: no kernel that promises its CPU twin's bits has a product the GPU may fuse
  into a multiply-add (:func:`fusable`: an ``fma``, or a multiply and an add written
  without rounding modifiers, which ptxas fuses although the PTX shows no ``fma``), in
  any PTX case or launch signature; nvdisasm (``nvidia-cuda-nvdisasm``, dev extra)
  shows ptxas doing it, and the Laplacian kernels' machine code free of it.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pathlib
import re
import shutil
import subprocess

import pytest

from tests.support import cuda_kernels

#: most per-thread local memory a kernel may use, in bytes (``_unary_kernel`` uses 40:
#: libdevice's argument reduction for large sin/cos/tan arguments)
LOCAL_BYTES = 64

_DEPOT = re.compile(r"\.local\s+\.align\s+\d+\s+\.b8\s+\w+\[(\d+)\]")


_all_kernels = cuda_kernels.all_kernels


def _ptx_cases():
    """``[(id, kernel, argtypes)]``: every PTX case of the cuda test modules."""
    from catalytic.kernels.cuda import graph
    from tests.kernels.cuda import test_fields_arrays as fa
    from tests.kernels.cuda import test_graph as tg

    cases = [(f"graph:{cid}", getattr(graph, name), args)
             for cid, (name, args) in tg._ptx_cases().items()]
    cases += [(cid, kernel, args) for cid, kernel, args, _needle in fa.KERNELS]
    return cases


def test_the_enumeration_finds_the_kernels():
    """The checks below would pass vacuously if it found nothing."""
    found = _all_kernels()
    mods = {m.rsplit(".", 1)[1] for m, _ in found}
    assert {"arrays", "fields", "graph", "random"} <= mods
    assert ("catalytic.kernels.cuda.graph", "_degree") in found
    assert ("catalytic.kernels.cuda.arrays", "_sum_i64_kernel") in found  # factory-made
    assert ("catalytic.kernels.cuda.graph", "_smallest_label") not in found  # device fn
    assert not any(name in ("neighbor", "is_first") for _, name in found)


def test_every_cuda_kernel_has_a_ptx_case():
    tested = [kernel for _cid, kernel, _args in _ptx_cases()]
    missing = sorted(f"{m}.{n}" for (m, n), k in _all_kernels().items()
                     if not any(k is t for t in tested))
    assert not missing, f"kernels without a PTX case (add one to the cuda tests): {missing}"


def test_every_ptx_case_is_a_kernel_of_the_package():
    kernels = list(_all_kernels().values())
    stale = sorted(cid for cid, kernel, _args in _ptx_cases()
                   if not any(kernel is k for k in kernels))
    assert not stale, f"PTX cases of objects that are no module's kernel: {stale}"


def _local_bytes(ptx: str) -> int:
    return sum(int(n) for n in _DEPOT.findall(ptx))


def test_local_depot_pattern():
    assert _local_bytes("\t.local .align 8 .b8 \t__local_depot0[2048];\n") == 2048
    assert _local_bytes(".reg .b64 %rd<9>;\n") == 0


@pytest.mark.ptx
@pytest.mark.parametrize("case", [c[0] for c in _ptx_cases()])
def test_kernel_local_memory_is_small(compile_ptx, case):
    _cid, kernel, args = next(c for c in _ptx_cases() if c[0] == case)
    ptx = compile_ptx(kernel, args)
    used = _local_bytes(ptx)
    assert used <= LOCAL_BYTES, f"{case}: {used} bytes of local memory per thread"


# -- ptxas -------------------------------------------------------------------------------
_PROPS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, "
                    r"(\d+) bytes spill loads")


def _cuda_tool(name):
    """A CUDA tool of the CUDA wheels (the version that matches their NVVM), else one on
    the PATH; None when there is neither."""
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations if spec else []):
        for exe in sorted(pathlib.Path(root).glob(f"cu*/bin/{name}")):
            return str(exe)
    return shutil.which(name)


def _assemble(ptx: str, tmp_path) -> tuple:
    """``(path of the sm_90 object, ptxas -v's report)``: ``ptx`` assembled."""
    exe = _cuda_tool("ptxas")
    if exe is None:
        pytest.skip("ptxas not found: pip install nvidia-cuda-nvcc (or a CUDA toolkit)")
    src = tmp_path / "kernel.ptx"
    src.write_text(ptx)
    obj = tmp_path / "k.o"
    done = subprocess.run([exe, "-arch=sm_90", "-v", str(src), "-o", str(obj)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return obj, done.stderr


def _assembled(ptx: str, tmp_path) -> list:
    """``[(stack, spill stores, spill loads)]`` of every function ptxas assembles."""
    return [tuple(int(x) for x in m) for m in _PROPS.findall(_assemble(ptx, tmp_path)[1])]


def _check_assembled(case, ptx, tmp_path):
    """ptxas assembles ``ptx``, with no spills and small stack frames."""
    funcs = _assembled(ptx, tmp_path)
    assert funcs, f"{case}: ptxas reported no function"
    for stack, stores, loads in funcs:
        assert stores == 0 and loads == 0, f"{case}: spills {stores} B stored, {loads} B loaded"
        assert stack <= LOCAL_BYTES, f"{case}: a {stack}-byte stack frame"


def test_ptxas_report_pattern():
    line = "    16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads"
    assert _PROPS.findall(line) == [("16", "8", "4")]


@pytest.mark.ptx
def test_the_assembly_check_refuses_too_much_shared_memory(compile_ptx, tmp_path):
    """A block declaring 56 KiB of static shared memory could not be launched: the
    assembly check fails on it (ptxas refuses it), and passes the same kernel at 8 KiB."""
    from numba import cuda
    from numba import types as T

    def make(n):
        def kernel(out):
            buf = cuda.shared.array(n, T.float64)
            buf[cuda.threadIdx.x] = 1.0
            cuda.syncthreads()
            out[0] = buf[n - 1 - cuda.threadIdx.x]
        return kernel

    _check_assembled("8 KiB", compile_ptx(make(1024), (T.float64[::1],)), tmp_path)
    with pytest.raises(AssertionError, match="too much shared data"):
        _check_assembled("56 KiB", compile_ptx(make(7168), (T.float64[::1],)), tmp_path)


@pytest.mark.ptx
@pytest.mark.parametrize("case", [c[0] for c in _ptx_cases()])
def test_kernel_assembles_without_spills(compile_ptx, tmp_path, case):
    _cid, kernel, args = next(c for c in _ptx_cases() if c[0] == case)
    _check_assembled(case, compile_ptx(kernel, args), tmp_path)


@pytest.mark.simulator_only
def test_every_cuda_kernel_ran_in_the_simulator():
    """Every kernel was launched by some test of this session (``cuda_passes`` records
    the simulator's launches and runs this test last). Skipped when only part of the CUDA
    tests was selected, since the others may be the ones that launch a kernel."""
    if cuda_kernels.PARTIAL[0] is not None:
        pytest.skip(f"only part of the CUDA tests ran ({cuda_kernels.PARTIAL[0]})")
    never = cuda_kernels.never_launched(cuda_kernels.launched_names())
    assert not never, f"kernels no test launched in the simulator: {never}"


# -- launch signatures -------------------------------------------------------------------
_flat = cuda_kernels._flat


@pytest.mark.simulator_only
def test_every_launch_signature_is_in_the_snapshot():
    """Every (kernel, argument types) this session launched is in the snapshot, and the
    snapshot names no signature it did not launch (``cuda_passes`` runs this last; skipped
    when only part of the CUDA tests ran)."""
    if cuda_kernels.PARTIAL[0] is not None:
        pytest.skip(f"only part of the CUDA tests ran ({cuda_kernels.PARTIAL[0]})")
    got = cuda_kernels.launched_signatures()
    if os.environ.get("CATALYTIC_WRITE_LAUNCH_SIGNATURES") == "1":
        cuda_kernels.write_snapshot(got)
        pytest.skip(f"wrote {cuda_kernels.SNAPSHOT.name}: {len(_flat(got))} signatures")
    missing, stale = cuda_kernels.snapshot_diff(got)
    assert not missing and not stale, (
        f"{cuda_kernels.SNAPSHOT.name} is out of date (rewrite it with "
        f"CATALYTIC_WRITE_LAUNCH_SIGNATURES=1 and a full simulator pass): launched but not "
        f"in it: {missing}; in it but not launched: {stale}")


def _snapshot_cases():
    """``[(id, kernel, argtypes)]`` of the snapshot's signatures that no hand-written
    PTX case (:func:`_ptx_cases`) compiles already."""
    hand = [(kernel, tuple(args)) for _cid, kernel, args in _ptx_cases()]
    out = []
    for name, sigs in cuda_kernels.load_snapshot().items():
        mod, attr = name.rsplit(".", 1)
        kernel = getattr(importlib.import_module(mod), attr)
        for sig in sigs:
            args = tuple(cuda_kernels.key_type(k) for k in sig)
            if not any(k is kernel and a == args for k, a in hand):
                out.append((f"{attr}({', '.join(sig)})", kernel, args))
    return out


def test_the_snapshot_reads_back():
    """The snapshot exists, names kernels of the package, and its keys turn back into
    the types they were written from."""
    from numba import types as T

    sigs = cuda_kernels.load_snapshot()
    assert sum(len(v) for v in sigs.values()) > 50
    kernels = _all_kernels()
    assert all(tuple(name.rsplit(".", 1)) in kernels for name in sigs)
    assert cuda_kernels.key_type("int32[2,C]") == T.int32[:, ::1]
    assert cuda_kernels.key_type("uint8[1,C,ro]") == T.Array(T.uint8, 1, "C", readonly=True)
    assert cuda_kernels.key_type("float64") == T.float64 and cuda_kernels.key_type("bool") == T.boolean
    np = pytest.importorskip("numpy")
    assert cuda_kernels.arg_key(np.zeros((2, 3), np.int32)) == "int32[2,C]"
    assert cuda_kernels.arg_key(np.zeros((2, 3))[:, 1]) == "float64[1,A]"
    assert cuda_kernels.arg_key(np.frombuffer(b"ab", np.uint8)) == "uint8[1,C,ro]"
    assert [cuda_kernels.arg_key(v) for v in (3, 2.0, True, np.uint64(1))] == [
        "int64", "float64", "bool", "uint64"]


SNAPSHOT_CASES = _snapshot_cases()


@pytest.mark.ptx
@pytest.mark.parametrize("case", [c[0] for c in SNAPSHOT_CASES])
def test_launch_signature_assembles_without_spills(compile_ptx, tmp_path, case):
    """Every launch signature of the snapshot compiles to sm_90 PTX and assembles as
    the hand-written cases must (which cover the rest)."""
    _cid, kernel, args = next(c for c in SNAPSHOT_CASES if c[0] == case)
    ptx = compile_ptx(kernel, args)
    assert _local_bytes(ptx) <= LOCAL_BYTES
    _check_assembled(case, ptx, tmp_path)


# -- fused multiply-adds ---------------------------------------------------------------
#: every hand-written PTX case and every launch signature they leave out
ALL_CASES = _ptx_cases() + SNAPSHOT_CASES

#: a float multiply, add or subtract written without a rounding modifier (``.rn``,
#: ``.rz``, ... would stand between the operation and the type), optionally predicated
_LOOSE = re.compile(r"^\s*(?:@!?%\w+\s+)?(mul|add|sub)\.(f32|f64)\s+(%\w+),\s*([^,;]+),\s*([^;]+);",
                    re.M)
_FMA = re.compile(r"\bfma\.\w+\.f(?:32|64)\b")

#: kernels whose documented agreement with the CPU allows a fused multiply-add, and why
_SOLVER = ("a solver's step, promising no CPU bits: its sums run in another order than "
           "the CPU twin's, and the answer is held to the tolerance")
MAY_FUSE = {
    **{k: _SOLVER for k in ("_csr_pass", "_jacobi_start", "_prolong", "_coarsest_solve",
                            "_cg_step", "_cg_direction", "_cg_dots")},
    "_matmul_kernel": "sums the products in FMAs: within k eps (|a| @ |b|) of the CPU",
    "_unary_kernel": "exp, log, sin and cos are libdevice's, built on FMAs: within 4 ulp",
    "_binary_kernel": "pow is libdevice's, built on FMAs: within 4 ulp (+ - * / max min "
                      "are single operations)",
}


def _power_of_two(operand: str, kind: str) -> bool:
    """True for a PTX float immediate (``0d...``, ``0f...``) that is a normal power of
    two: a product by it is exact, so fusing it with an addition changes nothing."""
    bits, man = (52, 11) if kind == "f64" else (23, 8)
    prefix = "0d" if kind == "f64" else "0f"
    if not operand.startswith(prefix):
        return False
    v = int(operand[2:], 16)
    exp = (v >> bits) & ((1 << man) - 1)
    return v & ((1 << bits) - 1) == 0 and exp not in (0, (1 << man) - 1)


def fusable(ptx: str) -> list:
    """What of ``ptx`` may run as a fused multiply-add (one rounding where the CPU
    rounds twice): every ``fma`` instruction, and every multiply without a rounding
    modifier whose result an add or subtract without one reads, which the PTX ISA lets
    ptxas fuse (it does: :func:`test_ptxas_fuses_what_fusable_names`). A product by a
    power of two is exact and not listed. Conservative: a pair is listed whether or not
    ptxas then fuses it."""
    ops = [(op, kind, dst, a.strip(), b.strip()) for op, kind, dst, a, b in _LOOSE.findall(ptx)]
    products = {dst: f"mul.{kind} {dst}, {a}, {b}" for op, kind, dst, a, b in ops
                if op == "mul" and not (_power_of_two(a, kind) or _power_of_two(b, kind))}
    found = _FMA.findall(ptx)
    for op, kind, dst, a, b in ops:
        if op != "mul":
            found += [f"{products[r]} -> {op}.{kind} {dst}" for r in (a, b) if r in products]
    return found


def test_fusable_pattern():
    ptx = ("\tmul.f64 \t%fd3, %fd1, %fd2;\n\tsub.f64 \t%fd4, %fd3, %fd9;\n"
           "\tmul.rn.f64 \t%fd5, %fd1, %fd2;\n\tadd.f64 \t%fd6, %fd5, %fd9;\n"
           "\tmul.f64 \t%fd7, %fd1, 0d3CB0000000000000;\n\tadd.f64 \t%fd8, %fd7, %fd9;\n"
           "\tmul.f64 \t%fd10, %fd1, 0d3CC921FB54442D18;\n\tadd.rn.f64 \t%fd11, %fd10, %fd9;\n"
           "\t@%p1 mul.f32 \t%f3, %f1, %f2;\n\tadd.f32 \t%f4, %f9, %f3;\n"
           "\tfma.rn.f64 \t%fd12, %fd1, %fd2, %fd9;\n")
    assert fusable(ptx) == ["fma.rn.f64",
                            "mul.f64 %fd3, %fd1, %fd2 -> sub.f64 %fd4",
                            "mul.f32 %f3, %f1, %f2 -> add.f32 %f4"]
    assert _power_of_two("0d3FF0000000000000", "f64") and _power_of_two("0f3F000000", "f32")
    assert not _power_of_two("0d3FF8000000000000", "f64") and not _power_of_two("%fd1", "f64")
    assert not _power_of_two("0d0000000000000000", "f64")  # zero


def _sass(ptx: str, tmp_path) -> str:
    """The sm_90 machine code ptxas makes of ``ptx``, as nvdisasm prints it."""
    exe = _cuda_tool("nvdisasm")
    if exe is None:
        pytest.skip("nvdisasm not found: pip install nvidia-cuda-nvdisasm (or a CUDA toolkit)")
    obj, _report = _assemble(ptx, tmp_path)
    done = subprocess.run([exe, str(obj)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.ptx
def test_ptxas_fuses_what_fusable_names(compile_ptx, tmp_path):
    """The hardware's side of :func:`fusable`: ``a * b - c`` written plainly has no
    ``fma`` in its PTX, yet ptxas makes a DFMA of it; with the product through
    ``_exact.mul`` it stays a DMUL and a DADD, as on the CPU."""
    from numba import types as T

    from catalytic.kernels.cuda._exact import mul

    def plain(x, out):
        out[0] = x[0] * x[1] - x[2]

    def rounded(x, out):
        out[0] = mul(x[0], x[1]) - x[2]

    args = (T.float64[::1], T.float64[::1])
    ptx = compile_ptx(plain, args)
    assert "fma" not in ptx and fusable(ptx)
    assert "DFMA" in _sass(ptx, tmp_path)
    ptx = compile_ptx(rounded, args)
    assert not fusable(ptx)
    sass = _sass(ptx, tmp_path)
    assert "DFMA" not in sass and "DMUL" in sass and "DADD" in sass


@pytest.mark.ptx
@pytest.mark.parametrize("kernel", ["_lap_kernel", "_lap_dedupe_kernel"])
def test_laplacian_sass_has_no_fma(compile_ptx, tmp_path, kernel):
    """The Laplacian and Euler step as the GPU runs them: no DFMA (before their products
    went through ``_exact.mul``, ptxas fused two in each kernel)."""
    from catalytic.kernels.cuda import fields

    target = getattr(fields, kernel)
    _cid, _kernel, args = next(c for c in ALL_CASES if c[1] is target)
    sass = _sass(compile_ptx(target, args), tmp_path)
    assert "DFMA" not in sass and "DMUL" in sass


def _kernel_name(kernel) -> str:
    return next(n for (_m, n), k in _all_kernels().items() if k is kernel)


@pytest.mark.ptx
@pytest.mark.parametrize("case", [c[0] for c in ALL_CASES])
def test_no_product_the_gpu_may_fuse(compile_ptx, case):
    """Every kernel that promises its CPU twin's bits (all but :data:`MAY_FUSE`), in
    every PTX case and launch signature, has nothing :func:`fusable` names."""
    _cid, kernel, args = next(c for c in ALL_CASES if c[0] == case)
    name = _kernel_name(kernel)
    if name in MAY_FUSE:
        pytest.skip(f"{name}: {MAY_FUSE[name]}")
    found = fusable(compile_ptx(kernel, args))
    assert not found, f"{case}: the GPU may fuse {found[:4]} (write the products with _exact.mul)"

"""The Python harness: runs a Python implementation on the golden vectors and
judges its outputs with the C checker (include/lacs/check.h) through ctypes.

The comparison is not written here: lacs_check_outputs in liblacs.so is the
one implementation of the tolerance model (SPEC.md 11), shared with the `lacs`
CLI. This module finds the cases, imports the implementation, calls it, turns
what it returns into float64 tensors and hands them to the C side.

An implementation is a function

    fn(op: str, inputs: dict[str, numpy.ndarray], params: dict[str, float])
        -> dict[str, array-like] | None

inputs are float32 (bf16-tier values widened exactly) and cu_seqlens int64;
params holds every parameter of the case's metadata; the outputs are named as
the goldens without `expected.` (`o`, `ht`, `y`, `dx`, ...). Raising
NotImplementedError or returning None skips the case.

Cases run in this process, one after the other: a crash inside a C extension
(a segfault in a CUDA kernel, say) ends the whole run.

The ctypes mirrors of check.h and plugin.h assume an LP64 ABI (x86-64,
aarch64: 8-byte pointers, int64_t and double aligned to 8, int and enums of 4
bytes); _layout_problems() verifies the offsets ctypes computes against that.
"""

import ctypes
import importlib
import importlib.util
import os
import sys
import time
import traceback

import numpy as np

from .safetensors import FormatError
from .vectors import load_vector

# LACS_SPEC_VERSION of include/lacs/types.h (the library does not export it;
# tests/python/test_harness.py checks the two agree).
SPEC_VERSION = "1.4"
TIERS = ("fp32", "bf16")

# plugin.h
LACS_F64 = 2
# types.h
LACS_OK = 0
# check.h
LACS_CHECK_MAX_OUTPUTS = 8
DESCRIBE_BUFFER = 256

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"


class HarnessError(Exception):
    """A user error (bad option, missing file, unusable implementation): the
    CLI prints `lacs: <message>` and exits 2."""


# ---- ctypes mirrors of the C structures ----

class LacsTensor(ctypes.Structure):
    """lacs_tensor (plugin.h)."""
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("dtype", ctypes.c_int),  # lacs_dtype: an enum, int-sized
        ("ndim", ctypes.c_int),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("data", ctypes.c_void_p),
    ]


class LacsOutputCheck(ctypes.Structure):
    """lacs_output_check (check.h), field for field."""
    _fields_ = [
        ("name", ctypes.c_char * 32),
        ("ratio", ctypes.c_double),
        ("normwise_ratio", ctypes.c_double),
        ("elementwise_ratio", ctypes.c_double),
        ("normwise_error", ctypes.c_double),
        ("worst_block", ctypes.c_int64),
        ("worst_element", ctypes.c_int64),
        ("expected_value", ctypes.c_double),
        ("actual_value", ctypes.c_double),
        ("allowed_error", ctypes.c_double),
        ("nonfinite_mismatches", ctypes.c_int64),
    ]


class LacsCheckResult(ctypes.Structure):
    """lacs_check_result (check.h)."""
    _fields_ = [
        ("ratio", ctypes.c_double),
        ("n_outputs", ctypes.c_int),
        ("outputs", LacsOutputCheck * LACS_CHECK_MAX_OUTPUTS),
    ]


class LacsOpInfo(ctypes.Structure):
    """lacs_op_info (ops.h)."""
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("family", ctypes.c_int),  # lacs_op_family
        ("labels", ctypes.c_char_p),
        ("reference", ctypes.c_char_p),
        ("required", ctypes.c_char_p),
        ("optional", ctypes.c_char_p),
        ("params", ctypes.c_char_p),
        ("outputs", ctypes.c_char_p),
    ]


# The LP64 layout, worked out by hand from the C rules (each member at the next
# multiple of its alignment, the size a multiple of the largest alignment):
# (structure, sizeof, {field: offset}).
EXPECTED_LAYOUT = (
    (LacsTensor, 32, {"name": 0, "dtype": 8, "ndim": 12, "shape": 16, "data": 24}),
    (LacsOutputCheck, 112, {"name": 0, "ratio": 32, "normwise_ratio": 40, "elementwise_ratio": 48,
                            "normwise_error": 56, "worst_block": 64, "worst_element": 72,
                            "expected_value": 80, "actual_value": 88, "allowed_error": 96,
                            "nonfinite_mismatches": 104}),
    # n_outputs (int) at 8 is followed by 4 bytes of padding: outputs hold doubles
    (LacsCheckResult, 16 + 8 * 112, {"ratio": 0, "n_outputs": 8, "outputs": 16}),
    (LacsOpInfo, 64, {"name": 0, "family": 8, "labels": 16, "reference": 24, "required": 32,
                      "optional": 40, "params": 48, "outputs": 56}),
)


def _layout_problems():
    """Where the ctypes layout differs from EXPECTED_LAYOUT (an empty list on an
    LP64 machine)."""
    problems = []
    for struct, size, offsets in EXPECTED_LAYOUT:
        if ctypes.sizeof(struct) != size:
            problems.append(f"sizeof({struct.__name__}) is {ctypes.sizeof(struct)}, expected {size}")
        for field, offset in offsets.items():
            actual = getattr(struct, field).offset
            if actual != offset:
                problems.append(f"{struct.__name__}.{field} is at {actual}, expected {offset}")
    return problems


# ---- the library ----

def library_path():
    """$LACS_BUILD/liblacs.so, else build/liblacs.so at the repository root
    (python/lacs/../../build)."""
    build = os.environ.get("LACS_BUILD")
    if not build:
        package = os.path.dirname(os.path.abspath(__file__))
        build = os.path.join(os.path.dirname(os.path.dirname(package)), "build")
    return os.path.join(build, "liblacs.so")


class Library:
    """liblacs.so with the signatures of the functions the harness calls."""

    def __init__(self, path=None):
        path = path or library_path()
        if not os.path.isfile(path):
            raise HarnessError(f"{path} not found: run make")
        problems = _layout_problems()
        if problems:
            raise HarnessError("the ctypes mirror of check.h does not match this machine's ABI "
                               f"(LP64 assumed): {problems[0]}")
        try:
            self.lib = ctypes.CDLL(path)
        except OSError as e:
            raise HarnessError(f"cannot load {path}: {e}") from None
        try:
            self._bind()
        except AttributeError as e:
            raise HarnessError(f"{path} lacks a checker function ({e}): rebuild it with make") from None
        self.path = path

    def _bind(self):
        lib = self.lib
        lib.lacs_last_error.argtypes = []
        lib.lacs_last_error.restype = ctypes.c_char_p
        lib.lacs_vector_open.argtypes = [ctypes.c_char_p]
        lib.lacs_vector_open.restype = ctypes.c_void_p
        lib.lacs_vector_close.argtypes = [ctypes.c_void_p]
        lib.lacs_vector_close.restype = None
        lib.lacs_check_outputs.argtypes = [ctypes.c_void_p, ctypes.POINTER(LacsTensor), ctypes.c_int,
                                           ctypes.POINTER(LacsCheckResult)]
        lib.lacs_check_outputs.restype = ctypes.c_int
        lib.lacs_describe_element.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64,
                                              ctypes.c_char_p, ctypes.c_size_t]
        lib.lacs_describe_element.restype = ctypes.c_char_p
        lib.lacs_ops.argtypes = [ctypes.POINTER(ctypes.c_int)]
        lib.lacs_ops.restype = ctypes.POINTER(LacsOpInfo)

    def last_error(self):
        message = self.lib.lacs_last_error()
        return message.decode("utf-8", "replace") if message else "unknown error"

    def op_names(self):
        """The ops of the op table (lacs_ops), in table order."""
        count = ctypes.c_int(0)
        table = self.lib.lacs_ops(ctypes.byref(count))
        return [table[i].name.decode("utf-8") for i in range(count.value)]

    def open_vector(self, path):
        """A lacs_vector pointer (close it with close_vector); HarnessError with
        the checker's message (which names the file) if it cannot be loaded."""
        handle = self.lib.lacs_vector_open(os.fsencode(path))
        if not handle:
            raise HarnessError(self.last_error())
        return handle

    def close_vector(self, handle):
        self.lib.lacs_vector_close(handle)

    def describe_element(self, handle, output_index, element_index):
        buffer = ctypes.create_string_buffer(DESCRIBE_BUFFER)
        self.lib.lacs_describe_element(handle, output_index, element_index, buffer, DESCRIBE_BUFFER)
        return buffer.value.decode("utf-8", "replace")

    def check_outputs(self, handle, outputs):
        """lacs_check_outputs on {name: contiguous float64 array}. Returns the
        LacsCheckResult, or raises HarnessError with the checker's message."""
        n = len(outputs)
        tensors = (LacsTensor * max(n, 1))()
        keep_alive = []
        for i, (name, array) in enumerate(outputs.items()):
            name_bytes = name.encode("utf-8")
            shape = (ctypes.c_int64 * max(array.ndim, 1))(*array.shape)
            keep_alive.extend((name_bytes, shape, array))
            tensors[i] = LacsTensor(name_bytes, LACS_F64, array.ndim, shape,
                                    array.ctypes.data_as(ctypes.c_void_p))
        result = LacsCheckResult()
        status = self.lib.lacs_check_outputs(handle, tensors, n, ctypes.byref(result))
        del keep_alive
        if status != LACS_OK:
            raise HarnessError(self.last_error())
        return result


# ---- the implementation ----

def load_impl(spec):
    """The function named by `python:FILE_OR_MODULE:FUNCTION`. FILE is a path
    (it ends in .py or names an existing file; its directory goes first on
    sys.path, as when running it as a script); otherwise a module name for
    importlib.import_module."""
    prefix = "python:"
    if not spec.startswith(prefix):
        raise HarnessError(f"unsupported implementation {spec!r}: the Python harness runs "
                           "python:FILE_OR_MODULE:FUNCTION (builtin:* and PATH.so are for build/lacs check)")
    where, sep, function = spec[len(prefix):].rpartition(":")
    if not sep or not where or not function:
        raise HarnessError(f"bad implementation {spec!r}: expected python:FILE_OR_MODULE:FUNCTION")
    if where.endswith(".py") or os.sep in where or "/" in where or os.path.isfile(where):
        module = _import_file(where)
    else:
        module = _import_module(where)
    fn = getattr(module, function, None)
    if fn is None:
        raise HarnessError(f"{where} has no function {function!r}")
    if not callable(fn):
        raise HarnessError(f"{where}: {function!r} is not a function")
    return fn


def _summary(error):
    """An exception's one-line summary: `ValueError: message`."""
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _import_file(path):
    if not os.path.isfile(path):
        raise HarnessError(f"{path}: no such file")
    path = os.path.abspath(path)
    name = "lacs_impl_" + "".join(c if c.isalnum() else "_" for c in os.path.splitext(os.path.basename(path))[0])
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise HarnessError(f"{path}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, os.path.dirname(path))
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # whatever the user's module raises is reported, not a traceback
        raise HarnessError(f"cannot import {path}: {_summary(e)}") from None
    return module


def _import_module(name):
    try:
        return importlib.import_module(name)
    except Exception as e:
        raise HarnessError(f"cannot import {name}: {_summary(e)}") from None


# ---- the cases ----

class Case:
    """One vector file: id (the file name without .safetensors), path, op and
    tier (from its metadata; if it does not load, its folder's op and the tier
    in its id), flags and reason (empty if it does not load), error (why it
    does not load, in the C loader's words, or None).

    A file that does not load is still a case, as in build/lacs: `check`
    reports it as a FAIL with the loader's message, `list` shows the message."""

    def __init__(self, library, path, op):
        self.path = path
        self.id = os.path.basename(path)[:-len(".safetensors")]
        self.op, self.tier = op, _tier_from_id(self.id)
        self.flags, self.reason, self.error = [], "", None
        try:
            # the C loader first: it is the one `check` and build/lacs use, and
            # it refuses more (metadata the checker needs) than the Python reader
            library.close_vector(library.open_vector(path))
            meta = load_vector(path).meta
        except (HarnessError, FormatError, OSError) as e:
            self.error = str(e)
            return
        self.op = meta.get("op") or op
        self.tier = meta.get("tier") or self.tier
        self.flags = list(meta.get("flags") or [])
        self.reason = meta.get("reason") or ""


def _tier_from_id(case_id):
    """The tier in an id `<op>-<tier>-<name>`, for a file whose metadata
    cannot be read ("?" if none)."""
    for tier in TIERS:
        if f"-{tier}-" in case_id:
            return tier
    return "?"


def vectors_dir(given):
    """The vectors directory: `given` (must be one), else ./vectors/core, else
    $LACS_VECTORS."""
    if given is not None:
        if not os.path.isdir(given):
            problem = "is not a directory" if os.path.exists(given) else "does not exist"
            raise HarnessError(f"vectors directory '{given}' {problem}")
        return given
    if os.path.isdir(os.path.join("vectors", "core")):
        return "vectors/core"
    env = os.environ.get("LACS_VECTORS")
    if env:
        if not os.path.isdir(env):
            raise HarnessError(f"vectors directory '{env}' (from LACS_VECTORS) does not exist")
        return env
    raise HarnessError("no vectors directory: ./vectors/core does not exist and LACS_VECTORS is not set "
                       "(use --vectors DIR)")


def check_filters(library, ops, tier):
    """HarnessError for an op not in the op table or a tier not fp32/bf16."""
    known = library.op_names()
    for op in ops or ():
        if op not in known:
            raise HarnessError(f"unknown op '{op}' (known ops: {', '.join(known)})")
    if tier is not None and tier not in TIERS:
        raise HarnessError(f"unknown tier '{tier}' (tiers: {', '.join(TIERS)})")


def find_cases(library, directory, ops=None, tier=None):
    """Every DIR/<op>/*.safetensors for the ops of the op table (only `ops`
    when given), whose op and tier pass the filters, sorted by id. Files are
    loaded one at a time."""
    wanted = set(ops) if ops else None
    paths = []
    for op in library.op_names():
        folder = os.path.join(directory, op)
        if (wanted is None or op in wanted) and os.path.isdir(folder):
            paths.extend((name[:-len(".safetensors")], os.path.join(folder, name), op)
                         for name in os.listdir(folder)
                         if name.endswith(".safetensors") and not name.startswith("."))
    cases = []
    for _, path, op in sorted(paths):
        case = Case(library, path, op)
        if (wanted is None or case.op in wanted) and (tier is None or case.tier == tier):
            cases.append(case)
    return cases


def shard(cases, index, count):
    """The cases whose position is congruent to index - 1 modulo count."""
    return [c for i, c in enumerate(cases) if i % count == index - 1]


# ---- running one case ----

class OutputResult:
    """One output's comparison: the fields of lacs_output_check, plus `where`
    (the worst element in words)."""

    def __init__(self, check, where):
        self.name = check.name.decode("utf-8", "replace")
        self.ratio = check.ratio
        self.normwise_ratio = check.normwise_ratio
        self.elementwise_ratio = check.elementwise_ratio
        self.normwise_error = check.normwise_error
        self.worst_block = check.worst_block
        self.worst_element = check.worst_element
        self.expected = check.expected_value
        self.actual = check.actual_value
        self.allowed = check.allowed_error
        self.nonfinite_mismatches = check.nonfinite_mismatches
        self.where = where  # lacs_describe_element, or "NAME (no element)"


class CaseResult:
    """status (PASS, FAIL, SKIP), ratio (the worst, None if not compared),
    outputs (OutputResult list), message (None or one line), traceback (text
    or None), seconds."""

    def __init__(self, case):
        self.case = case
        self.status = FAIL
        self.ratio = None
        self.outputs = []
        self.message = None
        self.traceback = None
        self.seconds = 0.0


def _to_float64(name, value):
    """An output as a C-contiguous float64 array; ValueError naming the output
    if it is not numeric. Torch tensors (bfloat16 included) go through
    .detach().cpu(); anything else through numpy.asarray (__array__)."""
    if hasattr(value, "detach") and hasattr(value, "cpu"):
        value = value.detach().cpu()
        try:
            value = value.numpy()
        except (TypeError, RuntimeError):  # bfloat16 and other dtypes NumPy lacks: widen exactly
            value = value.double().numpy()
    try:
        array = np.asarray(value)
    except Exception as e:
        raise ValueError(f"output '{name}' is not an array ({_summary(e)})") from None
    if array.dtype.kind not in "fiu":
        raise ValueError(f"output '{name}' is not a real numeric array (dtype {array.dtype})")
    return np.ascontiguousarray(array, dtype=np.float64)


def _shape_text(shape):
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _outputs_problem(outputs, expected):
    """A one-line message if the output names or shapes differ from the
    goldens', else None."""
    missing = [n for n in expected if n not in outputs]
    if missing:
        return "missing output " + ", ".join(f"'{n}' {_shape_text(expected[n].shape)}" for n in missing)
    extra = [n for n in outputs if n not in expected]
    if extra:
        return (f"extra output {', '.join(repr(n) for n in extra)}: the outputs of this case are "
                f"{', '.join(expected)}")
    for name, golden in expected.items():
        if outputs[name].shape != golden.shape:
            return (f"output '{name}' has shape {_shape_text(outputs[name].shape)}, expected "
                    f"{_shape_text(golden.shape)}")
    return None


def run_case(library, fn, case):
    """Runs `fn` on `case` and judges its outputs. Never raises for what the
    implementation does; KeyboardInterrupt goes through."""
    result = CaseResult(case)
    start = time.perf_counter()
    try:
        _run(library, fn, case, result)
    finally:
        result.seconds = time.perf_counter() - start
    return result


def _run(library, fn, case, result):
    if case.error is not None:
        result.message = case.error
        return
    try:
        handle = library.open_vector(case.path)  # the C loader's verdict first, as in Case
    except HarnessError as e:
        result.message = str(e)
        return
    try:
        _run_loaded(library, fn, case, handle, result)
    finally:
        library.close_vector(handle)


def _call(fn, vector, result):
    """fn's outputs as {name: float64 array}, or None with result's status and
    message set (SKIP, or FAIL for an exception or an unusable result)."""
    # writable copies: the implementation may hand them to torch.from_numpy or modify them
    inputs = {name: np.array(array) for name, array in vector.inputs.items()}
    params = {name: float(value) for name, value in vector.params.items()}
    try:
        returned = fn(vector.op, inputs, params)
    except NotImplementedError as e:
        result.status = SKIP
        result.message = f"unsupported by the implementation ({_summary(e)})"
        return None
    except (Exception, SystemExit) as e:
        result.message = _summary(e)
        # from the implementation's frame on: the harness's own frame says nothing
        result.traceback = "".join(traceback.format_exception(type(e), e, e.__traceback__.tb_next))
        return None
    if returned is None:
        result.status = SKIP
        result.message = "unsupported by the implementation (it returned None)"
        return None
    if not isinstance(returned, dict):
        result.message = (f"the implementation returned {type(returned).__name__}, expected a dict of "
                          "output name -> array")
        return None
    outputs = {}
    for name, value in returned.items():
        if not isinstance(name, str):
            result.message = f"output name {name!r} is not a string"
            return None
        try:
            outputs[name] = _to_float64(name, value)
        except ValueError as e:
            result.message = str(e)
            return None
    return outputs


def _run_loaded(library, fn, case, handle, result):
    try:
        vector = load_vector(case.path)
    except (FormatError, OSError) as e:
        result.message = str(e)
        return
    outputs = _call(fn, vector, result)
    if outputs is None:
        return
    problem = _outputs_problem(outputs, vector.expected)
    if problem is not None:
        result.message = problem
        return
    try:
        check = library.check_outputs(handle, outputs)
    except HarnessError as e:
        result.message = str(e)
        return
    for i in range(check.n_outputs):
        # output i of the result is output i of the vector
        output = check.outputs[i]
        name = output.name.decode("utf-8", "replace")
        if name in vector.expected and 0 <= output.worst_element < vector.expected[name].size:
            where = library.describe_element(handle, i, output.worst_element)
        else:
            where = f"{name} (no element)"
        result.outputs.append(OutputResult(output, where))
    result.ratio = check.ratio
    result.status = PASS if check.ratio <= 1.0 else FAIL  # NaN fails

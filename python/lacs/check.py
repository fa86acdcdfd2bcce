"""The Python harness: runs a Python implementation on the golden vectors and
judges its outputs with the C checker (include/lacs/*.h) through ctypes.

Nothing of the checker is written here: liblacs.so lists the cases and
verifies them against their manifest (lacs/cases.h), loads and validates each
vector (lacs/check.h), compares (lacs_check_outputs, the one implementation of
the tolerance model, SPEC.md 11), gives the verdict (lacs/verdict.h), makes
text printable and writes the reports (lacs/output.h). This module imports
the implementation, calls it, turns what it returns into float64 tensors and
hands them to the C side.

An implementation is a function

    fn(op: str, inputs: dict[str, numpy.ndarray], params: dict[str, float][, case=CaseInfo])
        -> dict[str, array-like] | None

inputs are float32 (bf16-tier values widened exactly) and cu_seqlens int64,
each a writable copy of its own, or CPU torch tensors in their stored dtype
(bfloat16 for the BF16 inputs) when fn declares `lacs_inputs = "torch"`; a
function with a parameter `case` is told the case (CaseInfo: id, op, tier,
flags, strict, bf16); params holds every parameter of the case's
metadata (a state-carry case's `split` included: the function returns
`ht_split` too, or `dh_split` for a VJP, whose inputs are the forward's plus
`do` and `dht`); the outputs are named as the goldens without `expected.`
(`o`, `ht`, `y`, `dx`, `dq`, `dh0`, ...), as arrays or torch tensors on any device
(bfloat16 included). Raising NotImplementedError or returning None
skips the case. The function may declare its limits up front with an
attribute `lacs_describe`: a dict (or a function returning one) with the keys
of plugin ABI v1.1's lacs_plugin_describe, "ops", "tiers" and "unsupported"
(lists of names, or None), and "name" (SPEC.md 11.7).

By default the function runs in a worker process (lacs/_worker.py), one per
--jobs, which the harness starts, feeds and, on a timeout, kills with its
whole process group: a crash, an os._exit(0), a hang or an os.chdir there
fails that case only, what it prints goes to stderr, and the verdict is
computed in a process it never ran in. --in-process calls it in the
harness's own process (for a debugger), with only os._exit, os.chdir and
stdout guarded.

The ctypes mirrors of the C structures assume an LP64 ABI (x86-64, aarch64:
8-byte pointers, int64_t and double aligned to 8, int and enums of 4 bytes);
_layout_problems() verifies the offsets ctypes computes against that.
"""

import contextlib
import ctypes
import importlib
import importlib.util
import os
import sys
import time
import traceback

import numpy as np

from .vectors import load_vector  # noqa: F401  (the Python reader, for tests and users)

# LACS_SPEC_VERSION of include/lacs/types.h (the library does not export it;
# tests/python/test_harness.py checks the two agree).
SPEC_VERSION = "1.4"
TIERS = ("fp32", "bf16")

# plugin.h
LACS_F32, LACS_BF16, LACS_F64, LACS_I64 = 0, 1, 2, 3
# types.h
LACS_OK = 0
# check.h
LACS_CHECK_MAX_OUTPUTS = 8
LACS_VECTOR_INPUTS, LACS_VECTOR_GOLDENS, LACS_VECTOR_PARAMS = 0, 1, 2
DESCRIBE_BUFFER = 256
# cases.h
CASE_OK, CASE_INVALID, CASE_MISSING, CASE_UNLISTED = 0, 1, 2, 3
CASES_VERIFY, CASES_READ = 1, 2
CASE_STATE_WORDS = {CASE_INVALID: "cannot be loaded", CASE_MISSING: "missing", CASE_UNLISTED: "not listed"}
# verdict.h
OUTCOME_PASS, OUTCOME_FAIL, OUTCOME_SKIP, OUTCOME_EXCLUDED, OUTCOME_INVALID = 0, 1, 2, 3, 4
OUTCOME_WORDS = ("passed", "failed", "skipped", "not run (declared)", "vector rejected")
# output.h
OUTPUT_REPLACE, OUTPUT_NOT_GOLDEN = 1, 2

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


class LacsParam(ctypes.Structure):
    """lacs_param (plugin.h)."""
    _fields_ = [("name", ctypes.c_char_p), ("value", ctypes.c_double)]


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


class LacsCase(ctypes.Structure):
    """lacs_case_entry (cases.h)."""
    _fields_ = [
        ("path", ctypes.c_char_p),
        ("id", ctypes.c_char_p),
        ("op", ctypes.c_char * 48),
        ("tier", ctypes.c_char * 8),
        ("flags", ctypes.c_char_p),
        ("reason", ctypes.c_char_p),
        ("sha256", ctypes.c_char * 65),
        ("strict", ctypes.c_int),
        ("state", ctypes.c_int),
    ]


# The LP64 layout, worked out by hand from the C rules (each member at the next
# multiple of its alignment, the size a multiple of the largest alignment):
# (structure, sizeof, {field: offset}).
EXPECTED_LAYOUT = (
    (LacsTensor, 32, {"name": 0, "dtype": 8, "ndim": 12, "shape": 16, "data": 24}),
    (LacsParam, 16, {"name": 0, "value": 8}),
    (LacsOutputCheck, 112, {"name": 0, "ratio": 32, "normwise_ratio": 40, "elementwise_ratio": 48,
                            "normwise_error": 56, "worst_block": 64, "worst_element": 72,
                            "expected_value": 80, "actual_value": 88, "allowed_error": 96,
                            "nonfinite_mismatches": 104}),
    # n_outputs (int) at 8 is followed by 4 bytes of padding: outputs hold doubles
    (LacsCheckResult, 16 + 8 * 112, {"ratio": 0, "n_outputs": 8, "outputs": 16}),
    (LacsOpInfo, 64, {"name": 0, "family": 8, "labels": 16, "reference": 24, "required": 32,
                      "optional": 40, "params": 48, "outputs": 56}),
    # op[48] at 16, tier[8] at 64; flags at 72, reason at 80, sha256[65] at 88 ending at 153,
    # strict at 156 (int-aligned), state at 160; the size rounded up to 8
    (LacsCase, 168, {"path": 0, "id": 8, "op": 16, "tier": 64, "flags": 72, "reason": 80, "sha256": 88,
                     "strict": 156, "state": 160}),
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

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


class Installation:
    """Where this package's C side is: `library` (liblacs.so), `source` (how it
    was found, in words), `kind` ("build tree", "prefix" or "system"),
    `root` (the source tree or the prefix, None for "system"), `cli` (the
    `lacs` program beside it, or None) and `vectors` (the core vectors that
    came with it, or None)."""

    def __init__(self, library, source, kind, root):
        self.library, self.source, self.kind, self.root = library, source, kind, root
        self.cli = self.vectors = None
        if kind == "build tree":
            candidates = [os.path.join(os.path.dirname(library), "lacs")]
            vectors = os.path.join(root, "vectors", "core") if root else None
        elif kind == "prefix":
            candidates = [os.path.join(root, "bin", "lacs")]
            vectors = os.path.join(root, "share", "lacs", "vectors", "core")
        else:
            candidates, vectors = [], None
        self.cli = next((c for c in candidates if os.path.isfile(c) and os.access(c, os.X_OK)), None)
        if vectors and os.path.isdir(vectors):
            self.vectors = vectors

    def describe(self):
        return f"{self.library} ({self.source})"


def _source_tree():
    """The lacs source tree this package sits in (python/lacs/../..), or None
    when it is installed elsewhere (a virtual environment's site-packages)."""
    root = os.path.dirname(os.path.dirname(PACKAGE_DIR))
    return root if os.path.isfile(os.path.join(root, "include", "lacs", "types.h")) else None


def _installed_from():
    """The source tree an installed copy was built from (setup.py writes
    lacs/_installed.py), or None."""
    try:
        from ._installed import SOURCE_TREE
    except ImportError:
        return None
    return SOURCE_TREE if SOURCE_TREE and os.path.isdir(SOURCE_TREE) else None


def _pkg_config_libdir():
    """pkg-config's libdir for lacs (make install writes lib/pkgconfig/lacs.pc), or None."""
    import shutil
    import subprocess
    if not shutil.which("pkg-config"):
        return None
    try:
        run = subprocess.run(["pkg-config", "--variable=libdir", "lacs"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return run.stdout.strip() or None if run.returncode == 0 else None


def find_installation():
    """The liblacs.so this package uses, looked for in this order:
      1. $LACS_LIBRARY (a file), or $LACS_BUILD/liblacs.so (a build directory);
      2. the build tree, when the package runs from a lacs source tree
         (python/lacs/../../build/liblacs.so);
      3. an installed prefix (`make install PREFIX=...`): $LACS_PREFIX/lib, the
         libdir pkg-config gives for lacs (PKG_CONFIG_PATH), then the prefix of
         this Python environment (sys.prefix/lib, e.g. PREFIX=$VIRTUAL_ENV);
      4. the build tree of the source tree an installed copy was built from
         (`pip install ./python`: setup.py records it in lacs/_installed.py);
      5. the dynamic loader's search path (liblacs.so.1; /usr/local/lib after
         `make install`).
    HarnessError naming every place looked at when none has it."""
    looked = []
    forced = os.environ.get("LACS_LIBRARY")
    if forced:
        if not os.path.isfile(forced):
            raise HarnessError(f"{forced} (LACS_LIBRARY) not found")
        return Installation(os.path.abspath(forced), "LACS_LIBRARY", "system", None)
    build = os.environ.get("LACS_BUILD")
    if build:
        path = os.path.join(build, "liblacs.so")
        if not os.path.isfile(path):
            raise HarnessError(f"{path} not found: run make")
        tree = os.path.dirname(os.path.abspath(build))
        root = tree if os.path.isfile(os.path.join(tree, "include", "lacs", "types.h")) else _source_tree()
        return Installation(os.path.abspath(path), f"LACS_BUILD, the build tree of {root}" if root else "LACS_BUILD",
                            "build tree", root)
    tree = _source_tree()
    if tree:
        path = os.path.join(tree, "build", "liblacs.so")
        if os.path.isfile(path):
            return Installation(path, f"the build tree of {tree}", "build tree", tree)
        looked.append(path + " (run make)")
    prefixes = []
    if os.environ.get("LACS_PREFIX"):
        prefixes.append((os.environ["LACS_PREFIX"], "LACS_PREFIX"))
    libdir = _pkg_config_libdir()
    if libdir:
        prefixes.append((os.path.dirname(libdir.rstrip("/")), "pkg-config lacs"))
    prefixes.append((sys.prefix, "this Python environment's prefix"))
    for prefix, how in prefixes:
        path = os.path.join(prefix, "lib", "liblacs.so")
        if os.path.isfile(path):
            return Installation(os.path.abspath(path), f"the prefix {os.path.abspath(prefix)}, from {how}", "prefix",
                                os.path.abspath(prefix))
        looked.append(f"{path} ({how})")
    built_from = _installed_from()
    if built_from and built_from != tree:
        path = os.path.join(built_from, "build", "liblacs.so")
        if os.path.isfile(path):
            return Installation(path, f"the build tree of {built_from}, which this package was installed from",
                                "build tree", built_from)
        looked.append(path + " (the tree this package was installed from)")
    import ctypes.util
    name = ctypes.util.find_library("lacs")
    if name:
        return Installation(name, "the dynamic loader's search path", "system", None)
    looked.append("the dynamic loader's search path")
    raise HarnessError("liblacs.so not found: build it (make) or install it (make install PREFIX=...), or set "
                       "LACS_BUILD, LACS_PREFIX or LACS_LIBRARY; looked in " + "; ".join(looked))


def library_path():
    """The path of the liblacs.so this package uses (find_installation)."""
    return find_installation().library


def _bytes(text):
    """A str (file names with surrogate escapes included) or bytes, as the C side takes it."""
    if text is None:
        return None
    return text if isinstance(text, bytes) else os.fsencode(text)


class Library:
    """liblacs.so with the signatures of the functions the harness calls."""

    def __init__(self, path=None):
        self.installation = None
        if path is None:
            self.installation = find_installation()
            path = self.installation.library
        if os.sep in path and not os.path.isfile(path):
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
        c_char_p, c_int, c_void_p, c_size_t = ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t

        def bind(name, argtypes, restype):
            function = getattr(lib, name)
            function.argtypes = argtypes
            function.restype = restype

        bind("lacs_last_error", [], c_char_p)
        bind("lacs_vector_open_verified", [c_char_p, c_char_p], c_void_p)
        bind("lacs_vector_close", [c_void_p], None)
        bind("lacs_vector_count", [c_void_p, c_int], c_int)
        bind("lacs_vector_tensor", [c_void_p, c_int, c_int, ctypes.POINTER(LacsTensor)], c_int)
        bind("lacs_vector_param", [c_void_p, c_int, ctypes.POINTER(LacsParam)], c_int)
        bind("lacs_vector_text", [c_void_p, c_char_p], c_char_p)
        bind("lacs_vector_is_strict", [c_void_p], c_int)
        bind("lacs_check_outputs", [c_void_p, ctypes.POINTER(LacsTensor), c_int, ctypes.POINTER(LacsCheckResult)],
             c_int)
        bind("lacs_describe_element", [c_void_p, c_int, ctypes.c_int64, c_char_p, c_size_t], c_char_p)
        bind("lacs_check_error_over_time", [c_void_p, c_int, ctypes.POINTER(LacsTensor), ctypes.POINTER(ctypes.c_double)],
             c_int)
        bind("lacs_ops", [ctypes.POINTER(c_int)], ctypes.POINTER(LacsOpInfo))
        bind("lacs_cases_open", [c_char_p, c_char_p, c_char_p, ctypes.c_uint], c_void_p)
        bind("lacs_case_entry_open", [ctypes.POINTER(LacsCase)], c_void_p)
        bind("lacs_cases_close", [c_void_p], None)
        bind("lacs_cases_count", [c_void_p], c_int)
        bind("lacs_cases_get", [c_void_p, c_int], ctypes.POINTER(LacsCase))
        bind("lacs_cases_manifest", [c_void_p], c_char_p)
        bind("lacs_printable", [c_char_p, c_char_p, c_size_t], c_char_p)
        bind("lacs_output_file_check", [c_char_p, c_char_p, ctypes.c_uint], c_int)
        bind("lacs_output_file_write", [c_char_p, c_char_p, c_size_t, c_char_p, ctypes.c_uint], c_int)
        bind("lacs_verdict_new", [c_int], c_void_p)
        bind("lacs_verdict_free", [c_void_p], None)
        bind("lacs_verdict_declare", [c_void_p, c_char_p, c_char_p, c_char_p, c_char_p], c_int)
        bind("lacs_verdict_excludes", [c_void_p, c_char_p, c_char_p, c_char_p, c_char_p, c_size_t], c_int)
        bind("lacs_verdict_add", [c_void_p, c_char_p, c_char_p, c_char_p, c_char_p, c_int, c_int], c_int)
        bind("lacs_verdict_scope", [c_void_p, c_char_p], c_int)
        for name in ("lacs_verdict_table", "lacs_verdict_citation", "lacs_verdict_json"):
            bind(name, [c_void_p], c_void_p)  # malloc'd text: read, then lacs_verdict_free_text
        bind("lacs_verdict_exit_status", [c_void_p], c_int)
        bind("lacs_report_html", [c_char_p], c_void_p)  # malloc'd: read, then lacs_report_free
        bind("lacs_report_free", [c_void_p], None)
        bind("lacs_verdict_free_text", [c_void_p], None)

    def last_error(self):
        message = self.lib.lacs_last_error()
        return self.printable(message) if message else "unknown error"

    def printable(self, text):
        """Text (str or bytes) as lacs_printable gives it: control characters,
        terminal escapes and invalid UTF-8 escaped."""
        if text is None:
            return ""
        raw = _bytes(text)
        size = 4 * len(raw) + 8
        buffer = ctypes.create_string_buffer(size)
        self.lib.lacs_printable(raw, buffer, size)
        return buffer.value.decode("utf-8")

    def op_names(self):
        """The ops of the op table (lacs_ops), in table order."""
        count = ctypes.c_int(0)
        table = self.lib.lacs_ops(ctypes.byref(count))
        return [table[i].name.decode("utf-8") for i in range(count.value)]

    # -- vectors

    def open_case(self, case):
        """lacs_case_entry_open: the case's vector, verified against its manifest hash
        and checked to be the case listed; HarnessError with the reason."""
        c = LacsCase(path=case.raw_path, id=case.raw_id, op=case.op.encode(), tier=case.tier.encode(),
                     flags=" ".join(case.flags).encode(), reason=b"", sha256=case.sha256.encode(), strict=0,
                     state=CASE_OK)
        handle = self.lib.lacs_case_entry_open(ctypes.byref(c))
        if not handle:
            raise HarnessError(self.last_error())
        return handle

    def open_vector(self, path, sha256=None):
        """A lacs_vector pointer, verified against sha256 when given (close it
        with close_vector); HarnessError with the checker's message (which names
        the file and the kind) if it is rejected."""
        handle = self.lib.lacs_vector_open_verified(_bytes(path), sha256.encode() if sha256 else None)
        if not handle:
            raise HarnessError(self.last_error())
        return handle

    def close_vector(self, handle):
        self.lib.lacs_vector_close(handle)

    def vector_text(self, handle, field):
        value = self.lib.lacs_vector_text(handle, field.encode())
        return value.decode("utf-8", "surrogateescape") if value is not None else None

    def vector_tensors(self, handle, which, bf16_names=None):
        """[(name, numpy array as the function sees it)]: F32 -> float32, BF16
        -> float32 (exact), I64 -> int64, F64 -> float64; fresh copies. The
        names of the BF16 tensors are appended to bf16_names when given."""
        tensors = []
        for i in range(self.lib.lacs_vector_count(handle, which)):
            t = LacsTensor()
            if self.lib.lacs_vector_tensor(handle, which, i, ctypes.byref(t)) != LACS_OK:
                raise HarnessError(self.last_error())
            shape = tuple(t.shape[d] for d in range(t.ndim))
            count = int(np.prod(shape, dtype=np.int64))
            item = {LACS_F32: 4, LACS_BF16: 2, LACS_F64: 8, LACS_I64: 8}[t.dtype]
            raw = ctypes.string_at(t.data, count * item) if count else b""
            if t.dtype == LACS_F32:
                array = np.frombuffer(raw, dtype="<f4").astype(np.float32)
            elif t.dtype == LACS_BF16:
                array = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << np.uint32(16)).view(np.float32)
                if bf16_names is not None:
                    bf16_names.append(t.name.decode("utf-8"))
            elif t.dtype == LACS_F64:
                array = np.frombuffer(raw, dtype="<f8").astype(np.float64)
            else:
                array = np.frombuffer(raw, dtype="<i8").astype(np.int64)
            tensors.append((t.name.decode("utf-8"), array.reshape(shape).copy()))
        return tensors

    def vector_params(self, handle):
        params = {}
        for i in range(self.lib.lacs_vector_count(handle, LACS_VECTOR_PARAMS)):
            p = LacsParam()
            self.lib.lacs_vector_param(handle, i, ctypes.byref(p))
            params[p.name.decode("utf-8")] = float(p.value)
        return params

    def describe_element(self, handle, output_index, element_index):
        buffer = ctypes.create_string_buffer(DESCRIBE_BUFFER)
        self.lib.lacs_describe_element(handle, output_index, element_index, buffer, DESCRIBE_BUFFER)
        return buffer.value.decode("utf-8", "replace")

    @staticmethod
    def _tensors(outputs):
        """(lacs_tensor array, what keeps its memory alive) for {name: contiguous float64 array}."""
        n = len(outputs)
        tensors = (LacsTensor * max(n, 1))()
        keep_alive = []
        for i, (name, array) in enumerate(outputs.items()):
            name_bytes = name.encode("utf-8")
            shape = (ctypes.c_int64 * max(array.ndim, 1))(*array.shape)
            keep_alive.extend((name_bytes, shape, array))
            tensors[i] = LacsTensor(name_bytes, LACS_F64, array.ndim, shape,
                                    array.ctypes.data_as(ctypes.c_void_p))
        return tensors, keep_alive

    def check_outputs(self, handle, outputs):
        """lacs_check_outputs on {name: contiguous float64 array}. Returns the
        LacsCheckResult, or raises HarnessError with the checker's message."""
        tensors, keep_alive = self._tensors(outputs)
        result = LacsCheckResult()
        status = self.lib.lacs_check_outputs(handle, tensors, len(outputs), ctypes.byref(result))
        del keep_alive
        if status != LACS_OK:
            raise HarnessError(self.last_error())
        return result

    def error_over_time(self, handle, outputs, index, steps):
        """lacs_check_error_over_time: the worst elementwise ratio at each of the
        `steps` time steps of output `index` (outputs in the goldens' order), as
        a list; None when the output is not of the sequence layout."""
        tensors, keep_alive = self._tensors(outputs)
        ratios = (ctypes.c_double * max(steps, 1))()
        status = self.lib.lacs_check_error_over_time(handle, index, tensors, ratios)
        del keep_alive
        return list(ratios[:steps]) if status == LACS_OK else None

    # -- files

    def check_output_file(self, path, vectors=None):
        """HarnessError unless a report may be written to path (lacs_output_file_check)."""
        if self.lib.lacs_output_file_check(_bytes(path), _bytes(vectors), OUTPUT_REPLACE | OUTPUT_NOT_GOLDEN) != 0:
            raise HarnessError(f"cannot write the report: {self.last_error()}")

    def write_output_file(self, path, what, text, vectors=None):
        data = text.encode("utf-8")
        if self.lib.lacs_output_file_write(_bytes(path), data, len(data), _bytes(vectors),
                                           OUTPUT_REPLACE | OUTPUT_NOT_GOLDEN) != 0:
            raise HarnessError(f"cannot write the {what} report: {self.last_error()}")

    def report_html(self, report_json):
        """The conformance report page (lacs/report.h) of a JSON report's text."""
        pointer = self.lib.lacs_report_html(report_json.encode("utf-8"))
        if not pointer:
            raise HarnessError(f"cannot render the HTML report: {self.last_error()}")
        try:
            return ctypes.string_at(pointer).decode("utf-8", "replace")
        finally:
            self.lib.lacs_report_free(pointer)

    # -- the verdict

    def taken_text(self, pointer):
        """A malloc'd C string, read and freed."""
        if not pointer:
            return ""
        try:
            return ctypes.string_at(pointer).decode("utf-8", "replace")
        finally:
            self.lib.lacs_verdict_free_text(pointer)


def _words(value):
    """A declaration's list: None, or a space-separated string of names."""
    if value is None:
        return None
    if isinstance(value, str):
        value = value.replace(",", " ").split()
    return " ".join(str(v) for v in value)


class Verdict:
    """lacs_verdict (verdict.h) through the library: the one verdict of `lacs
    check` and of this harness."""

    def __init__(self, library, strict_level=False):
        self.library = library
        self.handle = library.lib.lacs_verdict_new(1 if strict_level else 0)
        if not self.handle:
            raise HarnessError("out of memory")

    def close(self):
        if self.handle:
            self.library.lib.lacs_verdict_free(self.handle)
            self.handle = None

    def declare(self, description):
        """A function's lacs_describe: {"name", "ops", "tiers", "unsupported"}."""
        def field(key):
            value = _words(description.get(key))
            return value.encode("utf-8") if value else None
        name = description.get("name")
        self.library.lib.lacs_verdict_declare(self.handle, str(name).encode("utf-8") if name else None,
                                              field("ops"), field("tiers"), field("unsupported"))

    def excludes(self, case):
        why = ctypes.create_string_buffer(1024)
        if self.library.lib.lacs_verdict_excludes(self.handle, case.op.encode(), case.tier.encode(),
                                                  " ".join(case.flags).encode(), why, 1024):
            return why.value.decode("utf-8", "replace")
        return None

    def add(self, result):
        case = result.case
        self.library.lib.lacs_verdict_add(self.handle, case.op.encode(), case.tier.encode(),
                                          case.id.encode("utf-8"), " ".join(case.flags).encode(),
                                          1 if result.strict else 0, result.outcome)

    def scope(self, text):
        self.library.lib.lacs_verdict_scope(self.handle, text.encode("utf-8"))

    def table(self):
        return self.library.taken_text(self.library.lib.lacs_verdict_table(self.handle))

    def citation(self):
        return self.library.taken_text(self.library.lib.lacs_verdict_citation(self.handle))

    def json_text(self):
        return self.library.taken_text(self.library.lib.lacs_verdict_json(self.handle))

    def exit_status(self):
        return self.library.lib.lacs_verdict_exit_status(self.handle)


# ---- what the function is given ----

class CaseInfo:
    """What a function taking a parameter `case` is told about the case it
    runs: id, op, tier ("fp32" or "bf16"), flags (a tuple of names, SPEC.md
    10.5), strict (the case's level, SPEC.md 11.7) and bf16 (the names of the
    inputs stored as bfloat16: in the bf16 tier, q, k, v and the gates; their
    NumPy arrays are float32 holding exactly those values)."""

    __slots__ = ("id", "op", "tier", "flags", "strict", "bf16")

    def __init__(self, id, op, tier, flags, strict=False, bf16=()):
        self.id, self.op, self.tier = id, op, tier
        self.flags, self.strict, self.bf16 = tuple(flags), bool(strict), tuple(bf16)

    def as_dict(self):
        return {name: list(v) if isinstance(v, tuple) else v for name in self.__slots__ for v in [getattr(self, name)]}

    @classmethod
    def from_dict(cls, d):
        return cls(d["id"], d["op"], d["tier"], d.get("flags", ()), d.get("strict", False), d.get("bf16", ()))

    def __repr__(self):
        return f"CaseInfo(id={self.id!r}, tier={self.tier!r}, flags={list(self.flags)!r})"


INPUT_KINDS = ("numpy", "torch")


def input_kind(fn):
    """What fn receives: "numpy" (the default) or "torch" (its attribute
    `lacs_inputs`)."""
    kind = getattr(fn, "lacs_inputs", None)
    return "numpy" if kind is None else kind


def check_input_kind(fn):
    """HarnessError unless fn's lacs_inputs is None, "numpy" or "torch" (and
    torch imports when it asks for it)."""
    kind = input_kind(fn)
    if kind not in INPUT_KINDS:
        raise HarnessError(f"lacs_inputs must be 'numpy' or 'torch', not {kind!r}")
    if kind == "torch":
        try:
            import torch  # noqa: F401
        except Exception as e:  # noqa: BLE001 - any import failure is the user's environment's
            raise HarnessError(f"the implementation asks for torch inputs (lacs_inputs = 'torch') but torch does "
                               f"not import: {_summary(e)}") from None


def takes_case(fn):
    """Whether fn takes a parameter named `case` (or **kwargs)."""
    import inspect
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "case" and p.kind != p.VAR_POSITIONAL or p.kind == p.VAR_KEYWORD for p in parameters)


def torch_inputs(inputs, bf16=()):
    """The inputs as CPU torch tensors in their stored dtype: torch.bfloat16
    for the names in bf16 (exact: the float32 values are bfloat16 values),
    float32 and int64 otherwise."""
    import torch
    tensors = {}
    for name, array in inputs.items():
        tensor = torch.from_numpy(np.ascontiguousarray(array))
        tensors[name] = tensor.to(torch.bfloat16) if name in bf16 else tensor
    return tensors


# ---- the implementation ----

def load_impl(spec):
    """The function named by `python:FILE_OR_MODULE:FUNCTION`. FILE is a path
    (it ends in .py or names an existing file; its directory goes first on
    sys.path, as when running it as a script); otherwise a module name for
    importlib.import_module."""
    where, function = parse_impl(spec)
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


def parse_impl(spec):
    """(FILE_OR_MODULE, FUNCTION) of `python:FILE_OR_MODULE:FUNCTION`."""
    prefix = "python:"
    if not spec.startswith(prefix):
        raise HarnessError(f"unsupported implementation {spec!r}: the Python harness runs "
                           "python:FILE_OR_MODULE:FUNCTION (builtin:* and PATH.so are for build/lacs check)")
    where, sep, function = spec[len(prefix):].rpartition(":")
    if not sep or not where or not function:
        raise HarnessError(f"bad implementation {spec!r}: expected python:FILE_OR_MODULE:FUNCTION")
    return where, function


def describe_impl(fn):
    """The function's declaration (its `lacs_describe` attribute: a dict or a
    function returning one), checked; None when it declares nothing. Its
    `lacs_inputs` is checked here too."""
    check_input_kind(fn)
    description = getattr(fn, "lacs_describe", None)
    if description is None:
        return None
    try:
        if callable(description):
            description = description()
    except Exception as e:
        raise HarnessError(f"the implementation's lacs_describe raised {_summary(e)}") from None
    if description is None:
        return None
    if not isinstance(description, dict) or set(description) - {"name", "ops", "tiers", "unsupported"}:
        raise HarnessError("lacs_describe must be a dict with the keys name, ops, tiers, unsupported (SPEC.md 11.7)")
    for key in ("ops", "tiers", "unsupported"):
        value = description.get(key)
        if value is not None and not (isinstance(value, str) or
                                      (isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value))):
            raise HarnessError(f"lacs_describe[{key!r}] must be a list of names or None")
    return description


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
    """One case of a vectors directory, as lacs_cases_find lists it: path (a
    str, surrogate-escaped where the file name is not UTF-8), id (printable),
    op, tier, flags (list), reason (printable: the metadata's, or why the case
    is not OK), sha256 (the manifest's, "" unverified), strict, state
    (CASE_OK, CASE_INVALID, CASE_MISSING, CASE_UNLISTED), and error (None when
    OK, else the reason)."""

    def __init__(self, library, c):
        self.path = os.fsdecode(c.path)
        self.raw_path, self.raw_id = bytes(c.path), bytes(c.id)
        self.id = library.printable(c.id)
        self.op = c.op.decode("utf-8", "replace")
        self.tier = c.tier.decode("utf-8", "replace")
        self.flags = (c.flags or b"").decode("utf-8", "replace").split()
        self.reason = library.printable(c.reason)
        self.sha256 = c.sha256.decode("ascii")
        self.strict = bool(c.strict)
        self.state = c.state
        self.error = None if self.state == CASE_OK else self.reason


def vectors_dir(given, installation=None):
    """The vectors directory: `given` (must be one), else ./vectors/core, else
    $LACS_VECTORS, else the core vectors installed with the library
    (installation.vectors: the source tree's vectors/core, or
    PREFIX/share/lacs/vectors/core)."""
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
    if installation is not None and installation.vectors:
        return installation.vectors
    raise HarnessError("no vectors directory: ./vectors/core does not exist, LACS_VECTORS is not set and the "
                       "library came without vectors (use --vectors DIR)")


def check_filters(library, ops, tier):
    """HarnessError for an op not in the op table or a tier not fp32/bf16."""
    known = library.op_names()
    for op in ops or ():
        if op not in known:
            raise HarnessError(f"unknown op '{op}' (known ops: {', '.join(known)})")
    if tier is not None and tier not in TIERS:
        raise HarnessError(f"unknown tier '{tier}' (tiers: {', '.join(TIERS)})")


def find_cases(library, directory, ops=None, tier=None, verify=True, read=False):
    """(cases, manifest path or None): lacs_cases_find's list for the ops and
    tier, sorted by id; with `verify`, checked against the manifest covering
    the directory (HarnessError when there is none); with `read` (or without
    `verify`), every file read once for its metadata (`list`)."""
    mode = (CASES_VERIFY if verify else 0) | (CASES_READ if read or not verify else 0)
    handle = library.lib.lacs_cases_open(_bytes(directory), ",".join(ops or ()).encode(),
                                         tier.encode() if tier else None, mode)
    if not handle:
        raise HarnessError(library.last_error())
    try:
        cases = [Case(library, library.lib.lacs_cases_get(handle, i).contents)
                 for i in range(library.lib.lacs_cases_count(handle))]
        manifest = library.lib.lacs_cases_manifest(handle)
        return cases, (os.fsdecode(manifest) if manifest else None)
    finally:
        library.lib.lacs_cases_close(handle)


def shard(cases, index, count):
    """The cases whose position is congruent to index - 1 modulo count."""
    return [c for i, c in enumerate(cases) if i % count == index - 1]


# ---- one case ----

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
    """status (PASS, FAIL, SKIP), outcome (OUTCOME_*: the verdict's), strict,
    ratio (the worst, None if not compared), outputs (OutputResult list),
    message (None or one printable line), traceback (text or None), seconds."""

    def __init__(self, case):
        self.case = case
        self.status = FAIL
        self.outcome = OUTCOME_FAIL
        self.strict = case.strict
        self.ratio = None
        self.outputs = []
        self.message = None
        self.traceback = None
        self.seconds = 0.0
        self.over_time = []  # [(output name, [ratio per t])] of a failure, for the HTML report

    def fail(self, message, outcome=OUTCOME_FAIL):
        self.status, self.outcome, self.message = FAIL, outcome, message

    def skip(self, message, outcome=OUTCOME_SKIP):
        self.status, self.outcome, self.message = SKIP, outcome, message


def to_float64(name, value):
    """An output as a C-contiguous float64 array; ValueError naming the output
    if it cannot be one, whatever went wrong (a torch meta tensor, a .cpu()
    that raises after an asynchronous CUDA fault). Torch tensors (bfloat16
    included) go through .detach().cpu(); anything else through
    numpy.asarray (__array__)."""
    try:
        if hasattr(value, "detach") and hasattr(value, "cpu"):
            value = value.detach().cpu()
            try:
                value = value.numpy()
            except (TypeError, RuntimeError):  # bfloat16 and other dtypes NumPy lacks: widen exactly
                value = value.double().numpy()
        array = np.asarray(value)
    except Exception as e:  # noqa: BLE001 - any failure here is the implementation's, and fails its case
        raise ValueError(f"output '{name}' is not an array ({_summary(e)})") from None
    if array.dtype.kind not in "fiu":
        raise ValueError(f"output '{name}' is not a real numeric array (dtype {array.dtype})")
    return np.ascontiguousarray(array, dtype=np.float64)


_to_float64 = to_float64  # the name older tests use


def _shape_text(shape):
    return "[" + ", ".join(str(d) for d in shape) + "]"


def outputs_problem(outputs, expected):
    """A one-line message if the output names or shapes differ from the
    goldens' ({name: shape}), else None."""
    missing = [n for n in expected if n not in outputs]
    if missing:
        return "missing output " + ", ".join(f"'{n}' {_shape_text(expected[n])}" for n in missing)
    extra = [n for n in outputs if n not in expected]
    if extra:
        return (f"extra output {', '.join(repr(n) for n in extra)}: the outputs of this case are "
                f"{', '.join(expected)}")
    for name, shape in expected.items():
        if tuple(outputs[name].shape) != tuple(shape):
            return f"output '{name}' has shape {_shape_text(outputs[name].shape)}, expected {_shape_text(shape)}"
    return None


class Request:
    """What the function is called with for one case: op, inputs, params; and
    what the checker keeps: the vector handle and the goldens' shapes."""

    def __init__(self, library, case):
        self.library = library
        self.case = case
        self.handle = library.open_case(case)  # verified as it is loaded: what runs is what was hashed
        try:
            self.op = library.vector_text(self.handle, "op")
            self.bf16 = []
            self.inputs = dict(library.vector_tensors(self.handle, LACS_VECTOR_INPUTS, self.bf16))
            self.params = library.vector_params(self.handle)
            self.expected = {name: array.shape for name, array in
                             library.vector_tensors(self.handle, LACS_VECTOR_GOLDENS)}
            self.strict = bool(library.lib.lacs_vector_is_strict(self.handle))
            self.info = CaseInfo(case.id, self.op, case.tier, case.flags, self.strict, self.bf16)
        except BaseException:
            self.close()
            raise

    def close(self):
        if self.handle:
            self.library.close_vector(self.handle)
            self.handle = None


def judge(library, request, outputs, result):
    """Compares float64 outputs with the goldens (the C checker) into result."""
    problem = outputs_problem(outputs, request.expected)
    if problem is not None:
        result.fail(library.printable(problem))
        return
    try:
        check = library.check_outputs(request.handle, outputs)
    except HarnessError as e:
        result.fail(str(e))
        return
    names = list(request.expected)
    for i in range(check.n_outputs):
        output = check.outputs[i]
        name = output.name.decode("utf-8", "replace")
        size = int(np.prod(request.expected[name], dtype=np.int64)) if name in request.expected else 0
        if 0 <= output.worst_element < size:
            where = library.describe_element(request.handle, names.index(name), output.worst_element)
        else:
            where = f"{name} (no element)"
        result.outputs.append(OutputResult(output, where))
    result.ratio = check.ratio
    if check.ratio <= 1.0:  # NaN fails
        result.status, result.outcome = PASS, OUTCOME_PASS
    else:
        result.fail(None)


def keep_over_time(library, request, outputs, result):
    """For a failed case whose outputs were compared: the error over time of
    each output of the sequence layout, into result.over_time."""
    if result.status != FAIL or not result.outputs or not isinstance(outputs, dict):
        return
    ordered = {name: outputs[name] for name in request.expected if name in outputs}
    if len(ordered) != len(request.expected):
        return
    for index, (name, shape) in enumerate(request.expected.items()):
        if len(shape) == 4 and shape[1] > 0:
            ratios = library.error_over_time(request.handle, ordered, index, int(max(shape)))
            if ratios is not None:
                result.over_time.append((name, ratios[:shape[1]]))


def prepare(library, case, verdict):
    """(result, request): a CaseResult, and the Request to run, or None when the
    case is not run (a rejected vector; excluded by the declaration)."""
    result = CaseResult(case)
    if case.state != CASE_OK:
        result.fail(case.reason, OUTCOME_INVALID)
        return result, None
    why = verdict.excludes(case) if verdict is not None else None
    if why:
        result.skip(why, OUTCOME_EXCLUDED)
        return result, None
    try:
        request = Request(library, case)
    except HarnessError as e:
        result.fail(str(e), OUTCOME_INVALID)
        return result, None
    result.strict = request.strict
    return result, request


class _ExitCalled(BaseException):
    """os._exit called by the function in the harness's process (--in-process)."""


@contextlib.contextmanager
def _guarded_call():
    """In the harness's process: what the function prints goes to stderr, the
    working directory comes back, and os._exit raises instead of ending the
    run without a report."""
    sys.stdout.flush()
    saved_stdout_fd = os.dup(1)
    saved_stdout, saved_cwd, saved_exit = sys.stdout, os.getcwd(), os._exit
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def exit_called(status):
        raise _ExitCalled(status)
    os._exit = exit_called
    try:
        yield
    finally:
        os._exit = saved_exit
        sys.stdout.flush()
        sys.stdout = saved_stdout
        os.dup2(saved_stdout_fd, 1)
        os.close(saved_stdout_fd)
        with contextlib.suppress(OSError):
            os.chdir(saved_cwd)


def call_function(fn, op, inputs, params, info=None):
    """fn's outputs as {name: float64 array}, or (status, message, traceback)
    when it skipped or failed. The inputs are NumPy arrays, or torch tensors
    when fn declares `lacs_inputs = "torch"`; fn gets `case=info` when it
    takes a parameter `case`. Never raises for what the function does;
    KeyboardInterrupt goes through. Used in the worker and --in-process."""
    try:
        if input_kind(fn) == "torch":
            inputs = torch_inputs(inputs, info.bf16 if info is not None else ())
        if info is not None and takes_case(fn):
            returned = fn(op, inputs, params, case=info)
        else:
            returned = fn(op, inputs, params)
    except NotImplementedError as e:
        return (SKIP, f"unsupported by the implementation ({_summary(e)})", None)
    except _ExitCalled as e:
        return (FAIL, f"the implementation called os._exit({e.args[0]})", None)
    except (Exception, SystemExit) as e:
        # from the implementation's frame on: the harness's own frame says nothing
        return (FAIL, _summary(e), "".join(traceback.format_exception(type(e), e, e.__traceback__.tb_next)))
    if returned is None:
        return (SKIP, "unsupported by the implementation (it returned None)", None)
    if not isinstance(returned, dict):
        return (FAIL, f"the implementation returned {type(returned).__name__}, expected a dict of "
                      "output name -> array", None)
    outputs = {}
    for name, value in returned.items():
        if not isinstance(name, str):
            return (FAIL, f"output name {name!r} is not a string", None)
        try:
            outputs[name] = to_float64(name, value)
        except ValueError as e:
            return (FAIL, str(e), None)
        except _ExitCalled as e:
            return (FAIL, f"the implementation called os._exit({e.args[0]})", None)
    return outputs


def settle(library, request, answer, result):
    """Turns call_function's answer into result (judging outputs)."""
    if isinstance(answer, dict):
        judge(library, request, answer, result)
        return
    status, message, trace = answer
    message = library.printable(message)
    if status == SKIP:
        result.skip(message)
    else:
        result.fail(message)
        result.traceback = trace


def run_case(library, fn, case, verdict=None, over_time=False):
    """Runs `fn` on `case` in this process and judges its outputs (the
    --in-process path, and tests). Never raises for what the implementation
    does; KeyboardInterrupt goes through."""
    start = time.perf_counter()
    result, request = prepare(library, case, verdict)
    try:
        if request is not None:
            with _guarded_call():
                answer = call_function(fn, request.op, request.inputs, request.params, request.info)
            settle(library, request, answer, result)
            if over_time:
                keep_over_time(library, request, answer, result)
    finally:
        if request is not None:
            request.close()
        result.seconds = time.perf_counter() - start
    return result

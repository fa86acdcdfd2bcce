"""Reading and writing safetensors files (SPEC.md 10.1, 10.2), NumPy only.

The Python reader of the golden vectors; the C reader is core/safetensors.c.
Both reject a malformed file with the same kind, checked in this order, so
that every malformed file maps to exactly one kind:

  truncated       the file is shorter than 8 bytes
  header-length   the header length N is more than size - 8 or more than 100 MB
  header-utf8     the N header bytes are not strict UTF-8
  header-json     the header is not one JSON object (NaN and Infinity are not
                  JSON; an escaped lone surrogate or U+0000 is refused too), or
                  a top-level entry other than __metadata__ is not an object
                  (nesting deeper than 1000 is refused, as cJSON does)
  duplicate-name  any JSON object in the header has two equal keys (after
                  escapes are decoded)
  per tensor, in header order:
    dtype         "dtype" is not one of F64 F32 BF16 I64
    shape         "shape" is not a list of at most 8 JSON integers in
                  [0, 2^53), or the exact byte count (product times element
                  size) is 2^64 or more (a zero dimension makes it 0)
    offsets       "data_offsets" is not two JSON integers in [0, 2^53) with
                  begin <= end <= data length
    byte-count    end - begin is not the element count times the element size
  overlap         two tensors share a byte (tensors with no bytes share none)
  gap             a byte of the data buffer is covered by no tensor
  metadata        __metadata__ is present and is not an object of strings

A JSON integer is a number written without a fraction or an exponent: 4.0
and 4e0 are not integers here (as for the safetensors library, whose shapes
are usize). The bound 2^53 is that of the C reader, whose JSON numbers are
doubles; no real file comes near it. Unknown keys in a tensor entry are
ignored, as the safetensors library does.
"""

import hashlib
import json
import os
import re
import struct
import sys

import numpy as np

KINDS = (
    "truncated",
    "header-length",
    "header-utf8",
    "header-json",
    "duplicate-name",
    "dtype",
    "shape",
    "offsets",
    "byte-count",
    "overlap",
    "gap",
    "metadata",
)

DTYPE_SIZES = {"F64": 8, "I64": 8, "F32": 4, "BF16": 2}
MAX_HEADER = 100_000_000
MAX_DIMS = 8
METADATA_KEY = "__metadata__"

_U64_LIMIT = 1 << 64
_I64_LIMIT = 1 << 63
INTEGER_LIMIT = 1 << 53  # shapes and offsets are below this (what a double holds exactly)
MAX_DEPTH = 1000  # JSON nesting (cJSON's CJSON_NESTING_LIMIT)


class FormatError(Exception):
    """A malformed safetensors file: str(e) == f"{path}: {kind}: {detail}"."""

    def __init__(self, path, kind, detail):
        if kind not in KINDS:
            raise ValueError(f"unknown format error kind {kind!r}")
        self.path = path
        self.kind = kind
        self.detail = detail
        super().__init__(f"{path}: {kind}: {detail}")

    def __str__(self):
        return f"{self.path}: {self.kind}: {self.detail}"


class Tensor:
    """One tensor: name, dtype ("F64", "F32", "BF16", "I64"), shape (a tuple
    of ints), raw (its little-endian bytes, as stored)."""

    __slots__ = ("name", "dtype", "shape", "raw")

    def __init__(self, name, dtype, shape, raw):
        self.name = name
        self.dtype = dtype
        self.shape = tuple(shape)
        self.raw = bytes(raw)

    @property
    def count(self):
        n = 1
        for d in self.shape:
            n *= d
        return n

    def array(self):
        """The values as a new NumPy array in native byte order: F64 ->
        float64, F32 -> float32, BF16 -> float32 (exact: the 16 bits shifted
        up by 16), I64 -> int64."""
        if self.dtype == "F64":
            a = np.frombuffer(self.raw, dtype="<f8").astype(np.float64)
        elif self.dtype == "F32":
            a = np.frombuffer(self.raw, dtype="<f4").astype(np.float32)
        elif self.dtype == "BF16":
            bits = np.frombuffer(self.raw, dtype="<u2").astype(np.uint32) << np.uint32(16)
            a = bits.view(np.float32)
        elif self.dtype == "I64":
            a = np.frombuffer(self.raw, dtype="<i8").astype(np.int64)
        else:  # pragma: no cover - the reader admits no other dtype
            raise ValueError(f"unknown dtype {self.dtype!r}")
        return a.reshape(self.shape)

    def __repr__(self):
        return f"Tensor({self.name!r}, {self.dtype}, {list(self.shape)}, {len(self.raw)} bytes)"


class SafetensorsFile:
    """A validated file: tensors (dict name -> Tensor, in the order of their
    data offsets) and metadata (dict str -> str, {} when absent)."""

    def __init__(self, path, tensors, metadata, has_metadata):
        self.path = path
        self.tensors = tensors
        self.metadata = metadata
        self.has_metadata = has_metadata

    def __repr__(self):
        return f"SafetensorsFile({self.path!r}, {len(self.tensors)} tensors, {len(self.metadata)} metadata)"


# --------------------------------------------------------------------------
# Reading


class _Obj:
    """A JSON object as parsed, keeping every (key, value) pair in order, so
    that duplicate keys can be seen after the parse."""

    __slots__ = ("pairs",)

    def __init__(self, pairs):
        self.pairs = pairs

    def keys(self):
        return [k for k, _ in self.pairs]

    def get(self, key, default=None):
        # The last value wins, like json.loads; only used once duplicates are excluded.
        for k, v in reversed(self.pairs):
            if k == key:
                return v
        return default


class _NotJson(Exception):
    pass


def _reject_constant(name):
    raise _NotJson(f"{name} is not JSON")


def _parse_int(text):
    # Python refuses to convert integers of more than 4300 digits; any literal
    # this long is far beyond 2^53, so a float (inf) stands for it: no longer
    # an integer, refused wherever an integer is required, as it would be.
    return int(text) if len(text) < 40 else float(text)


def _depth(value):
    """Nesting depth of containers: {} is 1, {"a":[1]} is 2."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, _Obj):
            deepest = max(deepest, d)
            stack.extend((x, d + 1) for _, x in v.pairs)
        elif isinstance(v, list):
            deepest = max(deepest, d)
            stack.extend((x, d + 1) for x in v)
    return deepest


def _objects(value):
    """Every JSON object in the document, outer ones first."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, _Obj):
            yield v
            stack.extend(x for _, x in reversed(v.pairs))
        elif isinstance(v, list):
            stack.extend(reversed(v))


def _loads(text):
    """json.loads with room for MAX_DEPTH levels whatever the caller's stack."""
    needed = MAX_DEPTH + 200 + _stack_depth()
    old = sys.getrecursionlimit()
    if old < needed:
        sys.setrecursionlimit(needed)
    try:
        return json.loads(text, object_pairs_hook=_Obj, parse_constant=_reject_constant, parse_int=_parse_int)
    finally:
        if old < needed:
            sys.setrecursionlimit(old)


def _stack_depth():
    n = 0
    frame = sys._getframe()
    while frame is not None:
        n += 1
        frame = frame.f_back
    return n


_BAD_CHAR = re.compile("[\x00\ud800-\udfff]")


def _bad_string(s):
    """Why a decoded JSON string is refused (None if it is fine)."""
    m = _BAD_CHAR.search(s)
    if m is None:
        return None
    if m.group() == "\x00":
        return "a string contains U+0000 (\\u0000)"
    return "a string contains an escaped lone surrogate"


def _check_strings(value):
    """Every string in the parsed document must be valid Unicode without NUL
    (\\ud800 and \\u0000 escapes are the only way to break this once the
    bytes are valid UTF-8)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            why = _bad_string(v)
            if why:
                return why
        elif isinstance(v, _Obj):
            for k, x in v.pairs:
                why = _bad_string(k)
                if why:
                    return why
                stack.append(x)
        elif isinstance(v, list):
            stack.extend(v)
    return None


def _is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


def _describe(x):
    if isinstance(x, _Obj):
        return "an object"
    if isinstance(x, list):
        return "an array"
    if isinstance(x, bool):
        return "a boolean"
    if x is None:
        return "null"
    if isinstance(x, str):
        return "a string"
    return "a number"


def _name_for_message(name):
    return json.dumps(name, ensure_ascii=False)


def parse(data, label):
    """Validates `data` (the bytes of a whole file) and returns a
    SafetensorsFile; `label` stands for the path in messages. Raises
    FormatError for a malformed file."""
    data = bytes(data)
    size = len(data)

    def fail(kind, detail):
        raise FormatError(label, kind, detail)

    if size < 8:
        fail("truncated", f"the file has {size} bytes, fewer than the 8 of the header length")
    (n,) = struct.unpack("<Q", data[:8])
    if n > size - 8:
        fail("header-length", f"the header length {n} is more than the {size - 8} bytes after it")
    if n > MAX_HEADER:
        fail("header-length", f"the header length {n} is more than {MAX_HEADER} bytes")
    header_bytes = data[8:8 + n]
    try:
        text = header_bytes.decode("utf-8", errors="strict")
    except UnicodeDecodeError as e:
        fail("header-utf8", f"the header is not UTF-8 at byte {e.start} of the header ({e.reason})")

    try:
        doc = _loads(text)
    except _NotJson as e:
        fail("header-json", str(e))
    except json.JSONDecodeError as e:
        fail("header-json", f"the header is not JSON: {e.msg} at character {e.pos}")
    except RecursionError:
        fail("header-json", f"the header nests deeper than {MAX_DEPTH}")
    if not isinstance(doc, _Obj):
        fail("header-json", f"the header is {_describe(doc)}, not an object")
    if _depth(doc) > MAX_DEPTH:
        fail("header-json", f"the header nests deeper than {MAX_DEPTH}")
    why = _check_strings(doc)
    if why:
        fail("header-json", why)
    for key, value in doc.pairs:
        if key != METADATA_KEY and not isinstance(value, _Obj):
            fail("header-json", f"the entry {_name_for_message(key)} is {_describe(value)}, not an object")

    for obj in _objects(doc):
        seen = set()
        for key, _ in obj.pairs:
            if key in seen:
                where = "the header" if obj is doc else "one object of the header"
                fail("duplicate-name", f"{_name_for_message(key)} appears twice in {where}")
            seen.add(key)

    data_start = 8 + n
    data_len = size - data_start
    entries = []  # (begin, end, name, dtype, shape)
    for name, entry in doc.pairs:
        if name == METADATA_KEY:
            continue
        shown = _name_for_message(name)
        dtype = entry.get("dtype")
        if not isinstance(dtype, str) or dtype not in DTYPE_SIZES:
            got = json.dumps(dtype, ensure_ascii=False) if isinstance(dtype, str) else _describe(dtype)
            if "dtype" not in entry.keys():
                got = "missing"
            fail("dtype", f"tensor {shown}: dtype {got} is not one of F64, F32, BF16, I64")
        elem = DTYPE_SIZES[dtype]

        shape = entry.get("shape")
        if "shape" not in entry.keys():
            fail("shape", f"tensor {shown}: no shape")
        if not isinstance(shape, list):
            fail("shape", f"tensor {shown}: the shape is {_describe(shape)}, not an array")
        if len(shape) > MAX_DIMS:
            fail("shape", f"tensor {shown}: {len(shape)} dimensions, more than {MAX_DIMS}")
        for d in shape:
            if not _is_int(d):
                fail("shape", f"tensor {shown}: a dimension is {_describe(d)}, not an integer")
            if d < 0:
                fail("shape", f"tensor {shown}: the dimension {d} is negative")
            if d >= INTEGER_LIMIT:
                fail("shape", f"tensor {shown}: the dimension {d} is not below 2^53")
        count = 1
        for d in shape:
            count *= d
        nbytes = count * elem
        if nbytes >= _U64_LIMIT:
            fail("shape", f"tensor {shown}: the byte count {nbytes} overflows 64 bits")

        offsets = entry.get("data_offsets")
        if "data_offsets" not in entry.keys():
            fail("offsets", f"tensor {shown}: no data_offsets")
        if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_int(x) for x in offsets):
            fail("offsets", f"tensor {shown}: data_offsets is not two integers")
        if not all(0 <= x < INTEGER_LIMIT for x in offsets):
            fail("offsets", f"tensor {shown}: data_offsets {offsets} not in [0, 2^53)")
        begin, end = offsets
        if not (0 <= begin <= end <= data_len):
            fail("offsets", f"tensor {shown}: data_offsets [{begin}, {end}] not within 0 <= begin <= end <= {data_len}")
        if end - begin != nbytes:
            fail("byte-count", f"tensor {shown}: {end - begin} bytes for {count} elements of {dtype} ({nbytes} bytes)")
        entries.append((begin, end, name, dtype, shape))

    # Zero-size tensors cover no byte: they neither overlap nor fill a gap.
    covering = sorted((e for e in entries if e[1] > e[0]), key=lambda e: (e[0], e[1]))
    for a, b in zip(covering, covering[1:]):
        if b[0] < a[1]:
            fail("overlap", f"tensors {_name_for_message(a[2])} [{a[0]}, {a[1]}) and {_name_for_message(b[2])} [{b[0]}, {b[1]}) overlap")
    pos = 0
    for begin, end, name, _, _ in covering:
        if begin > pos:
            fail("gap", f"bytes [{pos}, {begin}) of the data buffer belong to no tensor")
        pos = end
    if pos != data_len:
        fail("gap", f"bytes [{pos}, {data_len}) at the end of the data buffer belong to no tensor")

    metadata = {}
    has_metadata = False
    for key, value in doc.pairs:
        if key != METADATA_KEY:
            continue
        has_metadata = True
        if not isinstance(value, _Obj):
            fail("metadata", f"__metadata__ is {_describe(value)}, not an object")
        for k, v in value.pairs:
            if not isinstance(v, str):
                fail("metadata", f"__metadata__ {_name_for_message(k)} is {_describe(v)}, not a string")
            metadata[k] = v

    tensors = {}
    for begin, end, name, dtype, shape in sorted(entries, key=lambda e: (e[0], e[1], e[2].encode("utf-8"))):
        tensors[name] = Tensor(name, dtype, shape, data[data_start + begin:data_start + end])
    return SafetensorsFile(label, tensors, metadata, has_metadata)


def read(path):
    """Reads and validates the file at `path` (OSError if it cannot be read,
    FormatError if it is malformed)."""
    with open(path, "rb") as f:
        data = f.read()
    return parse(data, os.fspath(path))


# --------------------------------------------------------------------------
# Writing


def bf16_bits(x):
    """The bfloat16 bit patterns (uint16) of float32 values, rounded to
    nearest, ties to even; a NaN stays a NaN (quiet, sign and top payload
    bits kept); overflow rounds to infinity as IEEE rounding does."""
    x = np.asarray(x, dtype=np.float32)
    bits = x.view(np.uint32).astype(np.uint64)
    rounded = (bits + np.uint64(0x7FFF) + ((bits >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)
    nan = (bits & np.uint64(0x7FFFFFFF)) > np.uint64(0x7F800000)
    quiet = (bits >> np.uint64(16)) | np.uint64(0x0040)
    return np.where(nan, quiet, rounded).astype(np.uint16)


def _tensor_bytes(name, spec):
    """(dtype, shape, raw bytes) of one tensor given to write()."""
    if isinstance(spec, tuple):
        if len(spec) != 2:
            raise ValueError(f"tensor {name!r}: give an array or a (dtype, array) pair")
        dtype, arr = spec
        if dtype not in DTYPE_SIZES:
            raise ValueError(f"tensor {name!r}: unknown dtype {dtype!r}")
        arr = np.asarray(arr)
    else:
        arr = np.asarray(spec)
        if arr.dtype == np.float64:
            dtype = "F64"
        elif arr.dtype == np.float32:
            dtype = "F32"
        elif arr.dtype == np.int64:
            dtype = "I64"
        else:
            raise TypeError(f"tensor {name!r}: cannot infer a dtype from {arr.dtype}; give (dtype, array)")
    if arr.ndim > MAX_DIMS:
        raise ValueError(f"tensor {name!r}: {arr.ndim} dimensions, more than {MAX_DIMS}")
    kind = arr.dtype.kind
    if dtype == "F64":
        if kind not in "fiu":
            raise TypeError(f"tensor {name!r}: F64 from {arr.dtype}")
        out = arr.astype("<f8")
    elif dtype == "F32":
        if kind == "f" and arr.dtype.itemsize > 4:
            conv = arr.astype(np.float32)
            same = (conv.astype(arr.dtype) == arr) | (np.isnan(arr) & np.isnan(conv))
            if not np.all(same):
                raise ValueError(f"tensor {name!r}: values not exactly representable in F32; convert them first")
            out = conv.astype("<f4")
        elif kind in "fiu":
            out = arr.astype("<f4")
        else:
            raise TypeError(f"tensor {name!r}: F32 from {arr.dtype}")
    elif dtype == "BF16":
        if arr.dtype == np.uint16:
            out = arr.astype("<u2")  # already bfloat16 bit patterns
        elif arr.dtype == np.float32:
            out = bf16_bits(arr).astype("<u2")
        elif kind == "f":
            # Rounding float64 to float32 then to bfloat16 could round twice:
            # only exact float32 values are taken.
            conv = arr.astype(np.float32)
            same = (conv.astype(arr.dtype) == arr) | (np.isnan(arr) & np.isnan(conv))
            if not np.all(same):
                raise ValueError(f"tensor {name!r}: BF16 is rounded from float32; these values are not float32")
            out = bf16_bits(conv).astype("<u2")
        else:
            raise TypeError(f"tensor {name!r}: BF16 from {arr.dtype} (give float32 values or uint16 bit patterns)")
    else:  # I64
        if kind not in "iu":
            raise TypeError(f"tensor {name!r}: I64 from {arr.dtype}")
        if kind == "u" and arr.size and int(arr.max()) >= _I64_LIMIT:
            raise ValueError(f"tensor {name!r}: values do not fit in I64")
        out = arr.astype("<i8")
    return dtype, tuple(int(d) for d in arr.shape), np.ascontiguousarray(out).tobytes()


def encode(tensors, metadata=None):
    """The bytes of a safetensors file holding `tensors` (dict name -> array
    or (dtype, array)) and `metadata` (dict str -> str, or None for no
    __metadata__), laid out as SPEC.md 10.1 says: tensors in decreasing
    element size, then by name, contiguous from offset 0; the header padded
    with spaces so that 8 + N is a multiple of 8."""
    items = []
    for name, spec in tensors.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"tensor names are non-empty strings, not {name!r}")
        if name == METADATA_KEY:
            raise ValueError("a tensor cannot be named __metadata__")
        if _bad_string(name):
            raise ValueError(f"tensor name {name!r}: {_bad_string(name)}")
        dtype, shape, raw = _tensor_bytes(name, spec)
        items.append((dtype, shape, raw, name))
    items.sort(key=lambda t: (-DTYPE_SIZES[t[0]], t[3].encode("utf-8")))

    header = {}
    if metadata is not None:
        meta = {}
        for k, v in metadata.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise TypeError("metadata maps strings to strings")
            if _bad_string(k) or _bad_string(v):
                raise ValueError(f"metadata {k!r}: {_bad_string(k) or _bad_string(v)}")
            meta[k] = v
        header[METADATA_KEY] = meta
    offset = 0
    chunks = []
    for dtype, shape, raw, name in items:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        chunks.append(raw)
    text = json.dumps(header, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
    text += b" " * (-(8 + len(text)) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)


def write(path, tensors, metadata=None, overwrite=False):
    """Writes `tensors` and `metadata` (see encode()) to `path`, through
    `path`.tmp and a rename, so a failed write leaves no partial file.
    FileExistsError if `path` exists and not `overwrite`."""
    path = os.fspath(path)
    data = encode(tensors, metadata)
    if not overwrite and os.path.lexists(path):
        raise FileExistsError(17, "refusing to overwrite an existing file", path)
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


# --------------------------------------------------------------------------
# The dump compared with build/lacs-dump


def _dump_name(name):
    """A name bare, or JSON-quoted when it holds a byte below 0x21, '"' or '\\'."""
    if any(c < "\x21" or c in '"\\' for c in name):
        return json.dumps(name, ensure_ascii=False)
    return name


def dump(path):
    """The text dump of a file, byte for byte that of build/lacs-dump:
    `file <path>`, then `tensor <name> <dtype> [<d0>,...] <sha256 of the raw
    bytes>` per tensor and `metadata <key> <sha256 of the value's UTF-8>` per
    metadata entry, each in byte-wise order of names; or `error <kind>` for a
    malformed file. Every line ends with LF."""
    path = os.fspath(path)
    lines = [f"file {path}"]
    try:
        f = read(path)
    except FormatError as e:
        lines.append(f"error {e.kind}")
    else:
        for name in sorted(f.tensors, key=lambda s: s.encode("utf-8")):
            t = f.tensors[name]
            shape = "[" + ",".join(str(d) for d in t.shape) + "]"
            lines.append(f"tensor {_dump_name(name)} {t.dtype} {shape} {hashlib.sha256(t.raw).hexdigest()}")
        for key in sorted(f.metadata, key=lambda s: s.encode("utf-8")):
            digest = hashlib.sha256(f.metadata[key].encode("utf-8")).hexdigest()
            lines.append(f"metadata {_dump_name(key)} {digest}")
    return "".join(line + "\n" for line in lines)

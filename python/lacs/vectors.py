"""The golden vectors (SPEC.md 10.1): one safetensors file per case, its
metadata key `lacs` a JSON object, and vectors/MANIFEST.json listing them."""

import json
import os

import numpy as np

from . import safetensors
from .safetensors import FormatError

EXPECTED_PREFIX = "expected."
GAUGE_PREFIX = "gauge."
MANIFEST = "MANIFEST.json"


def _reject_constant(name):
    raise ValueError(f"{name} is not JSON")


def is_input(name):
    """Whether a tensor name is an input: neither `expected.*` nor `gauge.*`."""
    return not (name.startswith(EXPECTED_PREFIX) or name.startswith(GAUGE_PREFIX))


class Vector:
    """One case. path; meta (the `lacs` object); id, op, tier, params (from
    meta; None or {} when absent); inputs (name -> array as stored, widened:
    float32 for F32 and BF16, int64 for I64, float64 for F64); expected
    (output name without `expected.` -> float64 array); file (the
    SafetensorsFile)."""

    def __init__(self, path, file, meta):
        self.path = path
        self.file = file
        self.meta = meta
        self.id = meta.get("id")
        self.op = meta.get("op")
        self.tier = meta.get("tier")
        params = meta.get("params")
        self.params = dict(params) if isinstance(params, dict) else {}
        self.inputs = {}
        self.expected = {}
        for name, t in file.tensors.items():
            if name.startswith(EXPECTED_PREFIX):
                self.expected[name[len(EXPECTED_PREFIX):]] = t.array().astype(np.float64)
            elif is_input(name):
                self.inputs[name] = t.array()

    def __repr__(self):
        return f"Vector({self.id!r}, {self.path!r})"


def load_vector(path):
    """Reads a vector file: a valid safetensors file (FormatError otherwise)
    whose metadata has a `lacs` entry that parses as a JSON object
    (FormatError kind `metadata` otherwise)."""
    path = os.fspath(path)
    f = safetensors.read(path)
    if "lacs" not in f.metadata:
        raise FormatError(path, "metadata", "no `lacs` metadata entry: not a lacs vector")
    try:
        meta = json.loads(f.metadata["lacs"], parse_constant=_reject_constant)
    except (ValueError, RecursionError) as e:
        raise FormatError(path, "metadata", f"the `lacs` metadata is not JSON: {e}") from None
    if not isinstance(meta, dict):
        raise FormatError(path, "metadata", "the `lacs` metadata is not a JSON object")
    return Vector(path, f, meta)


def load_manifest(vectors_dir):
    """vectors_dir/MANIFEST.json, parsed."""
    with open(os.path.join(os.fspath(vectors_dir), MANIFEST), encoding="utf-8") as f:
        return json.load(f)


def iter_cases(vectors_dir, op=None, tier=None):
    """Yields (manifest entry, absolute path) for every case of the manifest,
    only those of `op` and `tier` when given."""
    vectors_dir = os.path.abspath(os.fspath(vectors_dir))
    for entry in load_manifest(vectors_dir).get("cases", []):
        if op is not None and entry.get("op") != op:
            continue
        if tier is not None and entry.get("tier") != tier:
            continue
        yield entry, os.path.normpath(os.path.join(vectors_dir, entry["path"]))

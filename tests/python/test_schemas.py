"""vectors/schema (SPEC.md 10.1): the schemas themselves, on hand-written
documents; then vectors/MANIFEST.json and every vector file it lists."""

import copy
import hashlib
import json
import os
import unittest

import jsonschema

from lacs import vectors
from lacs import safetensors as st

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VECTORS = os.path.join(REPO, "vectors")
SCHEMAS = os.path.join(VECTORS, "schema")


def load_schema(name):
    with open(os.path.join(SCHEMAS, name), encoding="utf-8") as f:
        schema = json.load(f)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def errors(validator, doc):
    return list(validator.iter_errors(doc))


def inputs_sha256(f):
    """SPEC.md 10.1: for each input tensor in name order, its name, a zero
    byte, its raw bytes."""
    h = hashlib.sha256()
    for name in sorted((n for n in f.tensors if vectors.is_input(n)), key=lambda s: s.encode("utf-8")):
        h.update(name.encode("utf-8"))
        h.update(b"\x00")
        h.update(f.tensors[name].raw)
    return h.hexdigest()


METADATA_EXAMPLE = {
    "format": "lacs-vector/1",
    "spec_version": "1.3",
    "generator_version": "3",
    "id": "gated_delta_rule-bf16-varlen_state_carry.2",
    "op": "gated_delta_rule",
    "tier": "bf16",
    "flags": ["Varlen", "StateCarry", "AllBF16"],
    "reason": "Catches a kernel that drops the state between the two halves of a split sequence.",
    "params": {"scale": 0.125, "split": 7, "convention": 0},
    "dims": {"B": 1, "T": 13, "H": 2, "HV": 4, "K": 8, "V": 16, "N": 2},
    "seed": 0,
    "inputs": ["cu_seqlens", "g", "h0", "k", "q", "v", "beta"],
    "outputs": ["o", "ht", "ht_split"],
    "reference": "lacs_ref_gated_delta_rule",
    "tolerance": {"model": "lacs-tolerance/2", "unit_roundoff": 2**-8, "normwise_factor": 6.0,
                  "elementwise_factor": 24.0, "floor_fraction": 0.125, "underflow": 2**-134,
                  "length_factor": {"o": 1.0, "ht": 1.0, "ht_split": 1.0},
                  "gauge": {"samples": 16, "delta": 2**-30, "binary32": 2**-16, "exp_error": 2.0,
                            "state_noise": True}},
    "certified": {"method": "long double", "max_error": 3e-17, "per_output": {"o": 3e-17, "ht": 1e-17, "ht_split": 0}},
}

MANIFEST_EXAMPLE = {
    "format": "lacs-manifest/1",
    "spec_version": "1.3",
    "generator_version": "3",
    "set": "core",
    "cases": [
        {
            "id": "rmsnorm_vjp-fp32-basic",
            "op": "rmsnorm_vjp",
            "tier": "fp32",
            "flags": ["Basic", "Gradient"],
            "path": "core/rmsnorm_vjp/rmsnorm_vjp-fp32-basic.safetensors",
            "shapes": {"x": [4, 8], "dy": [4, 8], "weight": [8], "expected.dx": [4, 8], "expected.dweight": [8]},
            "bytes": 1024,
            "sha256": "0" * 64,
            "inputs_sha256": "0123456789abcdef" * 4,
        }
    ],
}


def set_path(doc, path, value):
    """A copy of doc with doc[path...] = value (value DELETE removes the key)."""
    doc = copy.deepcopy(doc)
    d = doc
    for k in path[:-1]:
        d = d[k]
    if value is DELETE:
        del d[path[-1]]
    else:
        d[path[-1]] = value
    return doc


DELETE = object()

METADATA_INVALID = [
    ("a required field missing", ("reason",), DELETE),
    ("an unknown top-level field", ("extra",), 1),
    ("format", ("format",), "lacs-vector/2"),
    ("spec_version not major.minor", ("spec_version",), "1.2.0"),
    ("spec_version a number", ("spec_version",), 1.2),
    ("generator_version empty", ("generator_version",), ""),
    ("id without a tier", ("id",), "delta_rule-basic"),
    ("id with upper case", ("id",), "delta_rule-fp32-Basic"),
    ("op with a dash", ("op",), "delta-rule"),
    ("tier", ("tier",), "fp16"),
    ("an unknown flag", ("flags",), ["Basic", "Fancy"]),
    ("a flag twice", ("flags",), ["Basic", "Basic"]),
    ("flags not an array", ("flags",), "Basic"),
    ("reason empty", ("reason",), ""),
    ("a param not a number", ("params", "scale"), "0.5"),
    ("a param a boolean", ("params", "scale"), True),
    ("a dim negative", ("dims", "T"), -1),
    ("a dim fractional", ("dims", "T"), 1.5),
    ("seed negative", ("seed",), -1),
    ("seed fractional", ("seed",), 0.5),
    ("an input not a string", ("inputs",), ["q", 1]),
    ("an input twice", ("inputs",), ["q", "q"]),
    ("no outputs", ("outputs",), []),
    ("reference without lacs_ref_", ("reference",), "ref_delta_rule"),
    ("tolerance normwise zero", ("tolerance", "normwise"), 0),
    ("tolerance without a model", ("tolerance", "model"), DELETE),
    ("tolerance with an unknown field", ("tolerance", "extra"), 1),
    ("certified max_error above 1e-12", ("certified", "max_error"), 2e-12),
    ("certified max_error negative", ("certified", "max_error"), -1e-20),
    ("certified without per_output", ("certified", "per_output"), DELETE),
    ("certified per_output not a number", ("certified", "per_output", "o"), "small"),
    ("certified method missing", ("certified", "method"), DELETE),
]

MANIFEST_INVALID = [
    ("format", ("format",), "lacs-manifest/2"),
    ("set", ("set",), "extra"),
    ("an unknown top-level field", ("note",), "x"),
    ("cases missing", ("cases",), DELETE),
    ("spec_version", ("spec_version",), "one"),
    ("a case without sha256", ("cases", 0, "sha256"), DELETE),
    ("a case sha256 in upper case", ("cases", 0, "sha256"), "A" * 64),
    ("a case sha256 too short", ("cases", 0, "sha256"), "0" * 63),
    ("a case inputs_sha256 not hex", ("cases", 0, "inputs_sha256"), "g" * 64),
    ("a case bytes negative", ("cases", 0, "bytes"), -1),
    ("a case bytes a string", ("cases", 0, "bytes"), "1024"),
    ("a case shape negative", ("cases", 0, "shapes", "x"), [4, -8]),
    ("a case shape not a list", ("cases", 0, "shapes", "x"), 4),
    ("a case with an unknown field", ("cases", 0, "extra"), 1),
    ("a case path absolute", ("cases", 0, "path"), "/core/rmsnorm_vjp/x.safetensors"),
    ("a case path with another suffix", ("cases", 0, "path"), "core/rmsnorm_vjp/x.bin"),
    ("a case id", ("cases", 0, "id"), "rmsnorm_vjp"),
    ("a case tier", ("cases", 0, "tier"), "bf32"),
    ("a case flag", ("cases", 0, "flags"), ["basic"]),
]


class SchemaExamples(unittest.TestCase):
    """The schemas on hand-written documents: the valid examples pass, and
    breaking any one rule fails."""

    @classmethod
    def setUpClass(cls):
        cls.meta = load_schema("metadata.schema.json")
        cls.manifest = load_schema("manifest.schema.json")

    def test_top_level_is_closed(self):
        for v in (self.meta, self.manifest):
            self.assertIs(v.schema.get("additionalProperties"), False)

    def test_flags_and_ids_agree_between_schemas(self):
        for key in ("flags", "id", "tier", "op", "spec_version"):
            self.assertEqual(self.meta.schema["$defs"][key], self.manifest.schema["$defs"][key], key)
        self.assertEqual(len(self.meta.schema["$defs"]["flags"]["items"]["enum"]), 34)

    def test_valid_metadata_example(self):
        self.assertEqual(errors(self.meta, METADATA_EXAMPLE), [])

    def test_corpus_lacs_metadata_is_valid(self):
        p = os.path.join(REPO, "tests", "data", "valid", "lacs-style.safetensors")
        v = vectors.load_vector(p)
        self.assertEqual(errors(self.meta, v.meta), [])

    def test_invalid_metadata_examples(self):
        for why, path, value in METADATA_INVALID:
            with self.subTest(why):
                self.assertNotEqual(errors(self.meta, set_path(METADATA_EXAMPLE, path, value)), [], why)

    def test_valid_manifest_example(self):
        self.assertEqual(errors(self.manifest, MANIFEST_EXAMPLE), [])
        self.assertEqual(errors(self.manifest, set_path(MANIFEST_EXAMPLE, ("cases",), [])), [])

    def test_invalid_manifest_examples(self):
        for why, path, value in MANIFEST_INVALID:
            with self.subTest(why):
                self.assertNotEqual(errors(self.manifest, set_path(MANIFEST_EXAMPLE, path, value)), [], why)


class CommittedVectors(unittest.TestCase):
    """vectors/MANIFEST.json and the committed core set. Fails while the
    manifest is missing."""

    @classmethod
    def setUpClass(cls):
        cls.meta = load_schema("metadata.schema.json")
        cls.manifest_schema = load_schema("manifest.schema.json")

    def manifest(self):
        p = os.path.join(VECTORS, vectors.MANIFEST)
        if not os.path.exists(p):
            self.fail(f"{p} is missing: generate the core vectors (make vectors)")
        return vectors.load_manifest(VECTORS)

    def test_manifest_matches_its_schema(self):
        m = self.manifest()
        self.assertEqual(errors(self.manifest_schema, m), [])
        self.assertEqual(m["set"], "core")
        self.assertTrue(m["cases"], "the manifest lists no case")

    def test_ids_and_paths_unique(self):
        cases = self.manifest()["cases"]
        ids = [c["id"] for c in cases]
        self.assertEqual(len(ids), len(set(ids)), "duplicate ids")
        paths = [c["path"] for c in cases]
        self.assertEqual(len(paths), len(set(paths)), "duplicate paths")

    def test_every_listed_file_matches(self):
        m = self.manifest()
        for entry, path in vectors.iter_cases(VECTORS):
            with self.subTest(id=entry.get("id")):
                self.assertEqual(entry["path"], f"{m['set']}/{entry['op']}/{entry['id']}.safetensors")
                self.assertTrue(entry["id"].startswith(f"{entry['op']}-{entry['tier']}-"), entry["id"])
                self.assertTrue(os.path.isfile(path), f"{path} is listed but missing")
                with open(path, "rb") as f:
                    data = f.read()
                self.assertEqual(entry["bytes"], len(data))
                self.assertEqual(entry["sha256"], hashlib.sha256(data).hexdigest())
                v = vectors.load_vector(path)
                self.assertEqual(errors(self.meta, v.meta), [])
                for key in ("id", "op", "tier", "flags"):
                    self.assertEqual(v.meta[key], entry[key], key)
                for key in ("spec_version", "generator_version"):
                    self.assertEqual(v.meta[key], m[key], key)
                self.assertEqual(entry["shapes"], {n: list(t.shape) for n, t in v.file.tensors.items()})
                self.assertEqual(entry["inputs_sha256"], inputs_sha256(v.file))
                self.assertEqual(sorted(v.meta["inputs"]), sorted(v.inputs))
                self.assertEqual(sorted(v.meta["outputs"]), sorted(v.expected))
                self.assertEqual(sorted(v.meta["certified"]["per_output"]), sorted(v.expected))
                float_dtype = {"fp32": "F32", "bf16": "BF16"}[entry["tier"]]
                for name, t in v.file.tensors.items():
                    if name.startswith(vectors.EXPECTED_PREFIX):
                        self.assertEqual(t.dtype, "F64", name)
                    elif name.startswith(vectors.GAUGE_PREFIX):  # SPEC.md 11.2: one gauge per golden
                        self.assertEqual(t.dtype, "F32", name)
                        golden = v.file.tensors[vectors.EXPECTED_PREFIX + name[len(vectors.GAUGE_PREFIX):]]
                        self.assertEqual(t.shape, golden.shape, name)
                    elif name == "cu_seqlens":
                        self.assertEqual(t.dtype, "I64", name)
                    else:
                        self.assertEqual(t.dtype, float_dtype, name)

    def test_every_core_file_is_listed(self):
        listed = {os.path.normpath(c["path"]) for c in self.manifest()["cases"]}
        core = os.path.join(VECTORS, "core")
        found = set()
        for root, _, names in os.walk(core):
            for n in names:
                if n.endswith(".safetensors"):
                    found.add(os.path.relpath(os.path.join(root, n), VECTORS))
        self.assertEqual(sorted(found - listed), [], "files under vectors/core missing from MANIFEST.json")
        self.assertTrue(found, "no vector file under vectors/core")


class VectorLoading(unittest.TestCase):
    """lacs.load_vector on the corpus file shaped like a vector."""

    def test_load_vector(self):
        p = os.path.join(REPO, "tests", "data", "valid", "lacs-style.safetensors")
        v = vectors.load_vector(p)
        self.assertEqual((v.id, v.op, v.tier), ("delta_rule-fp32-corpus_example", "delta_rule", "fp32"))
        self.assertEqual(v.params, {"scale": 0.5})
        self.assertEqual(sorted(v.inputs), ["cu_seqlens", "k", "q"])
        self.assertEqual(str(v.inputs["q"].dtype), "float32")
        self.assertEqual(str(v.inputs["k"].dtype), "float32")
        self.assertEqual(str(v.inputs["cu_seqlens"].dtype), "int64")
        self.assertEqual(list(v.expected), ["o"])
        self.assertEqual(str(v.expected["o"].dtype), "float64")
        self.assertEqual(v.expected["o"].ravel().tolist(), [0.125, -3.0])
        self.assertIsInstance(v.file, st.SafetensorsFile)

    def test_not_a_vector(self):
        import tempfile
        import numpy as np
        with tempfile.TemporaryDirectory() as d:
            for name, meta in (("none", None), ("other", {"x": "1"}), ("notjson", {"lacs": "{"}),
                               ("array", {"lacs": "[]"}), ("nan", {"lacs": '{"a": NaN}'})):
                with self.subTest(name):
                    p = os.path.join(d, name + ".safetensors")
                    st.write(p, {"q": np.ones(1, np.float32)}, meta)
                    with self.assertRaises(st.FormatError) as cm:
                        vectors.load_vector(p)
                    self.assertEqual(cm.exception.kind, "metadata")
            p = os.path.join(d, "gauge.safetensors")
            st.write(p, {"q": np.ones(1, np.float32), "gauge.o": np.ones(1), "expected.o": np.ones(1)}, {"lacs": "{}"})
            v = vectors.load_vector(p)
            self.assertEqual((list(v.inputs), list(v.expected), v.id), (["q"], ["o"], None))


if __name__ == "__main__":
    unittest.main()

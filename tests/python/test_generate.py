"""`lacs generate`: golden vectors of the user's shapes (SPEC.md 10.8), run as a user would.

- A user-shaped vector with a catalog case's shape and recipes is that case's
  file as lacs-generate writes it, byte for byte: through --like, and through explicit options
  (recipes, gates, h0, parameters, varlen lengths, state carry).
- The same arguments give the same bytes, in any order on the line.
- DIR/MANIFEST.json (set "user") matches its schema and the files (sizes,
  SHA-256, inputs hash), carries the arguments that rebuild each vector, and
  `lacs generate --check DIR` reproduces them (and fails on a flipped bit).
- A production-shaped vector (smaller here) is passed by builtin:cpu and by a
  legitimate zoo member, and failed by known zoo bugs.
- Every op of the op table gets a vector through `lacs generate --op OP` that
  the reference passes: the command is driven by the table.
- Nothing is replaced without --force; a directory holding another set's
  manifest is refused; user errors are one line and exit status 2.
"""

import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import tempfile
import unittest

from lacs import vectors

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_BUILD = os.environ.get("LACS_BUILD", "build")
BUILD = _BUILD if os.path.isabs(_BUILD) else os.path.join(REPO, _BUILD)
LACS = os.path.join(BUILD, "lacs")
ZOO_PLAIN = os.path.join(BUILD, "zoo", "plain_f32.so")
# the model the generator writes into every vector: include/lacs/gauge.h's LACS_TOLERANCE_MODEL
with open(os.path.join(REPO, "include", "lacs", "gauge.h")) as _f:
    TOLERANCE_MODEL = re.search(r'#define LACS_TOLERANCE_MODEL "([^"]+)"', _f.read()).group(1)

try:
    import jsonschema
except ImportError:  # ci/deps.sh installs python3-jsonschema; the schema test says so if it is missing
    jsonschema = None


def lacs(*args, env=None):
    """Runs build/lacs; (exit status, stdout, stderr)."""
    p = subprocess.run([LACS, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600,
                       env={**os.environ, **(env or {})})
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def generate(*args):
    return lacs("generate", "--jobs", "2", *args)


_CATALOG = tempfile.TemporaryDirectory()


def catalog_file(case_id):
    """The catalog's own file of case_id, as lacs-generate writes it on this machine (the committed file
    where the libm is glibc's on x86-64, SPEC.md 10.7; make vectors-check compares the two)."""
    op = re.split(r"-(?:fp32|bf16)-", case_id)[0]
    path = os.path.join(_CATALOG.name, "core", op, case_id + ".safetensors")
    if not os.path.exists(path):
        p = subprocess.run([os.path.join(BUILD, "lacs-generate"), "--out", _CATALOG.name, "--only", case_id,
                            "--force-files", "--jobs", "2"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=600)
        if p.returncode != 0:
            raise AssertionError(p.stdout.decode())
    with open(path, "rb") as f:
        return f.read()




def written(directory, case_id):
    op = re.split(r"-(?:fp32|bf16)-", case_id)[0]
    with open(os.path.join(directory, op, case_id + ".safetensors"), "rb") as f:
        return f.read()


def inputs_sha256(path):
    """SPEC.md 10.1: for each input in name order, its name, a zero byte, its raw bytes."""
    v = vectors.load_vector(path)
    h = hashlib.sha256()
    for name in sorted(v.meta["inputs"]):
        h.update(name.encode() + b"\0" + v.file.tensors[name].raw)
    return h.hexdigest()


class Generate(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        for binary in (LACS, ZOO_PLAIN):
            if not os.access(binary, os.R_OK):
                raise AssertionError(f"{binary} is missing: run `make` and `make zoo` (or set LACS_BUILD)")

    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.tmp = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()

    def out(self, name="out"):
        return os.path.join(self.tmp, name)

    def assert_ok(self, result, what):
        rc, out, err = result
        self.assertEqual(rc, 0, f"{what}:\n{out}\n{err}")
        return out, err

    def assert_user_error(self, result, *words):
        rc, out, err = result
        self.assertEqual(rc, 2, f"expected a user error naming {words}:\n{out}\n{err}")
        line = err.strip().splitlines()[-1]
        self.assertTrue(line.startswith("lacs: generate: "), line)
        for w in words:
            self.assertIn(w, line)

    # ---- byte for byte with the catalog ----

    def test_like_reproduces_catalog_cases_byte_for_byte(self):
        # a plain case, varlen with empty sequences, state carry, RetNet's gate, MesaNet's two states, a norm
        for like in ("delta_rule-t65", "gated_delta_rule-varlen", "comba-carry37", "fox-alibi", "mesa_net-h0-kk",
                     "rmsnorm_vjp-basic", "efla-tiny-k"):
            with self.subTest(like):
                d = self.out(like)
                self.assert_ok(generate("--like", like, "--out", d), like)
                op, name = like.split("-", 1)
                for tier in ("fp32", "bf16"):
                    case_id = f"{op}-{tier}-{name}"
                    self.assertEqual(written(d, case_id), catalog_file(case_id), f"{case_id} differs from the catalog's")

    def test_like_with_a_tier_writes_that_tier(self):
        d = self.out()
        self.assert_ok(generate("--like", "delta_rule-bf16-beta2", "--out", d), "--like with a tier")
        self.assertEqual(written(d, "delta_rule-bf16-beta2"), catalog_file("delta_rule-bf16-beta2"))
        self.assertFalse(os.path.exists(os.path.join(d, "delta_rule", "delta_rule-fp32-beta2.safetensors")))

    def test_explicit_options_reproduce_catalog_cases(self):
        explicit = {
            # gated_delta_rule-mixed: the plain recipes, the gate, h0
            "gated_delta_rule-mixed": ["--op", "gated_delta_rule", "--T", "129", "--H", "1", "--HV", "2", "--K", "8",
                                       "--gate", "mixed", "--h0", "--flags", "MixedGate ChunkBoundary InitialState",
                                       "--reason", "zero, mild and strong gates mixed across chunks", "--name", "mixed"],
            # delta_rule-scale: a parameter, K != V, two heads
            "delta_rule-scale": ["--op", "delta_rule", "--B", "1", "--T", "33", "--H", "2", "--K", "16", "--V", "8",
                                 "--param", "scale=0.3", "--flags", "CustomScale", "--reason",
                                 "a scale other than K^-1/2", "--name", "scale"],
            # delta_rule-varlen: lengths with empty and one-token sequences
            "delta_rule-varlen": ["--op", "delta_rule", "--lengths", "0,1,16,0,49,64", "--H", "1", "--HV", "2",
                                  "--K", "8", "--h0", "--flags", "Varlen EmptySequence InitialState", "--reason",
                                  "packed sequences of lengths 0, 1, 16, 0, 49, 64, each from its own h0",
                                  "--name", "varlen"],
            # linear_attn-carry64: state carry, a batch of two
            "linear_attn-carry64": ["--op", "linear_attn", "--B", "2", "--T", "100", "--H", "1", "--K", "8", "--h0",
                                    "--split", "64", "--flags", "StateCarry ChunkBoundary", "--reason",
                                    "a split on a chunk boundary", "--name", "carry64"],
            # efla-large-k: one input's recipe replaced
            "efla-large-k": ["--op", "efla", "--T", "65", "--H", "1", "--HV", "2", "--K", "16", "--V", "8",
                             "--input", "k:unit_pow2(2,5)", "--flags", "LargeKeyNorm", "--reason",
                             "||k|| from 4 to 32: c = 1/||k||^2 (saturated), not beta", "--name", "large-k"],
            # rmsnorm-d100: the norms' shape, a recipe list, a parameter
            "rmsnorm-d100": ["--op", "rmsnorm", "--rows", "33", "--dim", "100", "--inputs", "x:normal(100)",
                             "--param", "eps=1e-5", "--flags", "OddHeadDim", "--reason",
                             "a width that is not a power of two, no weight", "--name", "d100"],
        }
        for like, args in explicit.items():
            with self.subTest(like):
                d = self.out(like)
                self.assert_ok(generate(*args, "--out", d), like)
                op, name = like.split("-", 1)
                for tier in ("fp32", "bf16"):
                    case_id = f"{op}-{tier}-{name}"
                    self.assertEqual(written(d, case_id), catalog_file(case_id), f"{case_id} differs from the catalog's")
        # the wrong thing: one recipe changed, the bytes differ
        d = self.out("changed")
        args = explicit["delta_rule-scale"]
        self.assert_ok(generate(*args, "--input", "beta:uniform(0,0.5)", "--out", d), "changed recipe")
        self.assertNotEqual(written(d, "delta_rule-fp32-scale"), catalog_file("delta_rule-fp32-scale"))

    # ---- determinism ----

    def test_same_arguments_same_bytes_in_any_order(self):
        args = ["--op", "gated_delta_rule", "--T", "100", "--H", "2", "--HV", "4", "--K", "16", "--gate", "strong",
                "--h0", "--seed", "12345", "--reason", "strong decays over four value heads"]
        a, b = self.out("a"), self.out("b")
        self.assert_ok(generate(*args, "--out", a), "first")
        shuffled = args[10:] + args[:10]  # options in another order
        self.assert_ok(lacs("generate", "--jobs", "1", *shuffled, "--out", b), "second")
        for root, _, files in os.walk(a):
            for name in files:
                if name.startswith("."):
                    continue
                rel = os.path.relpath(os.path.join(root, name), a)
                with open(os.path.join(a, rel), "rb") as f, open(os.path.join(b, rel), "rb") as g:
                    self.assertEqual(f.read(), g.read(), rel)
        # the seed is the one given, and another seed gives other inputs
        v = vectors.load_vector(os.path.join(a, "gated_delta_rule", "gated_delta_rule-fp32-b1-t100-h2-hv4-k16-v16.safetensors"))
        self.assertEqual(v.meta["seed"], 12345)
        c = self.out("c")
        self.assert_ok(generate(*args[:-4], "--seed", "12346", "--reason", args[-1], "--out", c), "another seed")
        self.assertNotEqual(written(a, "gated_delta_rule-fp32-b1-t100-h2-hv4-k16-v16"),
                            written(c, "gated_delta_rule-fp32-b1-t100-h2-hv4-k16-v16"))

    # ---- the manifest, and --check ----

    def test_manifest_lists_the_vectors_and_check_reproduces_them(self):
        d = self.out()
        self.assert_ok(generate("--op", "simple_gla", "--T", "70", "--H", "2", "--K", "16", "--gate", "const(-0.01)",
                                "--reason", "a constant decay", "--out", d), "first vector")
        self.assert_ok(generate("--op", "dyt", "--rows", "8", "--dim", "32", "--tier", "bf16", "--reason",
                                "DyT rows of 32", "--out", d), "second vector")
        with open(os.path.join(d, "MANIFEST.json"), encoding="utf-8") as f:
            manifest = json.load(f)
        self.assertEqual(manifest["set"], "user")
        ids = [c["id"] for c in manifest["cases"]]
        self.assertEqual(ids, sorted(ids))
        self.assertEqual(ids, ["dyt-bf16-r8-d32", "simple_gla-bf16-b1-t70-h2-hv2-k16-v16",
                               "simple_gla-fp32-b1-t70-h2-hv2-k16-v16"])
        if jsonschema is not None:
            with open(os.path.join(REPO, "vectors", "schema", "manifest.schema.json"), encoding="utf-8") as f:
                jsonschema.validate(manifest, json.load(f))
        for entry in manifest["cases"]:
            path = os.path.join(d, entry["path"])
            with open(path, "rb") as f:
                data = f.read()
            self.assertEqual(entry["bytes"], len(data))
            self.assertEqual(entry["sha256"], hashlib.sha256(data).hexdigest())
            self.assertEqual(entry["inputs_sha256"], inputs_sha256(path))
            v = vectors.load_vector(path)
            self.assertEqual(entry["shapes"], {n: list(t.shape) for n, t in v.file.tensors.items()})
            self.assertEqual(entry["generate"][:2], ["--op", entry["op"]])
            self.assertIn(entry["tier"], entry["generate"])
            # the vector is complete: gauges, tolerance, certified error, the reason given
            self.assertTrue(any(n.startswith("gauge.") for n in v.file.tensors))
            self.assertEqual(v.meta["tolerance"]["model"], TOLERANCE_MODEL)
            self.assertLess(v.meta["certified"]["max_error"], 1e-12)
            self.assertIn(v.meta["reason"], ("a constant decay", "DyT rows of 32"))
        self.assertIn("const(-0.01)", " ".join(manifest["cases"][1]["generate"]))
        # lacs check reads the directory like the committed set
        out, _ = self.assert_ok(lacs("check", "--impl", "builtin:reference", "--vectors", d), "check")
        self.assertIn("3 passed, 0 failed, 0 skipped", out)
        # --check rebuilds every vector from its arguments
        out, _ = self.assert_ok(lacs("generate", "--check", d), "--check")
        self.assertIn("3 cases, 0 differ", out)
        # the wrong thing: one input bit flipped, --check fails and names it
        path = os.path.join(d, manifest["cases"][1]["path"])
        with open(path, "rb") as g:
            (n,) = struct.unpack("<Q", g.read(8))
            offset = 8 + n + json.loads(g.read(n))["q"]["data_offsets"][0]
        with open(path, "r+b") as g:
            g.seek(offset)
            byte = g.read(1)
            g.seek(offset)
            g.write(bytes([byte[0] ^ 1]))
        rc, out, err = lacs("generate", "--check", d)
        self.assertEqual(rc, 1, out + err)
        self.assertIn("3 cases, 1 differ", out)
        self.assertIn("input 'q' is not bit-identical", err)

    # ---- a production-shaped vector, smaller ----

    def test_production_shaped_vector_separates_a_correct_kernel_from_bugs(self):
        # gated_delta_rule at a production head mix (HV = 2 H, grouped value heads), scaled down in T and K
        d = self.out()
        self.assert_ok(generate("--op", "gated_delta_rule", "--tier", "bf16", "--B", "1", "--T", "300", "--H", "2",
                                "--HV", "4", "--K", "32", "--V", "32", "--h0", "--reason",
                                "the production head mix, scaled down", "--out", d), "generate")
        out, _ = self.assert_ok(lacs("check", "--impl", "builtin:cpu", "--vectors", d), "builtin:cpu")
        self.assertIn("1 passed, 0 failed, 0 skipped", out)
        out, _ = self.assert_ok(lacs("check", "--impl", ZOO_PLAIN, "--vectors", d, env={"LACS_ZOO_BUG": "none"}),
                                "the zoo's plain fp32, no bug")
        self.assertIn("1 passed", out)
        for bug in ("gva_tiled", "h0_ignored", "gdn_decay_on_write"):
            with self.subTest(bug):
                rc, out, err = lacs("check", "--impl", ZOO_PLAIN, "--vectors", d, env={"LACS_ZOO_BUG": bug})
                self.assertEqual(rc, 1, f"{bug} should fail:\n{out}\n{err}")
                self.assertIn("0 passed, 1 failed", out)

    # ---- table-driven ----

    def test_every_op_of_the_table_gets_a_vector_the_reference_passes(self):
        rc, _, err = lacs("generate", "--op", "no_such_op", "--out", self.out())
        self.assertEqual(rc, 2)
        ops = re.search(r"\(the ops: ([^)]*)\)", err).group(1).split(", ")
        self.assertGreaterEqual(len(ops), 24)
        d = self.out()
        for op in ops:
            with self.subTest(op):
                # an op on sequences, else (the generator says so) a norm
                rc, out, err = generate("--op", op, "--T", "20", "--H", "1", "--HV", "2", "--K", "8",
                                        "--reason", f"a small {op}", "--out", d)
                if rc == 2 and "the norms need --rows and --dim" in err:
                    rc, out, err = generate("--op", op, "--rows", "4", "--dim", "16", "--reason", f"a small {op}",
                                            "--out", d)
                self.assertEqual(rc, 0, f"{op}:\n{out}\n{err}")
        out, _ = self.assert_ok(lacs("check", "--impl", "builtin:reference", "--vectors", d), "reference")
        self.assertIn(f"{2 * len(ops)} passed, 0 failed, 0 skipped", out)

    # ---- nothing lost ----

    def test_nothing_is_replaced_without_force(self):
        d = self.out()
        args = ["--like", "delta_rule-fp32-t1", "--out", d]
        self.assert_ok(generate(*args), "first")
        path = os.path.join(d, "delta_rule", "delta_rule-fp32-t1.safetensors")
        with open(path, "wb") as f:
            f.write(b"the user's own file")
        self.assert_user_error(generate(*args), "exists", "--force")
        with open(path, "rb") as f:
            self.assertEqual(f.read(), b"the user's own file")
        self.assert_ok(generate(*args, "--force"), "--force")
        self.assertEqual(written(d, "delta_rule-fp32-t1"), catalog_file("delta_rule-fp32-t1"))
        # a directory holding another set's manifest is refused
        core_like = self.out("core_like")
        os.makedirs(core_like)
        shutil.copyfile(os.path.join(REPO, "vectors", "MANIFEST.json"), os.path.join(core_like, "MANIFEST.json"))
        self.assert_user_error(generate("--like", "delta_rule-t1", "--out", core_like), "'core' set")
        self.assertEqual(sorted(os.listdir(core_like)), ["MANIFEST.json"])
        # --estimate writes nothing and says what a run would take
        e = self.out("estimate")
        out, err = self.assert_ok(generate("--op", "delta_rule", "--T", "64", "--H", "1", "--K", "8", "--reason", "r",
                                           "--estimate", "--out", e), "--estimate")
        self.assertIn("on disk", err)
        self.assertIn("on 2 threads", err)
        self.assertFalse(os.path.exists(e))

    def test_user_errors(self):
        d = self.out()
        cases = [
            (["--op", "delta_rule", "--T", "64", "--H", "1", "--K", "8"], ["--reason"]),
            (["--op", "delta_rule", "--T", "64", "--H", "2", "--HV", "3", "--K", "8", "--reason", "r"], ["multiple of H"]),
            (["--op", "delta_rule", "--T", "64", "--H", "1", "--K", "8", "--input", "x:normal", "--reason", "r"],
             ["'x' is not an input"]),
            (["--op", "delta_rule", "--T", "64", "--H", "1", "--K", "8", "--input", "k:nonsense", "--reason", "r"],
             ["unknown recipe"]),
            (["--op", "gated_delta_rule", "--T", "64", "--H", "1", "--K", "8", "--gate", "retnet", "--reason", "r"],
             ["g_gamma"]),
            (["--op", "delta_rule", "--lengths", "10,20", "--split", "5", "--H", "1", "--K", "8", "--reason", "r"],
             ["--split"]),
            (["--like", "delta_rule-t66"], ["no catalog case"]),
            (["--op", "delta_rule", "--T", "-3", "--H", "1", "--K", "8", "--reason", "r"], ["--T"]),
            (["--op", "delta_rule", "--like", "delta_rule-t1"], ["one of them"]),
            (["--op", "delta_rule", "--T", "8", "--H", "1", "--K", "8", "--reason", "r", "--tier", "fp16"], ["--tier"]),
            (["--op", "delta_rule", "--T", "8", "--H", "1", "--K", "8", "--reason", "r", "--seed", "9007199254740992"],
             ["2^53"]),
            (["--op", "delta_rule", "--T", "8", "--H", "1", "--K", "8", "--reason", "r", "--bogus"], ["--bogus"]),
        ]
        for args, words in cases:
            with self.subTest(args=args):
                self.assert_user_error(generate(*args, "--out", d), *words)
        self.assertFalse(os.path.exists(d), "no error may leave files behind")
        self.assert_user_error(generate("--like", "delta_rule-t1"), "--out")


class FullManifestCheck(unittest.TestCase):
    """`lacs-generate --check-manifest` (make vectors-full-check) catches a stale
    MANIFEST-full.json: a doctored copy fails with a line for each defect.
    (The committed manifest itself passes: make vectors-full-check, in make test.)"""

    def test_a_stale_manifest_is_caught(self):
        with open(os.path.join(REPO, "vectors", "MANIFEST-full.json"), encoding="utf-8") as f:
            manifest = json.load(f)
        cases = manifest["cases"]
        manifest["generator_version"] = "0"
        dropped = cases.pop()["id"]
        by_id = {c["id"]: c for c in cases}
        by_id["delta_rule-fp32-t16384"]["inputs_sha256"] = "0" * 64
        by_id["gated_delta_rule-bf16-t16384"]["sha256"] = "1" * 64
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "MANIFEST-full.json")
            with open(path, "w", encoding="utf-8") as f:
                json.dump(manifest, f)
            p = subprocess.run([os.path.join(BUILD, "lacs-generate"), "--set", "full", "--check-manifest", path,
                                "--regenerate", "gated_delta_rule-bf16-t16384", "--jobs", "2"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
        out = p.stdout.decode() + p.stderr.decode()
        self.assertEqual(p.returncode, 1, out)
        for line in ("generator_version is 0, the code's is",
                     f"{dropped}: a case of the catalog, not in the manifest",
                     "delta_rule-fp32-t16384: inputs_sha256 differs",
                     "gated_delta_rule-bf16-t16384: regenerated, the file differs (sha256)",
                     "the manifest is stale"):
            self.assertIn(line, out)


if __name__ == "__main__":
    unittest.main()

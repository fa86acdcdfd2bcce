"""`lacs-generate --check` reproduces committed vectors, and can fail (SPEC.md 10.7).

Three committed core vectors (one fp32, one bf16, one varlen) are copied into a
temporary directory under their relative paths and checked there: unchanged
they pass; with one input bit flipped, a golden value moved by 5 units in the
last place, or the metadata's reason changed, they fail with a message naming
what differs; a golden moved by 3 or 4 units in the last place still passes
(the 4-ulp rule). `lacs-generate --out` refuses to replace an existing file
without --force and replaces it with --force.

The binary is $LACS_BUILD/lacs-generate (default build/), built by `make`.
"""

import json
import os
import shutil
import struct
import subprocess
import tempfile
import unittest

import numpy as np

from lacs import safetensors as st
from lacs.vectors import load_vector

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VECTORS = os.path.join(REPO, "vectors")
_BUILD = os.environ.get("LACS_BUILD", "build")
BUILD = _BUILD if os.path.isabs(_BUILD) else os.path.join(REPO, _BUILD)
GENERATE = os.path.join(BUILD, "lacs-generate")

NUMPY_DTYPES = {"F64": "<f8", "F32": "<f4", "BF16": "<u2", "I64": "<i8"}


def generate(*args):
    """Runs lacs-generate; (exit status, stdout + stderr)."""
    p = subprocess.run([GENERATE, "--jobs", "1", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=600)
    return p.returncode, p.stdout.decode("utf-8", "replace") + p.stderr.decode("utf-8", "replace")


def load_manifest():
    with open(os.path.join(VECTORS, "MANIFEST.json"), encoding="utf-8") as f:
        return json.load(f)


def pick_cases(manifest):
    """The smallest committed fp32 case, bf16 case and case with cu_seqlens
    whose id --only selects alone (no other id contains it), without IEEE
    specials or the exhaustive bf16 sweeps (non-finite goldens)."""
    ids = [c["id"] for c in manifest["cases"]]

    def alone(case_id):
        return sum(case_id in other for other in ids) == 1

    def plain(c):
        return not ({"IEEESpecials", "AllBF16"} & set(c["flags"])) and alone(c["id"])

    cases = sorted(manifest["cases"], key=lambda c: (c["bytes"], c["id"]))
    fp32 = next(c for c in cases if plain(c) and c["tier"] == "fp32" and "cu_seqlens" not in c["shapes"])
    bf16 = next(c for c in cases if plain(c) and c["tier"] == "bf16" and "cu_seqlens" not in c["shapes"])
    varlen = next(c for c in cases if plain(c) and "cu_seqlens" in c["shapes"])
    return [fp32, bf16, varlen]


def header(path):
    """(data start, header dict) of a safetensors file."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    return 8 + n, json.loads(data[8:8 + n].decode("utf-8"))


def patch(path, offset, new_bytes):
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(new_bytes)


def element_offset(path, name, index, size):
    start, h = header(path)
    return start + h[name]["data_offsets"][0] + index * size


def rewrite(path, metadata_change=None):
    """Rewrites a vector with lacs.safetensors.write: the same tensors, the
    metadata's `lacs` object changed by metadata_change (a function of the
    parsed object), or unchanged."""
    f = st.read(path)
    tensors = {name: (t.dtype, np.frombuffer(t.raw, dtype=NUMPY_DTYPES[t.dtype]).reshape(t.shape))
               for name, t in f.tensors.items()}
    metadata = dict(f.metadata)
    if metadata_change is not None:
        meta = json.loads(metadata["lacs"])
        metadata_change(meta)
        metadata["lacs"] = json.dumps(meta, separators=(",", ":"))
    st.write(path, tensors, metadata, overwrite=True)


class Reproduction(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.access(GENERATE, os.X_OK):
            raise AssertionError(f"{GENERATE} is missing or not executable: run `make` first "
                                 f"(or set LACS_BUILD to the build directory)")
        cls.cases = pick_cases(load_manifest())
        # Each case regenerated once, to find golden elements the committed
        # file holds bit for bit (the ulp tests move one of those).
        cls._regenerated = tempfile.TemporaryDirectory()
        for c in cls.cases:
            rc, out = generate("--out", cls._regenerated.name, "--only", c["id"])
            if rc != 0:
                raise AssertionError(f"lacs-generate --out --only {c['id']} failed: {out}")

    @classmethod
    def tearDownClass(cls):
        cls._regenerated.cleanup()

    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.dir = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()

    def copy(self, case):
        """The committed file of `case` copied to TMP under its relative path."""
        src = os.path.join(VECTORS, case["path"])
        dst = os.path.join(self.dir, case["path"])
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copyfile(src, dst)
        return dst

    def check(self, case):
        return generate("--check", self.dir, "--only", case["id"])

    def assert_passes(self, case, what):
        rc, out = self.check(case)
        self.assertEqual(rc, 0, f"{case['id']} ({what}) should reproduce:\n{out}")
        self.assertIn("1 cases, 0 differ", out)

    def assert_fails(self, case, what, *words):
        rc, out = self.check(case)
        self.assertNotEqual(rc, 0, f"{case['id']} ({what}) should not reproduce:\n{out}")
        self.assertIn("1 cases, 1 differ", out)
        for w in words:
            self.assertIn(w, out, f"{case['id']} ({what}): the message should name {w!r}:\n{out}")

    def test_the_chosen_cases(self):
        tiers = [c["tier"] for c in self.cases]
        self.assertEqual(tiers[:2], ["fp32", "bf16"])
        self.assertIn("cu_seqlens", self.cases[2]["shapes"])
        for c in self.cases:
            v = load_vector(os.path.join(VECTORS, c["path"]))
            self.assertEqual(v.id, c["id"])
            self.assertTrue(v.expected, c["id"])
            # --only selects this case alone (the op's name alone selects more)
            rc, out = generate("--list", "--only", c["id"])
            self.assertEqual(rc, 0)
            self.assertIn("\n1 cases", "\n" + out)
            rc, out = generate("--list", "--only", c["op"] + "-")
            self.assertNotIn("\n1 cases", "\n" + out)

    def test_unchanged_copies_reproduce(self):
        for c in self.cases:
            with self.subTest(c["id"]):
                self.copy(c)
                self.assert_passes(c, "unchanged")
        # the wrong thing: a case whose file is not there
        rc, out = generate("--check", self.dir, "--only", "softcap-fp32-basic")
        self.assertNotEqual(rc, 0, out)

    def test_one_input_bit_flipped(self):
        for c in self.cases:
            with self.subTest(c["id"]):
                path = self.copy(c)
                meta = json.loads(st.read(path).metadata["lacs"])
                name = next(n for n in meta["inputs"] if n != "cu_seqlens")
                t = st.read(path).tensors[name]
                offset = element_offset(path, name, 0, 1)
                patch(path, offset, bytes([t.raw[0] ^ 0x01]))
                self.assertNotEqual(st.read(path).tensors[name].raw, t.raw)
                self.assert_fails(c, f"input {name} flipped", f"input '{name}'", "not bit-identical")
                # flipped back, it reproduces again
                patch(path, offset, bytes([t.raw[0]]))
                self.assert_passes(c, "flipped back")

    def reproduced_element(self, c, path):
        """(output name, index) of a finite non-zero golden value that the
        committed file and the regenerated one hold bit for bit."""
        committed = st.read(path)
        regenerated = st.read(os.path.join(self._regenerated.name, c["path"]))
        for name in sorted(committed.tensors):
            if not name.startswith("expected."):
                continue
            a = np.frombuffer(committed.tensors[name].raw, dtype="<f8")
            b = np.frombuffer(regenerated.tensors[name].raw, dtype="<f8")
            same = (a.view("<i8") == b.view("<i8")) & np.isfinite(a) & (np.abs(a) > 1e-300)
            if same.any():
                return name, int(np.argmax(same))
        self.fail(f"{c['id']}: no golden value reproduced bit for bit")

    def test_a_golden_moved_by_ulps(self):
        for c in self.cases:
            with self.subTest(c["id"]):
                path = self.copy(c)
                name, index = self.reproduced_element(c, path)
                offset = element_offset(path, name, index, 8)
                (bits,) = struct.unpack("<q", st.read(path).tensors[name].raw[8 * index:8 * index + 8])
                for ulps, ok in ((3, True), (4, True), (5, False), (-3, True), (-5, False)):
                    # adding to the bit pattern moves the magnitude by that many ulps
                    patch(path, offset, struct.pack("<q", bits + ulps))
                    value = struct.unpack("<d", struct.pack("<q", bits + ulps))[0]
                    self.assertTrue(np.isfinite(value))
                    if ok:
                        self.assert_passes(c, f"{name}[{index}] moved by {ulps} ulp")
                    else:
                        self.assert_fails(c, f"{name}[{index}] moved by {ulps} ulp", f"'{name}'[{index}]",
                                          "ulp > 4")
                patch(path, offset, struct.pack("<q", bits))
                self.assert_passes(c, "restored")

    def test_metadata_reason_changed(self):
        for c in self.cases:
            with self.subTest(c["id"]):
                path = self.copy(c)
                with open(path, "rb") as f:
                    committed = f.read()
                # rewritten unchanged by the Python writer: the same bytes, and it passes
                rewrite(path)
                with open(path, "rb") as f:
                    self.assertEqual(f.read(), committed, "the Python writer lays the file out as the C one")
                self.assert_passes(c, "rewritten unchanged")
                rewrite(path, lambda meta: meta.update(reason=meta["reason"] + " (edited)"))
                self.assertTrue(load_vector(path).meta["reason"].endswith("(edited)"))
                self.assert_fails(c, "reason changed", "metadata differs")
                # the certified error alone may change (libms differ): still passes
                rewrite(path, lambda meta: meta.update(reason=meta["reason"][:-len(" (edited)")]))
                def doubled(meta):
                    meta["certified"]["max_error"] *= 2
                rewrite(path, doubled)
                self.assert_passes(c, "certified error changed")

    def test_out_refuses_to_overwrite_without_force(self):
        c = self.cases[0]
        dst = os.path.join(self.dir, c["path"])
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        junk = b"an older file that must not be lost\n"
        with open(dst, "wb") as f:
            f.write(junk)
        rc, out = generate("--out", self.dir, "--only", c["id"])
        self.assertNotEqual(rc, 0, out)
        self.assertIn("exist already", out)
        self.assertIn("--force", out)
        with open(dst, "rb") as f:
            self.assertEqual(f.read(), junk, "the file must be left as it was")
        self.assertFalse(os.path.exists(dst + ".tmp"))

        rc, out = generate("--out", self.dir, "--only", c["id"], "--force")
        self.assertEqual(rc, 0, out)
        with open(dst, "rb") as f:
            self.assertNotEqual(f.read(), junk, "--force replaces the file")
        self.assertEqual(load_vector(dst).id, c["id"])
        self.assert_passes(c, "written with --force")
        self.assertFalse(os.path.exists(os.path.join(self.dir, "MANIFEST.json")), "--only writes no manifest")

        # a file that does not exist yet is written without --force
        other = self.cases[1]
        rc, out = generate("--out", self.dir, "--only", other["id"])
        self.assertEqual(rc, 0, out)
        self.assertEqual(load_vector(os.path.join(self.dir, other["path"])).id, other["id"])


if __name__ == "__main__":
    unittest.main()

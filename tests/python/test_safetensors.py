"""The Python safetensors reader and writer (SPEC.md 10.1, 10.2) and the
malformed-file corpus of tests/data."""

import hashlib
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np

from lacs import safetensors as st
from lacs.safetensors import FormatError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(REPO, "tests", "data")
MALFORMED = os.path.join(DATA, "malformed")
VALID = os.path.join(DATA, "valid")


def corpus_files(directory):
    if not os.path.isdir(directory):
        return []
    return sorted(os.path.join(directory, n) for n in os.listdir(directory) if n.endswith(".safetensors"))


def header_of(data):
    (n,) = struct.unpack("<Q", data[:8])
    return n, json.loads(data[8:8 + n].decode("utf-8"))


def raw_file(header, data=b""):
    """Bytes of a file with this header text, padded with spaces."""
    h = header.encode("utf-8") if isinstance(header, str) else header
    h += b" " * (-(8 + len(h)) % 8)
    return struct.pack("<Q", len(h)) + h + data


def bits_f32(*bits):
    return np.array(bits, dtype=np.uint32).view(np.float32)


class TempDir(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.dir = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()

    def path(self, name):
        return os.path.join(self.dir, name)


class RoundTrip(TempDir):
    def test_all_dtypes_round_trip(self):
        rng = np.random.default_rng(1)
        f64 = rng.standard_normal((2, 3))
        f32 = rng.standard_normal((4,)).astype(np.float32)
        i64 = np.array([0, 5, -7, 2**62], dtype=np.int64)
        bf = np.array([1.0, -2.5, 0.15625, 3.0], dtype=np.float32)  # all exact in bfloat16
        p = self.path("all.safetensors")
        st.write(p, {"f64": f64, "f32": f32, "i64": i64, "bf": ("BF16", bf)}, {"k": "v", "é": "ü"})
        f = st.read(p)
        self.assertEqual(set(f.tensors), {"f64", "f32", "i64", "bf"})
        self.assertEqual(f.metadata, {"k": "v", "é": "ü"})
        for name, want, dtype, npdtype in (("f64", f64, "F64", np.float64), ("f32", f32, "F32", np.float32),
                                           ("i64", i64, "I64", np.int64), ("bf", bf, "BF16", np.float32)):
            t = f.tensors[name]
            self.assertEqual(t.dtype, dtype)
            self.assertEqual(t.shape, want.shape)
            a = t.array()
            self.assertEqual(a.dtype, npdtype)
            np.testing.assert_array_equal(a, want)
        self.assertEqual(f.tensors["f64"].raw, f64.astype("<f8").tobytes())
        self.assertEqual(f.tensors["bf"].raw, struct.pack("<4H", 0x3F80, 0xC020, 0x3E20, 0x4040))

    def test_layout_follows_spec_10_1(self):
        p = self.path("layout.safetensors")
        tensors = {
            "z_bf": ("BF16", np.ones(3, np.float32)),
            "a_bf": ("BF16", np.ones(1, np.float32)),
            "m_f32": np.ones(3, np.float32),
            "b_f32": np.ones(1, np.float32),
            "y_i64": np.arange(2, dtype=np.int64),
            "c_f64": np.ones(1),
            "x_f64": np.ones(2),
        }
        st.write(p, tensors, {"lacs": "{}"})
        with open(p, "rb") as fh:
            data = fh.read()
        n, header = header_of(data)
        self.assertEqual((8 + n) % 8, 0)
        self.assertTrue(data[8:8 + n].rstrip(b" ").endswith(b"}"))
        order = sorted((v["data_offsets"], k) for k, v in header.items() if k != "__metadata__")
        self.assertEqual([k for _, k in order], ["c_f64", "x_f64", "y_i64", "b_f32", "m_f32", "a_bf", "z_bf"])
        pos = 0
        for (begin, end), name in order:
            self.assertEqual(begin, pos, name)
            size = st.DTYPE_SIZES[header[name]["dtype"]]
            self.assertEqual(begin % size, 0, name)
            pos = end
        self.assertEqual(pos, len(data) - 8 - n)
        self.assertEqual(header["__metadata__"], {"lacs": "{}"})

    def test_scalar_and_zero_size(self):
        p = self.path("shapes.safetensors")
        st.write(p, {"s": np.float64(2.5), "e": np.zeros((0, 3), np.float32), "z": ("BF16", np.zeros((2, 0), np.float32)),
                     "i": np.zeros((0,), np.int64)})
        f = st.read(p)
        self.assertEqual(f.tensors["s"].shape, ())
        self.assertEqual(f.tensors["s"].array().shape, ())
        self.assertEqual(float(f.tensors["s"].array()), 2.5)
        self.assertEqual(f.tensors["e"].shape, (0, 3))
        self.assertEqual(f.tensors["e"].array().shape, (0, 3))
        self.assertEqual(f.tensors["z"].array().shape, (2, 0))
        self.assertEqual(f.tensors["i"].raw, b"")
        with open(p, "rb") as fh:
            data = fh.read()
        n, header = header_of(data)
        self.assertEqual(header["s"]["shape"], [])
        self.assertEqual(len(data), 8 + n + 8)

    def test_bf16_rounds_to_nearest_even(self):
        cases = [
            (0x3F800000, 0x3F80),  # exact
            (0x3F808000, 0x3F80),  # tie, even below
            (0x3F818000, 0x3F82),  # tie, even above
            (0x3F808001, 0x3F81),  # just above the tie
            (0x3F807FFF, 0x3F80),  # just below the tie
            (0xBF818000, 0xBF82),  # negative tie
            (0x7F7FFFFF, 0x7F80),  # rounds up to infinity
            (0x7F800000, 0x7F80),  # infinity
            (0xFF800000, 0xFF80),  # -infinity
            (0x80000000, 0x8000),  # -0
            (0x00008000, 0x0000),  # subnormal tie, even below
            (0x00018000, 0x0002),  # subnormal tie, even above
        ]
        x = bits_f32(*[c[0] for c in cases])
        np.testing.assert_array_equal(st.bf16_bits(x), np.array([c[1] for c in cases], np.uint16))
        p = self.path("bf.safetensors")
        st.write(p, {"x": ("BF16", x)})
        got = np.frombuffer(st.read(p).tensors["x"].raw, "<u2")
        np.testing.assert_array_equal(got, [c[1] for c in cases])

    def test_bf16_nan_stays_nan(self):
        x = bits_f32(0x7F800001, 0x7FC00000, 0xFFC00000, 0x7FFFFFFF, 0xFF800001)
        bits = st.bf16_bits(x)
        widened = (bits.astype(np.uint32) << 16).view(np.float32)
        self.assertTrue(np.all(np.isnan(widened)), [hex(b) for b in bits])
        self.assertEqual(list(np.signbit(widened)), [False, False, True, False, True])
        p = self.path("nan.safetensors")
        st.write(p, {"x": ("BF16", x), "y": x.copy()})
        f = st.read(p)
        self.assertTrue(np.all(np.isnan(f.tensors["x"].array())))
        np.testing.assert_array_equal(f.tensors["y"].array().view(np.uint32), x.view(np.uint32))  # F32 NaNs bit-exact

    def test_bf16_from_bits_and_exact_float64(self):
        p = self.path("b.safetensors")
        st.write(p, {"bits": ("BF16", np.array([0x3F80, 0x7FC1], np.uint16)), "f": ("BF16", np.array([1.5, -2.0]))})
        f = st.read(p)
        self.assertEqual(f.tensors["bits"].raw, struct.pack("<2H", 0x3F80, 0x7FC1))
        np.testing.assert_array_equal(f.tensors["f"].array(), np.array([1.5, -2.0], np.float32))
        with self.assertRaises(ValueError):
            st.encode({"f": ("BF16", np.array([0.1]))})  # 0.1 is not a float32: would round twice

    def test_widening_is_exact(self):
        t = st.Tensor("x", "BF16", (3,), struct.pack("<3H", 0x3F81, 0x0001, 0xFF7F))
        a = t.array()
        self.assertEqual(a.dtype, np.float32)
        np.testing.assert_array_equal(a.view(np.uint32), [0x3F810000, 0x00010000, 0xFF7F0000])
        t = st.Tensor("x", "I64", (2,), struct.pack("<2q", -1, 2**63 - 1))
        np.testing.assert_array_equal(t.array(), [-1, 2**63 - 1])
        # Little-endian explicitly, whatever the machine.
        t = st.Tensor("x", "F32", (1,), b"\x00\x00\x80\x3f")
        self.assertEqual(t.array()[0], 1.0)

    def test_refuses_to_overwrite(self):
        p = self.path("x.safetensors")
        st.write(p, {"a": np.ones(1)})
        with open(p, "rb") as fh:
            before = fh.read()
        with self.assertRaises(FileExistsError):
            st.write(p, {"a": np.zeros(2)})
        with open(p, "rb") as fh:
            self.assertEqual(fh.read(), before)
        self.assertFalse(os.path.exists(p + ".tmp"))
        st.write(p, {"a": np.zeros(2)}, overwrite=True)
        np.testing.assert_array_equal(st.read(p).tensors["a"].array(), [0.0, 0.0])
        self.assertFalse(os.path.exists(p + ".tmp"))

    def test_failed_write_leaves_nothing(self):
        p = os.path.join(self.dir, "no-such-dir", "x.safetensors")
        with self.assertRaises(OSError):
            st.write(p, {"a": np.ones(1)})
        self.assertFalse(os.path.exists(p))

    def test_writer_refuses_bad_input(self):
        for tensors, exc in (
            ({"": np.ones(1)}, ValueError),
            ({"__metadata__": np.ones(1)}, ValueError),
            ({"a": np.ones([1] * 9)}, ValueError),
            ({"a": ("F16", np.ones(1))}, ValueError),
            ({"a": np.ones(1, np.float16)}, TypeError),
            ({"a": np.ones(1, np.int32)}, TypeError),
            ({"a": ("I64", np.ones(1))}, TypeError),
            ({"a": ("F32", np.array([0.1]))}, ValueError),
        ):
            with self.subTest(tensors=repr(tensors)):
                with self.assertRaises(exc):
                    st.encode(tensors)
        with self.assertRaises(TypeError):
            st.encode({"a": np.ones(1)}, {"k": 1})

    def test_read_missing_file_is_oserror(self):
        with self.assertRaises(FileNotFoundError):
            st.read(self.path("absent.safetensors"))

    def test_error_message_format(self):
        e = FormatError("some/path", "gap", "bytes [4, 8)")
        self.assertEqual(str(e), "some/path: gap: bytes [4, 8)")
        self.assertEqual((e.path, e.kind, e.detail), ("some/path", "gap", "bytes [4, 8)"))
        with self.assertRaises(ValueError):
            FormatError("p", "no-such-kind", "x")


A = '"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}'
ONE = struct.pack("<f", 1.0)


class ParseKinds(unittest.TestCase):
    """One in-memory buffer (or more) per kind of SPEC.md 10.2."""

    CASES = [
        ("truncated", b""),
        ("truncated", b"\x00" * 7),
        ("header-length", struct.pack("<Q", 9) + b"{}      "),
        ("header-length", struct.pack("<Q", 2**64 - 1) + b"{}      "),
        ("header-utf8", raw_file(b'{"\xc3":{}}')),
        ("header-utf8", raw_file(b'{"\xf0\x9f\x98":{}}')),
        ("header-json", raw_file("{")),
        ("header-json", raw_file('"a"')),
        ("header-json", raw_file('{"a":null}')),
        ("header-json", raw_file('{"a":{"dtype":"F32","shape":[-Infinity],"data_offsets":[0,4]}}', ONE)),
        ("header-json", raw_file("[" * 5000 + "]" * 5000)),
        ("header-json", raw_file('{"\\udc00":{}}')),
        ("duplicate-name", raw_file('{%s,%s}' % (A, A), ONE)),
        ("duplicate-name", raw_file('{"a":{"shape":[1],"shape":[1],"dtype":"F32","data_offsets":[0,4]}}', ONE)),
        ("dtype", raw_file('{"a":{"dtype":"F32 ","shape":[1],"data_offsets":[0,4]}}', ONE)),
        ("dtype", raw_file('{"a":{"dtype":null,"shape":[1],"data_offsets":[0,4]}}', ONE)),
        ("shape", raw_file('{"a":{"dtype":"F32","shape":[[1]],"data_offsets":[0,4]}}', ONE)),
        ("shape", raw_file('{"a":{"dtype":"F64","shape":[9223372036854775807,4],"data_offsets":[0,4]}}', ONE)),
        ("offsets", raw_file('{"a":{"dtype":"F32","shape":[1],"data_offsets":[false,4]}}', ONE)),
        ("offsets", raw_file('{"a":{"dtype":"F32","shape":[1],"data_offsets":null}}', ONE)),
        ("byte-count", raw_file('{"a":{"dtype":"BF16","shape":[1],"data_offsets":[0,4]}}', ONE)),
        ("overlap", raw_file('{%s,"b":{"dtype":"BF16","shape":[1],"data_offsets":[2,4]}}' % A, ONE)),
        ("gap", raw_file('{"a":{"dtype":"BF16","shape":[1],"data_offsets":[2,4]}}', ONE)),
        ("metadata", raw_file('{"__metadata__":{"k":["v"]},%s}' % A, ONE)),
        ("metadata", raw_file('{"__metadata__":false,%s}' % A, ONE)),
    ]

    def test_each_kind(self):
        kinds = set()
        for kind, data in self.CASES:
            with self.subTest(kind=kind, data=data[:80]):
                with self.assertRaises(FormatError) as cm:
                    st.parse(data, "mem")
                self.assertEqual(cm.exception.kind, kind, str(cm.exception))
                self.assertEqual(cm.exception.path, "mem")
                self.assertTrue(str(cm.exception).startswith(f"mem: {kind}: "))
                kinds.add(kind)
        self.assertEqual(kinds, set(st.KINDS))

    def test_header_over_100_mb(self):
        n = st.MAX_HEADER + 1
        data = struct.pack("<Q", n) + b"{}" + b" " * (n - 2)
        with self.assertRaises(FormatError) as cm:
            st.parse(data, "big")
        self.assertEqual(cm.exception.kind, "header-length")
        # Exactly 100 MB is allowed (it gets to the JSON).
        n = st.MAX_HEADER
        data = struct.pack("<Q", n) + b"{}" + b" " * (n - 2)
        f = st.parse(data, "big")
        self.assertEqual(f.tensors, {})

    def test_checks_run_in_spec_order(self):
        # Each buffer has two defects; the earlier kind of SPEC.md 10.2 wins.
        for want, data in (
            ("header-json", raw_file('{"a":1,"a":{}}')),
            ("duplicate-name", raw_file('{"a":{"dtype":"X"},"a":{"dtype":"Y"}}')),
            ("dtype", raw_file('{"__metadata__":1,"a":{"dtype":"X","shape":-1}}')),
            ("shape", raw_file('{"a":{"dtype":"F32","shape":-1,"data_offsets":-1}}')),
            ("offsets", raw_file('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,99]}}', ONE)),
            ("byte-count", raw_file('{%s,"b":{"dtype":"F32","shape":[1],"data_offsets":[0,2]}}' % A, ONE)),
            ("overlap", raw_file('{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},'
                                 '"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', ONE * 2)),
            ("gap", raw_file('{"__metadata__":[],"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', ONE * 2)),
            # Per tensor in header order: b's dtype comes before a's shape only if b is first.
            ("shape", raw_file('{"a":{"dtype":"F32","shape":-1,"data_offsets":[0,4]},"b":{"dtype":"X"}}', ONE)),
            ("dtype", raw_file('{"b":{"dtype":"X"},"a":{"dtype":"F32","shape":-1,"data_offsets":[0,4]}}', ONE)),
        ):
            with self.subTest(want=want, data=data):
                with self.assertRaises(FormatError) as cm:
                    st.parse(data, "mem")
                self.assertEqual(cm.exception.kind, want, str(cm.exception))

    def test_json_edges(self):
        note = lambda v: raw_file('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"note":%s}}' % v, ONE)
        # Nesting: the root object is level 1, the entry 2; 1000 levels are allowed, 1001 are not (cJSON's limit).
        st.parse(note("[" * 998 + "]" * 998), "mem")
        for kind, data in (
            ("header-json", note("[" * 999 + "]" * 999)),
            ("header-json", note("[" * 100000 + "]" * 100000)),
            ("duplicate-name", note('[{"x":1,"x":2}]')),
            ("shape", raw_file('{"a":{"dtype":"F32","shape":[%s],"data_offsets":[0,4]}}' % ("9" * 5000), ONE)),
            ("offsets", raw_file('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,%s]}}' % ("9" * 5000), ONE)),
            ("shape", raw_file('{"a":{"dtype":"F32","shape":[9007199254740992,0],"data_offsets":[0,0]}}')),
            ("offsets", raw_file('{"a":{"dtype":"F32","shape":[0],"data_offsets":[9007199254740992,9007199254740992]}}')),
            ("shape", raw_file('{"a":{"dtype":"F32","shape":[1E0],"data_offsets":[0,4]}}', ONE)),
            ("header-json", raw_file('{"a\\ud800\\u0041":{}}')),
        ):
            with self.subTest(kind=kind, data=data[:100]):
                with self.assertRaises(FormatError) as cm:
                    st.parse(data, "mem")
                self.assertEqual(cm.exception.kind, kind, str(cm.exception))
        # Integers up to 2^53 - 1, -0, and a surrogate pair are fine.
        f = st.parse(raw_file('{"a":{"dtype":"F32","shape":[9007199254740991,0],"data_offsets":[-0,0]},'
                              '"\\ud83d\\ude00":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', ONE), "mem")
        self.assertEqual(f.tensors["a"].shape, (9007199254740991, 0))
        self.assertIn("\U0001F600", f.tensors)

    def test_zero_size_tensors_cover_nothing(self):
        # A zero-size tensor anywhere in the buffer neither overlaps nor fills a gap.
        f = st.parse(raw_file('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
                              '"e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},'
                              '"f":{"dtype":"F32","shape":[0],"data_offsets":[8,8]}}', ONE * 2), "mem")
        self.assertEqual(set(f.tensors), {"a", "e", "f"})
        with self.assertRaises(FormatError) as cm:
            st.parse(raw_file('{"e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}}', ONE * 2), "mem")
        self.assertEqual(cm.exception.kind, "gap")

    def test_valid_buffers(self):
        f = st.parse(raw_file("{}"), "mem")
        self.assertEqual((f.tensors, f.metadata, f.has_metadata), ({}, {}, False))
        f = st.parse(raw_file('{"__metadata__":{},%s}' % A, ONE), "mem")
        self.assertEqual((list(f.tensors), f.metadata, f.has_metadata), (["a"], {}, True))
        self.assertEqual(f.tensors["a"].array().tolist(), [1.0])
        # Unaligned header, JSON whitespace around it, large integer dims with a zero.
        h = b'\r\n{"a":{"dtype":"F64","shape":[0,4294967296],"data_offsets":[0,0]}}\t'
        f = st.parse(struct.pack("<Q", len(h)) + h, "mem")
        self.assertEqual(f.tensors["a"].shape, (0, 4294967296))


class Corpus(unittest.TestCase):
    def test_corpus_is_present(self):
        files = corpus_files(MALFORMED)
        self.assertTrue(files, f"no malformed corpus under {MALFORMED}: run /usr/bin/python3 tests/data/make_corpus.py")
        self.assertTrue(corpus_files(VALID), f"no valid corpus under {VALID}")
        kinds = {}
        for p in files:
            kinds.setdefault(os.path.basename(p).split(".")[0], []).append(p)
        self.assertEqual(set(kinds), set(st.KINDS), "every kind of SPEC.md 10.2 has corpus files, and only those")
        for kind, ps in kinds.items():
            self.assertGreaterEqual(len(ps), 3, f"at least three corpus files of kind {kind}")
        for p in files + corpus_files(VALID):
            self.assertLess(os.path.getsize(p), 2048, p)

    def test_every_malformed_file_has_its_kind(self):
        files = corpus_files(MALFORMED)
        self.assertTrue(files, "the malformed corpus is missing")
        for p in files:
            kind = os.path.basename(p).split(".")[0]
            with self.subTest(file=os.path.basename(p)):
                with self.assertRaises(FormatError) as cm:
                    st.read(p)
                self.assertEqual(cm.exception.kind, kind, str(cm.exception))
                self.assertEqual(cm.exception.path, p)
                self.assertEqual(str(cm.exception), f"{p}: {kind}: {cm.exception.detail}")
                self.assertTrue(cm.exception.detail)
                self.assertEqual(st.dump(p), f"file {p}\nerror {kind}\n")

    def test_every_valid_file_reads(self):
        files = corpus_files(VALID)
        self.assertTrue(files, "the valid corpus is missing")
        for p in files:
            with self.subTest(file=os.path.basename(p)):
                f = st.read(p)
                for t in f.tensors.values():
                    self.assertEqual(t.array().shape, t.shape)
                self.assertTrue(st.dump(p).startswith(f"file {p}\n"))
                self.assertNotIn("\nerror ", st.dump(p))

    def read_valid(self, name):
        p = os.path.join(VALID, name + ".safetensors")
        self.assertTrue(os.path.exists(p), f"{p} is missing from the corpus")
        return st.read(p)

    def test_valid_file_contents(self):
        f = self.read_valid("scalar")
        self.assertEqual(f.tensors["s"].shape, ())
        self.assertEqual(f.tensors["s"].array()[()], 1.5)
        f = self.read_valid("zero-size")
        self.assertEqual({k: t.shape for k, t in f.tensors.items()}, {"x": (1,), "empty": (0, 3), "y": (1,), "z": (2, 0)})
        self.assertEqual(f.tensors["y"].array().tolist(), [3.0])
        self.assertFalse(self.read_valid("no-metadata").has_metadata)
        f = self.read_valid("empty-metadata")
        self.assertTrue(f.has_metadata)
        self.assertEqual(f.metadata, {})
        f = self.read_valid("lacs-style")
        self.assertEqual({k: t.dtype for k, t in f.tensors.items()},
                         {"cu_seqlens": "I64", "expected.o": "F64", "q": "F32", "k": "BF16"})
        self.assertEqual(f.tensors["k"].array().ravel().tolist(), [1.0, -3.0])
        self.assertEqual(f.tensors["cu_seqlens"].array().tolist(), [0, 2])
        self.assertIsInstance(json.loads(f.metadata["lacs"]), dict)
        f = self.read_valid("unicode-name")
        self.assertEqual(list(f.tensors), ["a name é 名 😀"])
        self.assertEqual(f.metadata, {"clé": "valeur ü"})
        f = self.read_valid("ieee-specials")
        a = f.tensors["a"].array()
        self.assertTrue(np.isnan(a[0]) and a[1] == -np.inf and np.signbit(a[2]) and a[3] > 0)
        b = f.tensors["b"].array()
        self.assertTrue(np.isnan(b[0]) and b[1] == np.inf and np.signbit(b[2]) and b[3] > 0)

    def test_corpus_is_up_to_date(self):
        script = os.path.join(DATA, "make_corpus.py")
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([sys.executable, script, tmp], check=True, stdout=subprocess.DEVNULL)
            for sub in ("malformed", "valid"):
                fresh = {os.path.basename(p): p for p in corpus_files(os.path.join(tmp, sub))}
                committed = {os.path.basename(p): p for p in corpus_files(os.path.join(DATA, sub))}
                self.assertEqual(sorted(committed), sorted(fresh), f"tests/data/{sub}: run tests/data/make_corpus.py")
                for name, p in fresh.items():
                    with open(p, "rb") as a, open(committed[name], "rb") as b:
                        self.assertEqual(a.read(), b.read(), f"tests/data/{sub}/{name} differs from make_corpus.py's")


class Dump(TempDir):
    def test_dump_format(self):
        p = self.path("d.safetensors")
        st.write(p, {"b": np.ones(2, np.float32), "a b": np.zeros((1, 2)), 'q"\\\t\x01': np.float64(1), "\U0001F600": np.ones(1),
                     "\uff61": np.ones(1)},
                     {"z": "1", "a": "é"})
        sha = lambda b: hashlib.sha256(b).hexdigest()
        want = (
            f"file {p}\n"
            f'tensor "a b" F64 [1,2] {sha(np.zeros(2).tobytes())}\n'
            f"tensor b F32 [2] {sha(np.ones(2, '<f4').tobytes())}\n"
            f'tensor "q\\"\\\\\\t\\u0001" F64 [] {sha(np.ones(1).tobytes())}\n'
            f"tensor \uff61 F64 [1] {sha(np.ones(1).tobytes())}\n"
            f"tensor \U0001F600 F64 [1] {sha(np.ones(1).tobytes())}\n"
            f"metadata a {sha('é'.encode())}\n"
            f"metadata z {sha(b'1')}\n"
        )
        self.assertEqual(st.dump(p), want)

    def test_dump_error(self):
        p = self.path("bad.safetensors")
        with open(p, "wb") as fh:
            fh.write(b"\x01")
        self.assertEqual(st.dump(p), f"file {p}\nerror truncated\n")


if __name__ == "__main__":
    unittest.main()

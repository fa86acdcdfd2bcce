"""Hostile and careless vectors (issue 17): a corrupt or tampered golden
vector must never produce a pass, crash the checker, or be blamed on the
implementation. Each test copies a few committed vectors (with their own
MANIFEST.json, support.VectorCopy), corrupts them, and runs `build/lacs`
(and the Python harness where it reads vectors) on them.

Where a test rewrites a vector *and* its manifest hash (rehash), it shows the
checker's own validation of the content at work, not only the hash."""

import json
import os
import re
import shutil
import struct
import tempfile
import unittest

import numpy as np

import support
from support import VectorCopy, hostile_env, lacs, plugin

KIND = r"(metadata|tensor|tolerance|hash|manifest|truncated|header-length)"


class VectorTestCase(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="lacs-hostile-vectors-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def copy(self, *case_ids):
        return VectorCopy(os.path.join(self.tmp, "vectors"), case_ids)

    def check(self, copy, mode="", *args, impl=None, **kwargs):
        impl = impl or plugin("hostile")
        return lacs("check", "--impl", impl, "--vectors", copy.root, *args, env=hostile_env(mode), **kwargs)

    def assertRefused(self, result, case_id, path, *words):
        """The run is an input error (exit 2), the case FAILs naming the file and
        the problem, and no conformance is claimed."""
        self.assertEqual(result.returncode, 2, result)
        self.assertEqual(result.status_of(case_id), "FAIL", result)
        detail = result.detail_of(case_id)
        self.assertIn(path, detail, result)
        self.assertFalse(detail.startswith("lacs: "), detail)  # the path first, then the kind
        for word in words:
            self.assertIn(word, detail, result)
        self.assertNotIn("conforms to lacs spec", result.lines[-1] if result.lines else "", result)

    def candidate_from_goldens(self, copy, case_id, change=None):
        """A file of outputs equal to the goldens (F32), changed by change(dict)."""
        golden = support.st.read(copy.path(case_id))
        outputs = {name[len("expected."):]: t.array().astype(np.float32) for name, t in golden.tensors.items()
                   if name.startswith("expected.")}
        if change:
            change(outputs)
        path = os.path.join(self.tmp, case_id + "-candidate.safetensors")
        support.st.write(path, outputs, overwrite=True)
        return path

    def assertOneLineError(self, result, path, kind):
        self.assertEqual(result.returncode, 2, result)
        lines = result.stderr.splitlines()
        self.assertEqual(len(lines), 1, result)
        self.assertRegex(lines[0], r"^lacs: " + re.escape(path) + r": " + kind + r": ", result)
        self.assertNotIn("lacs: lacs:", lines[0])


class CuSeqlens(VectorTestCase):
    """Crashes: cu_seqlens never checked against T."""

    CASE = "linear_attn-fp32-varlen"

    def set_cu(self, copy, values):
        def change(tensors):
            tensors["cu_seqlens"] = ("I64", np.array(values, dtype=np.int64))
        copy.rewrite(self.CASE, tensors=change)

    def test_cu_seqlens_beyond_T_is_refused_by_compare_check_and_harness(self):
        copy = self.copy(self.CASE)
        candidate = self.candidate_from_goldens(copy, self.CASE)
        self.set_cu(copy, [0, 0, 1, 17, 17, 66, 1 << 40])
        path = copy.path(self.CASE)
        compared = lacs("compare", path, candidate)
        self.assertOneLineError(compared, path, "tensor")
        self.assertIn("cu_seqlens", compared.stderr)
        self.assertRefused(self.check(copy, "correct"), self.CASE, path, "cu_seqlens")
        harnessed = support.harness("check", "--impl", support.python_impl("linear_attn_zeros"), "--vectors", copy.root)
        self.assertEqual(harnessed.returncode, 2, harnessed)
        self.assertIn("cu_seqlens", harnessed.detail_of(self.CASE) or "", harnessed)

    def test_short_or_decreasing_cu_seqlens_cannot_hide_wrong_tokens(self):
        for values in ([0, 0, 1, 17, 17, 66, 70], [0, 0, 17, 1, 17, 66, 130]):
            copy = self.copy(self.CASE)
            self.set_cu(copy, values)
            path = copy.path(self.CASE)

            def spoil(outputs):
                outputs["o"][:, 70:] = 1e6
            candidate = self.candidate_from_goldens(copy, self.CASE, spoil)
            compared = lacs("compare", path, candidate)
            self.assertOneLineError(compared, path, "tensor")
            self.assertIn("cu_seqlens", compared.stderr)
            shutil.rmtree(copy.root)


class Hashes(VectorTestCase):
    """Vectors are trusted: a flipped bit must be caught by the manifest's SHA-256."""

    CASE = "linear_attn-fp32-t64"

    def test_a_flipped_gauge_bit_is_refused(self):
        copy = self.copy(self.CASE, "linear_attn-fp32-t65")
        path = copy.path(self.CASE)
        gauge = support.st.read(path).tensors["gauge.o"].array()
        B, T, HV, V = gauge.shape
        for b in range(B):  # one bit of one element per block (batch, head): 0.891 -> 3.03e38
            for h in range(HV):
                i = ((b * T) * HV + h) * V
                self.assertTrue(0 < gauge.reshape(-1)[i] < 1)
                copy.flip_bit(self.CASE, "gauge.o", i, 30)
        result = self.check(copy, "add1000")
        self.assertRefused(result, self.CASE, path, "hash", "MANIFEST.json")
        self.assertEqual(result.status_of("linear_attn-fp32-t65"), "FAIL")  # add1000 is wrong there as well
        compared = lacs("compare", path, self.candidate_from_goldens(copy, self.CASE))
        self.assertOneLineError(compared, path, "hash")

    def test_no_manifest_is_refused_unless_asked(self):
        copy = self.copy(self.CASE)
        os.remove(os.path.join(copy.root, "MANIFEST.json"))
        result = self.check(copy, "correct")
        self.assertEqual(result.returncode, 2, result)
        self.assertIn("MANIFEST.json", result.stderr)
        self.assertIn("--no-verify", result.stderr)
        unverified = self.check(copy, "correct", "--no-verify")
        self.assertEqual(unverified.returncode, 0, unverified)
        self.assertIn("unverified", unverified.stdout)

    def test_a_file_the_manifest_does_not_list_fails(self):
        copy = self.copy(self.CASE)
        shutil.copyfile(os.path.join(support.CORE, "linear_attn", "linear_attn-fp32-t65.safetensors"),
                        os.path.join(copy.root, "linear_attn", "linear_attn-fp32-t65.safetensors"))
        result = self.check(copy, "correct")
        self.assertRefused(result, "linear_attn-fp32-t65", "linear_attn-fp32-t65.safetensors", "not listed")


class Tolerances(VectorTestCase):
    """Tolerance metadata at face value: each variant, rehashed so that the
    manifest agrees, lets a wrong plugin pass unless the checker compares the
    tolerance with its model's own constants."""

    CASE = "linear_attn-fp32-t64"

    def refused(self, mode, meta=None, text=None, *words):
        copy = self.copy(self.CASE)
        copy.rewrite(self.CASE, meta=meta, text=text)
        path = copy.path(self.CASE)
        result = self.check(copy, mode)
        self.assertRefused(result, self.CASE, path, "tolerance", *words)
        compared = lacs("compare", path, self.candidate_from_goldens(copy, self.CASE))
        self.assertOneLineError(compared, path, "tolerance")

    def test_infinite_unit_roundoff(self):
        def placeholder(m):
            m["tolerance"]["unit_roundoff"] = 12345.5
        self.refused("huge", placeholder, lambda s: s.replace("12345.5", "1e999"), "unit_roundoff")

    def test_huge_factors(self):
        def huge(m):
            m["tolerance"]["elementwise_factor"] = 1e300
            m["tolerance"]["normwise_factor"] = 1e300
        self.refused("zeros", huge, None, "factor")

    def test_legacy_model(self):
        def legacy(m):
            m["tolerance"] = {"model": "provisional-normwise/1", "normwise": 1e300}
        self.refused("huge", legacy, None, "provisional-normwise/1")

    def test_bf16_unit_roundoff_on_an_fp32_vector(self):
        def bf16(m):
            m["tolerance"]["unit_roundoff"] = 2.0 ** -8
        self.refused("scale1pct", bf16, None, "unit_roundoff")

    def test_inflated_length_factor(self):
        def inflated(m):
            m["tolerance"]["length_factor"]["o"] = 1e10
        self.refused("scale1pct", inflated, None, "length_factor")

    def test_infinite_gauge_is_refused_not_reported_as_no_difference(self):
        copy = self.copy(self.CASE)

        def infinite(tensors):
            dtype, gauge = tensors["gauge.o"]
            tensors["gauge.o"] = (dtype, np.full_like(gauge, np.inf))
        copy.rewrite(self.CASE, tensors=infinite)
        path = copy.path(self.CASE)

        def wrong(outputs):
            outputs["o"] += 1
        compared = lacs("compare", path, self.candidate_from_goldens(copy, self.CASE, wrong))
        self.assertOneLineError(compared, path, "tensor")
        self.assertIn("gauge.o", compared.stderr)
        self.assertNotIn("no element differs", compared.stdout)


class Contents(VectorTestCase):
    def test_missing_cases_listed_in_the_manifest_fail(self):
        kept = ["linear_attn-fp32-t64", "linear_attn-fp32-t65"]
        deleted = ["delta_rule-fp32-t64", "delta_rule-fp32-t65"]
        copy = self.copy(*kept, *deleted)
        shutil.rmtree(os.path.join(copy.root, "delta_rule"))
        result = self.check(copy, "correct")  # the plugin is wrong on every delta_rule case
        self.assertEqual(result.returncode, 2, result)
        for case_id in deleted:
            self.assertEqual(result.status_of(case_id), "FAIL", result)
            self.assertIn("missing", result.detail_of(case_id))
        for case_id in kept:
            self.assertEqual(result.status_of(case_id), "PASS", result)
        only_linear = self.check(copy, "correct", "--op", "linear_attn")  # the filter leaves them out
        self.assertEqual(only_linear.returncode, 0, only_linear)
        listed = lacs("list", "--vectors", copy.root)
        self.assertIn("missing", listed.stdout)

    def test_an_output_left_out_of_the_metadata_is_refused(self):
        case = "linear_attn-fp32-t64"
        copy = self.copy(case)

        def drop_ht(m):
            m["outputs"] = ["o"]
            del m["tolerance"]["length_factor"]["ht"]
        copy.rewrite(case, meta=drop_ht)
        self.assertRefused(self.check(copy, "wrong_ht"), case, copy.path(case), "metadata", "ht")

    def test_a_negative_split_is_the_vectors_fault_not_the_implementations(self):
        case = "linear_attn-fp32-carry37"
        copy = self.copy(case)

        def negative(m):
            m["params"]["split"] = -5
        copy.rewrite(case, meta=negative)
        result = self.check(copy, "correct")
        self.assertRefused(result, case, copy.path(case), "metadata", "split")
        self.assertNotIn("plugin returned", result.stdout)

    def test_vector_layer_errors_name_the_file_and_the_kind_once(self):
        case = "linear_attn-fp32-t64"
        copy = self.copy(case)

        def no_gauge(tensors):
            del tensors["gauge.o"]
        copy.rewrite(case, tensors=no_gauge)
        path = copy.path(case)
        compared = lacs("compare", path, self.candidate_from_goldens(copy, case))
        self.assertOneLineError(compared, path, "tensor")
        self.assertIn("gauge.o", compared.stderr)
        explained = lacs("explain", path)
        self.assertOneLineError(explained, path, "tensor")


class Names(VectorTestCase):
    """Control characters, terminal escapes and non-UTF-8 bytes in ids,
    reasons and file names are escaped on the terminal and in the reports."""

    def test_escapes_in_reasons_and_file_names_are_not_printed_raw(self):
        case = "linear_attn-fp32-t64"
        copy = self.copy(case)

        def evil_reason(m):
            m["reason"] = "clears the screen \x1b[2J\x1b[31m and rings \x07"
        copy.rewrite(case, meta=evil_reason)
        evil_name = os.path.join(copy.root, "linear_attn", "linear_attn-fp32-\x1b]0;owned\x07.safetensors")
        shutil.copyfile(copy.path(case), evil_name)
        for result in (lacs("list", "--vectors", copy.root),
                       self.check(copy, "correct", "--verbose"),
                       lacs("explain", copy.path(case))):
            self.assertNotIn("\x1b", result.stdout + result.stderr, result)
            self.assertNotIn("\x07", result.stdout + result.stderr, result)
        self.assertIn("\\x1B", lacs("list", "--vectors", copy.root).stdout)

    def test_non_utf8_file_names_give_valid_json_and_junit(self):
        case = "linear_attn-fp32-t64"
        copy = self.copy(case)
        folder = os.fsencode(os.path.join(copy.root, "linear_attn"))
        shutil.copyfile(copy.path(case), os.path.join(folder, b"linear_attn-fp32-\xff\xfe.safetensors"))
        report, junit = os.path.join(self.tmp, "r.json"), os.path.join(self.tmp, "r.xml")
        result = self.check(copy, "correct", "--json", report, "--junit", junit)
        self.assertIn(result.returncode, (1, 2), result)
        with open(report, "rb") as f:
            parsed = json.loads(f.read().decode("utf-8"))  # strict UTF-8
        self.assertTrue(any("\\xFF" in c["id"] for c in parsed["cases"]), parsed["cases"])
        import xml.etree.ElementTree as ET
        ET.parse(junit)


if __name__ == "__main__":
    unittest.main()

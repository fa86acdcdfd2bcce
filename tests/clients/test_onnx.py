"""ONNX as a client (examples/onnx/lacs_onnx.py): the `onnx` package's
reference evaluator for `LinearAttention` (opset 27), from PyPI (onnx 1.23.2,
tests/clients/requirements.txt), run through the Python harness on the
linear family and the delta rules, must pass every case; two mapping
mistakes (ONNX's default scale, q/k heads tiled instead of repeated) must
fail."""

import importlib.metadata
import unittest

from support import CLOSING, check, manifest_ids

ONNX = "python:examples/onnx/lacs_onnx.py:run"
OPS = ("linear_attn", "retention", "simple_gla", "gla", "delta_rule", "gated_delta_rule")


class OnnxReference(unittest.TestCase):
    def test_the_pinned_onnx_has_linear_attention_in_opset_27(self):
        from onnx import defs
        self.assertEqual(importlib.metadata.version("onnx"), "1.23.2")
        schema = defs.get_schema("LinearAttention", 27)
        self.assertEqual(schema.since_version, 27)
        self.assertEqual(schema.attributes["update_rule"].default_value.s, b"gated_delta")

    def test_the_reference_evaluator_passes_every_case_of_the_linear_family_and_the_delta_rules(self):
        status, out, err, cases = check(ONNX, OPS)
        self.assertEqual(status, 0, out + err)
        ids = manifest_ids(OPS)
        self.assertEqual(sorted(cases), ids)
        self.assertEqual(CLOSING.search(out).groups(), (str(len(ids)), "0", "0"))
        self.assertEqual({c["status"] for c in cases.values()}, {"PASS"})
        self.assertEqual(out.splitlines()[-1], "conforms to lacs spec 1.4 for ops " + ", ".join(OPS) +
                         " in tiers fp32, bf16")

    def test_mapping_mistakes_fail(self):
        for mistake, flag in (("scale-default", "CustomScale"), ("heads-tiled", "GroupedValueHeads")):
            status, out, err, cases = check(ONNX, ("linear_attn", "delta_rule", "gated_delta_rule"),
                                            env={"LACS_ONNX_MISTAKE": mistake})
            self.assertEqual(status, 1, mistake + out + err)
            failed = [c for c in cases.values() if c["status"] == "FAIL"]
            self.assertGreaterEqual(len(failed), 6, mistake)
            self.assertTrue(all(c["ratio"] is None or c["ratio"] >= 2 for c in failed), mistake)
            self.assertTrue(all(flag in c["id"] or c["id"].endswith(("-scale", "-hv2h")) for c in failed), mistake)


if __name__ == "__main__":
    unittest.main()

"""fla as a client (examples/fla/lacs_fla.py), verified on the CPU: the
adapter's mapping of lacs's cases onto fla's chunk_* / fused_recurrent_* APIs
(scale, initial_state, output_final_state, cu_seqlens, GVA, the state carry,
chunk_linear_attn's normalize, chunk_kda's log gate, comba's argument order)
runs with LACS_FLA_MODE=naive, where fla-core 0.6.0's own pure-PyTorch
reference functions (fla/ops/*/naive.py of the installed package) answer the
calls. Every required case of the seven mapped ops must pass (fla's Comba
prefix sum fails the strict comba-fp32-strong, as SPEC.md 11.7 says it
does); three mapping mistakes must fail; the kernels themselves (Triton)
need a GPU: here a chunk-mode run fails each case with the reason.
"""

import importlib.metadata
import unittest

from support import CLOSING, check, manifest_ids

FLA = "python:examples/fla/lacs_fla.py:run"
OPS = ("linear_attn", "retention", "simple_gla", "gla", "delta_rule", "gated_delta_rule", "comba")


class FlaNaive(unittest.TestCase):
    def test_the_pinned_fla_core(self):
        self.assertEqual(importlib.metadata.version("fla-core"), "0.6.0")

    def test_the_mapping_passes_every_required_case_of_the_mapped_ops(self):
        status, out, err, cases = check(FLA, OPS, env={"LACS_FLA_MODE": "naive"})
        self.assertEqual(status, 0, out + err)
        ids = manifest_ids(OPS)
        self.assertEqual(sorted(cases), ids)
        failed = sorted(i for i, c in cases.items() if c["status"] != "PASS")
        self.assertEqual(failed, ["comba-fp32-strong"])  # fla's cumsum(g) - g (SPEC.md 11.7)
        self.assertTrue(cases["comba-fp32-strong"]["strict"])
        self.assertEqual(CLOSING.search(out).groups(), (str(len(ids) - 1), "1", "0"))
        self.assertEqual(out.splitlines()[-1], "conforms to lacs spec 1.4 for ops " + ", ".join(OPS) +
                         " in tiers fp32, bf16")

    def test_mapping_mistakes_fail(self):
        for mistake, ops, marks in (("scale-none", ("delta_rule", "gla"), ("-scale",)),
                                    ("normalize-default", ("linear_attn",), ("linear_attn-",)),
                                    ("state-not-carried", ("delta_rule", "gated_delta_rule"), ("-carry",))):
            status, out, err, cases = check(FLA, ops, env={"LACS_FLA_MODE": "naive", "LACS_FLA_MISTAKE": mistake})
            self.assertEqual(status, 1, mistake + out + err)
            failed = [i for i, c in cases.items() if c["status"] == "FAIL"]
            self.assertGreaterEqual(len(failed), 4, mistake)
            self.assertTrue(all(any(m in i for m in marks) for i in failed), (mistake, failed))

    def test_the_kernels_need_triton_and_a_gpu(self):
        import importlib.util
        if importlib.util.find_spec("triton") is not None:
            self.skipTest("Triton is installed here: the kernels are checked by the GPU run (README)")
        status, out, err, cases = check(FLA, ("delta_rule",), env={"LACS_FLA_MODE": "chunk",
                                                                  "LACS_FLA_DEVICE": "cpu"})
        self.assertEqual(status, 1, out + err)
        self.assertEqual({c["status"] for c in cases.values()}, {"FAIL"})
        self.assertTrue(all("triton" in (c["message"] or "").lower() for c in cases.values()),
                        [c["message"] for c in cases.values()][:3])


if __name__ == "__main__":
    unittest.main()

"""A kernel for the HTML report's test and screenshot (tests/python/test_report.py):
correct in part, as a real kernel under development is. From good.py (written
from SPEC.md): `dyt` correct; `delta_rule` correct in fp32, and in bf16 with a
realistic bug, its state rounded to bfloat16 after every token (tests/zoo's
`bf16_state_every_step`), which the long sequences expose, and without varlen
batches in fp32 (skipped: partial); every other op NotImplementedError (not
claimed).
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import good  # noqa: E402


def _bf16(x):
    """x rounded to the nearest bfloat16 (ties to even), as float64."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return bits.astype(np.uint32).view(np.float32).astype(np.float64)


def _delta_rule_sequence_bf16_state(q, k, v, beta, h, scale, split):
    o = np.zeros(v.shape)
    h_split = h.copy() if split == 0 else None
    for t in range(q.shape[0]):
        u = beta[t][:, None] * (v[t] - np.einsum("hkv,hk->hv", h, k[t]))
        h = _bf16(h + k[t][:, :, None] * u[:, None, :])  # the bug: the state kept in bf16 from token to token
        o[t] = scale * np.einsum("hkv,hk->hv", h, q[t])
        if split is not None and t + 1 == split:
            h_split = h.copy()
    return o, h, h_split


def run(op, inputs, params, case):
    if op == "delta_rule" and case.tier == "fp32" and "cu_seqlens" in inputs:
        raise NotImplementedError("varlen batches: not yet")  # the op is then partial in fp32
    if op == "delta_rule" and case.tier == "bf16":
        saved = good._delta_rule_sequence
        good._delta_rule_sequence = _delta_rule_sequence_bf16_state
        try:
            return good.delta_rule(inputs, params)
        finally:
            good._delta_rule_sequence = saved
    return good.run(op, inputs, params)


run.lacs_describe = {"name": "report demo (bf16 state bug)", "ops": ["delta_rule", "dyt", "linear_attn"]}

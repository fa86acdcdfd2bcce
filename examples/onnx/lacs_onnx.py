"""ONNX's `LinearAttention` (opset 27) as a lacs implementation: each case
becomes a one-node ONNX model run by the `onnx` package's reference evaluator
(onnx.reference.ReferenceEvaluator; verified with onnx 1.23.2 from PyPI).

    python3 -m lacs check --impl python:examples/onnx/lacs_onnx.py:run \\
        --op linear_attn,retention,simple_gla,gla,delta_rule,gated_delta_rule

The mapping (SPEC.md 7.3):

| lacs op | update_rule | decay | beta |
|---|---|---|---|
| linear_attn | linear | | |
| simple_gla | gated | g [B, T, HV] (per head) | |
| retention | gated | g_gamma at every token | |
| gla | gated | gk [B, T, HV * K] (per key channel) | |
| delta_rule | delta | | beta [B, T, HV] |
| gated_delta_rule | gated_delta | g, or gk per key channel | beta |

Inputs are ONNX's packed `[B, T, H * D]`, the same memory as lacs's
`[B, T, H, D]`. Heads: ONNX groups query heads on k/v heads (GQA), lacs groups
value heads on q/k heads (GVA): q and k are repeated onto the value heads, and
the model has q_num_heads = kv_num_heads = HV. `scale` is always given (ONNX
reads 0 as d_k^-1/2: a case with scale 0 is skipped). ONNX has no varlen: a
varlen batch runs sequence by sequence, each with its row of h0 as
past_state. A state-carry case is two runs, the second from the first's
present_state. Everything is float32, as the evaluator computes.

LACS_ONNX_MISTAKE (for tests/clients/test_onnx.py only) makes a mapping
mistake, to show that lacs catches it: `scale-default` (scale 0: ONNX's
d_k^-1/2), `heads-tiled` (q, k tiled onto the value heads, as ggml groups
them, instead of repeated).
"""

import os

import numpy as np

RULES = {"linear_attn": "linear", "retention": "gated", "simple_gla": "gated", "gla": "gated",
         "delta_rule": "delta", "gated_delta_rule": "gated_delta"}
OPSET = 27


def _model(rule, heads, scale, has_decay, has_beta):
    from onnx import TensorProto, helper
    names = ["query", "key", "value", "past_state", "decay" if has_decay else "", "beta" if has_beta else ""]
    while names and names[-1] == "":
        names.pop()
    node = helper.make_node("LinearAttention", names, ["output", "present_state"], q_num_heads=heads,
                            kv_num_heads=heads, scale=float(scale), update_rule=rule)
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names if n]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("output", "present_state")]
    graph = helper.make_graph([node], "lacs_case", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


_EVALUATORS = {}


def _evaluator(rule, heads, scale, has_decay, has_beta):
    from onnx.reference import ReferenceEvaluator
    key = (rule, heads, scale, has_decay, has_beta)
    if key not in _EVALUATORS:
        _EVALUATORS[key] = ReferenceEvaluator(_model(*key))
    return _EVALUATORS[key]


def _one_sequence(op, x, h0, scale):
    """x: the per-token inputs of one sequence, [1, T, ...]; h0 [1, HV, K, V]. Returns (o, present_state)."""
    q, k, v = x["q"], x["k"], x["v"]
    _, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    group = HV // H
    if os.environ.get("LACS_ONNX_MISTAKE") == "heads-tiled":
        q, k = np.tile(q, (1, 1, group, 1)), np.tile(k, (1, 1, group, 1))
    else:
        q, k = np.repeat(q, group, axis=2), np.repeat(k, group, axis=2)  # value head i reads q/k head i // group
    pack = lambda a: np.ascontiguousarray(a, np.float32).reshape(1, T, -1)  # noqa: E731
    feeds = {"query": pack(q), "key": pack(k), "value": pack(v), "past_state": np.ascontiguousarray(h0, np.float32)}
    if op == "retention":
        feeds["decay"] = np.broadcast_to(x["g_gamma"].astype(np.float32), (1, T, HV)).copy()
    elif "gk" in x:
        feeds["decay"] = pack(x["gk"])
    elif "g" in x:
        feeds["decay"] = pack(x["g"])
    if "beta" in x:
        feeds["beta"] = pack(x["beta"])
    run = _evaluator(RULES[op], HV, scale, "decay" in feeds, "beta" in feeds)
    o, state = run.run(None, feeds)
    return o.reshape(1, T, HV, V), state


def run(op, inputs, params):
    if op not in RULES:
        raise NotImplementedError(f"{op}: ONNX's LinearAttention has no update rule for it")
    scale = float(params["scale"])
    if scale == 0.0:
        raise NotImplementedError("ONNX reads scale 0 as d_k^-1/2")
    if os.environ.get("LACS_ONNX_MISTAKE") == "scale-default":
        scale = 0.0
    q, v = inputs["q"], inputs["v"]
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    cu = inputs.get("cu_seqlens")
    sequences = [(b, 0, T) for b in range(B)] if cu is None else \
        [(0, int(cu[n]), int(cu[n + 1])) for n in range(len(cu) - 1)]
    h0 = inputs.get("h0")
    split = int(params["split"]) if "split" in params else None
    per_token = [n for n in ("q", "k", "v", "beta", "g", "gk") if n in inputs]
    o = np.zeros((B, T, HV, V), np.float32)
    ht = np.zeros((len(sequences), HV, K, V), np.float32)
    ht_split = np.zeros_like(ht)
    for n, (b, start, end) in enumerate(sequences):
        state = h0[n:n + 1] if h0 is not None else np.zeros((1, HV, K, V), np.float32)
        cuts = [start, start + split, end] if split is not None else [start, end]
        for part, (a, z) in enumerate(zip(cuts, cuts[1:])):
            if z > a:
                x = {name: inputs[name][b:b + 1, a:z] for name in per_token}
                if "g_gamma" in inputs:
                    x["g_gamma"] = inputs["g_gamma"]
                o[b, a:z], state = (lambda r: (r[0][0], r[1]))(_one_sequence(op, x, state, scale))
            if split is not None and part == 0:
                ht_split[n] = state[0]
        ht[n] = state[0]
    outputs = {"o": o, "ht": ht}
    if split is not None:
        outputs["ht_split"] = ht_split
    return outputs


run.lacs_describe = {"name": "ONNX LinearAttention (opset 27), onnx.reference", "ops": list(RULES)}

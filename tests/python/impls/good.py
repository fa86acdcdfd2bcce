"""A correct implementation for the Python harness, written from SPEC.md
alone (sections 2, 4.4 and 4.15), in float64 NumPy: `delta_rule` and `dyt`.
Every other op raises NotImplementedError, which the harness reports as SKIP.

    PYTHONPATH=python /usr/bin/python3 -m lacs check --impl python:tests/python/impls/good.py:run
"""

import numpy as np


def _delta_rule_sequence(q, k, v, beta, h, scale, split):
    """One sequence of the delta rule (H6, SPEC.md 4.4), every value head at
    once. q, k [T, HV, K] (already mapped onto value heads), v [T, HV, V],
    beta [T, HV], h [HV, K, V] the initial state. Returns o [T, HV, V], the
    final state, and the state after `split` tokens (None without split)."""
    o = np.zeros(v.shape)
    h_split = h.copy() if split == 0 else None
    for t in range(q.shape[0]):
        # u = beta_t (v_t - h_{t-1}^T k_t): the old prediction is read first
        prediction = np.einsum("hkv,hk->hv", h, k[t])
        u = beta[t][:, None] * (v[t] - prediction)
        h = h + k[t][:, :, None] * u[:, None, :]
        o[t] = scale * np.einsum("hkv,hk->hv", h, q[t])
        if split is not None and t + 1 == split:
            h_split = h.copy()
    return o, h, h_split


def delta_rule(inputs, params):
    q, k, v, beta = (inputs[n].astype(np.float64) for n in ("q", "k", "v", "beta"))
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    group = HV // H
    # GVA (SPEC.md 2.2): value head hv reads q/k head hv // group
    q, k = np.repeat(q, group, axis=2), np.repeat(k, group, axis=2)
    scale = params["scale"]
    split = int(params["split"]) if "split" in params else None
    cu_seqlens = inputs.get("cu_seqlens")
    # (batch row, first token, end) of each sequence (SPEC.md 2.5)
    if cu_seqlens is None:
        sequences = [(b, 0, T) for b in range(B)]
    else:
        sequences = [(0, int(cu_seqlens[n]), int(cu_seqlens[n + 1])) for n in range(len(cu_seqlens) - 1)]
    h0 = inputs.get("h0")
    o = np.zeros((B, T, HV, V))
    ht = np.zeros((len(sequences), HV, K, V))
    ht_split = np.zeros_like(ht)
    for n, (b, start, end) in enumerate(sequences):
        h = h0[n].astype(np.float64) if h0 is not None else np.zeros((HV, K, V))
        tokens = slice(start, end)
        o[b, tokens], ht[n], h_split = _delta_rule_sequence(
            q[b, tokens], k[b, tokens], v[b, tokens], beta[b, tokens], h, scale, split)
        if split is not None:
            ht_split[n] = h_split
    outputs = {"o": o, "ht": ht}
    if split is not None:
        outputs["ht_split"] = ht_split
    return outputs


def dyt(inputs, params):
    """y = weight * tanh(alpha x) + bias (N1, SPEC.md 4.15); weight and bias
    optional; alpha x is one rounding (x and alpha are float32, exact in
    double)."""
    # the specials (NaN inputs; alpha = 0 with x = inf, NaN as the spec says) are meant
    with np.errstate(invalid="ignore"):
        x = inputs["x"].astype(np.float64)
        alpha = float(inputs["alpha"].reshape(-1)[0])
        y = np.tanh(alpha * x)
        if "weight" in inputs:
            y = inputs["weight"].astype(np.float64) * y
        if "bias" in inputs:
            y = y + inputs["bias"].astype(np.float64)
    return {"y": y}


IMPLEMENTED = {"delta_rule": delta_rule, "dyt": dyt}


def run(op, inputs, params):
    if op not in IMPLEMENTED:
        raise NotImplementedError(op)
    return IMPLEMENTED[op](inputs, params)

"""A kernel repository in miniature: a delta rule with fla's interface, in
NumPy (float32 in, float32 state and outputs), and a deliberately wrong twin
that applies beta to the new value only, not to the erase term (the bug of
tests/zoo/BUGS.md's `beta_write_only`). run_correct and run_wrong are lacs
harness functions for `pytest --lacs-impl`; test_my_kernels.py tests the
kernels directly with @lacs.pytest.cases.
"""

import numpy as np


def delta_rule(q, k, v, beta, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None,
               erase_with_beta=True):
    """fla's chunk_delta_rule arguments: q, k [B, T, H, K]; v [B, T, HV, V];
    beta [B, T, HV]; initial_state [N, HV, K, V]; cu_seqlens [N + 1] with B = 1.
    Returns (o [B, T, HV, V], final state [N, HV, K, V] or None)."""
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    scale = K ** -0.5 if scale is None else scale
    q, k = np.repeat(q, HV // H, axis=2), np.repeat(k, HV // H, axis=2)  # value head i reads q/k head i // (HV/H)
    bounds = [(0, int(a), int(b)) for a, b in zip(cu_seqlens[:-1], cu_seqlens[1:])] if cu_seqlens is not None \
        else [(b, 0, T) for b in range(B)]
    o = np.zeros((B, T, HV, V), np.float32)
    states = np.zeros((len(bounds), HV, K, V), np.float32)
    for n, (b, start, end) in enumerate(bounds):
        h = np.array(initial_state[n], np.float32) if initial_state is not None else np.zeros((HV, K, V), np.float32)
        for t in range(start, end):
            kt, vt, bt = k[b, t], v[b, t], beta[b, t][:, None]
            old = np.einsum("hkv,hk->hv", h, kt)                  # the value the state predicts for k_t
            u = bt * (vt - old) if erase_with_beta else bt * vt - old
            h = h + kt[:, :, None] * u[:, None, :]
            o[b, t] = scale * np.einsum("hkv,hk->hv", h, q[b, t])
        states[n] = h
    return o, (states if output_final_state else None)


def _run(op, inputs, params, erase_with_beta):
    """lacs's call: state carry by two calls, as a user resumes a kernel."""
    if op != "delta_rule":
        raise NotImplementedError(op)
    args = dict(scale=params["scale"], cu_seqlens=inputs.get("cu_seqlens"), output_final_state=True,
                erase_with_beta=erase_with_beta)
    q, k, v, beta, h0 = (inputs.get(n) for n in ("q", "k", "v", "beta", "h0"))
    if "split" not in params:
        o, ht = delta_rule(q, k, v, beta, initial_state=h0, **args)
        return {"o": o, "ht": ht}
    s = int(params["split"])  # never with cu_seqlens (SPEC.md 10.5)
    o1, h_split = delta_rule(q[:, :s], k[:, :s], v[:, :s], beta[:, :s], initial_state=h0, **args)
    o2, ht = delta_rule(q[:, s:], k[:, s:], v[:, s:], beta[:, s:], initial_state=h_split, **args)
    return {"o": np.concatenate([o1, o2], axis=1), "ht": ht, "ht_split": h_split}


def run_correct(op, inputs, params):
    return _run(op, inputs, params, erase_with_beta=True)


def run_wrong(op, inputs, params):
    return _run(op, inputs, params, erase_with_beta=False)

"""Wrong implementations for the Python harness's tests, one function per
way of being wrong; each is written from SPEC.md (sections 2, 4.4, 4.15) with
its one mistake. Only `delta_rule` and `dyt` are implemented; other ops skip.

  beta_outside_erase  delta_rule with beta missing from the erase term: FAIL
  raises              dyt raising ValueError when there is no weight: those
                      cases FAIL with the message, the run goes on
  wrong_shape         dyt returning y transposed: FAIL naming y and the shapes
  extra_output        dyt returning a `dx` as well: FAIL naming it
  not_numeric         dyt returning strings: FAIL
  not_a_dict          dyt returning the array itself: FAIL
  nan_output          dyt returning NaN everywhere: FAIL with ratio inf
"""

import numpy as np


def _dyt(inputs):
    """The correct y = weight * tanh(alpha x) + bias (N1)."""
    with np.errstate(invalid="ignore"):
        y = np.tanh(float(inputs["alpha"].reshape(-1)[0]) * inputs["x"].astype(np.float64))
        if "weight" in inputs:
            y = inputs["weight"].astype(np.float64) * y
        if "bias" in inputs:
            y = y + inputs["bias"].astype(np.float64)
    return y


def beta_outside_erase(op, inputs, params):
    """h_t = h_{t-1} - k_t (h_{t-1}^T k_t)^T + beta_t k_t v_t^T: the erase term
    without beta (the right one is beta_t k_t (v_t - h_{t-1}^T k_t)^T)."""
    if op != "delta_rule":
        raise NotImplementedError(op)
    q, k, v, beta = (inputs[n].astype(np.float64) for n in ("q", "k", "v", "beta"))
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    q, k = np.repeat(q, HV // H, axis=2), np.repeat(k, HV // H, axis=2)
    cu_seqlens = inputs.get("cu_seqlens")
    if cu_seqlens is None:
        sequences = [(b, 0, T) for b in range(B)]
    else:
        sequences = [(0, int(cu_seqlens[n]), int(cu_seqlens[n + 1])) for n in range(len(cu_seqlens) - 1)]
    o = np.zeros((B, T, HV, V))
    ht = np.zeros((len(sequences), HV, K, V))
    ht_split = np.zeros_like(ht)
    split = int(params["split"]) if "split" in params else None
    for n, (b, start, end) in enumerate(sequences):
        h = inputs["h0"][n].astype(np.float64) if "h0" in inputs else np.zeros((HV, K, V))
        if split == 0:
            ht_split[n] = h
        for t in range(start, end):
            erase = np.einsum("hkv,hk->hv", h, k[b, t])
            u = beta[b, t][:, None] * v[b, t] - erase
            h = h + k[b, t][:, :, None] * u[:, None, :]
            o[b, t] = params["scale"] * np.einsum("hkv,hk->hv", h, q[b, t])
            if split is not None and t + 1 == split:
                ht_split[n] = h
        ht[n] = h
    outputs = {"o": o, "ht": ht}
    if split is not None:
        outputs["ht_split"] = ht_split
    return outputs


def raises(op, inputs, params):
    if op != "dyt":
        raise NotImplementedError(op)
    if "weight" not in inputs:
        raise ValueError("this kernel needs a weight")
    return {"y": _dyt(inputs)}


def wrong_shape(op, inputs, params):
    if op != "dyt":
        return None
    return {"y": _dyt(inputs).T}


def extra_output(op, inputs, params):
    if op != "dyt":
        return None
    y = _dyt(inputs)
    return {"y": y, "dx": np.zeros_like(y)}


def not_numeric(op, inputs, params):
    if op != "dyt":
        return None
    return {"y": np.full(inputs["x"].shape, "text")}


def not_a_dict(op, inputs, params):
    if op != "dyt":
        return None
    return _dyt(inputs)


def nan_output(op, inputs, params):
    if op != "dyt":
        return None
    return {"y": np.full(inputs["x"].shape, np.nan)}

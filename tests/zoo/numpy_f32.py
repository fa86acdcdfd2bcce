"""A plain NumPy float32 implementation of the ops, written the way fla's
naive PyTorch functions are (fla-org/flash-linear-attention bc3b101d,
fla/ops/*/naive.py, fla/modules/layernorm.py's rms_norm_ref): one token at a
time for the recurrences, whole matrices for the attention forms, the norms
and their gradients as the formulas (and autograd) give them. Every array is
float32 and every operation NumPy's float32 one, so its exp is NumPy's SIMD
float32 exp (a few ulp off for some arguments: SPEC.md 11.2's constant-decay
cases test exactly that).

A zoo member (SPEC.md 11.6) at the required level (SPEC.md 11.7), run through
the Python harness:

    PYTHONPATH=python /usr/bin/python3 -m lacs check --impl python:tests/zoo/numpy_f32.py:run

Two of its forms are the field's and not the most robust ones, and the
strict level says so: rmsnorm as rms_norm_ref computes it (x rsqrt(mean x^2 +
eps), unscaled: zero rows and huge values, rmsnorm-*-specials), and sech^2 as
autograd's 1 - tanh^2 (dyt_vjp-*-saturated). Comba reads the un-decayed state
(SPEC.md 4.6), not as fla's naive_recurrent_comba does.
"""

import numpy as np

F = np.float32


def _f(x):
    return np.ascontiguousarray(x, dtype=F)


def _sequences(inputs, B, T):
    """(batch row, first token, last token + 1) of every sequence."""
    cu = inputs.get("cu_seqlens")
    if cu is None:
        return [(b, 0, T) for b in range(B)]
    cu = [int(c) for c in cu]
    return [(0, cu[n], cu[n + 1]) for n in range(len(cu) - 1)]


def _grouped(x, HV):
    """q/k heads repeated for their value heads (GVA, fla's repeat_interleave)."""
    return np.repeat(x, HV // x.shape[-2], axis=-2)


# ---- the recurrences (fla's naive_recurrent_*) ----

RECURRENT = {"linear_attn", "linear_attn_postnorm", "retention", "simple_gla", "gla", "delta_rule",
             "gated_delta_rule", "comba", "efla"}


def _efla_coefficient(beta, knorm2):
    x = beta * knorm2
    small = np.abs(x) < F(1e-7)
    safe = np.where(small, F(1), x)
    phi = np.where(small, F(1) - x / F(2), -np.expm1(-safe) / safe).astype(F)
    return (beta * phi).astype(F)


def _recurrent(op, inputs, params):
    q, k, v = _f(inputs["q"]), _f(inputs["k"]), _f(inputs["v"])
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    scale = F(params["scale"])
    q, k = _grouped(q, HV) * scale, _grouped(k, HV)
    beta = _f(inputs["beta"]) if "beta" in inputs else None
    g, gk = inputs.get("g"), inputs.get("gk")
    if "g_gamma" in inputs:  # retention: chunk_simple_gla's g_gamma, the same log decay at every token
        g = np.broadcast_to(_f(inputs["g_gamma"]), (B, T, HV))
    g = _f(g) if g is not None else None
    gk = _f(gk) if gk is not None else None
    seqs = _sequences(inputs, B, T)
    h0 = _f(inputs["h0"]) if "h0" in inputs else np.zeros((len(seqs), HV, K, V), F)
    split = int(params["split"]) if "split" in params else None
    o = np.zeros((B, T, HV, V), F)
    ht = np.zeros((len(seqs), HV, K, V), F)
    ht_split = np.zeros_like(ht)
    for n, (b, t0, t1) in enumerate(seqs):
        S = h0[n].copy()
        for t in range(t0, t1):
            if split is not None and t == split:
                ht_split[n] = S
            qt, kt, vt = q[b, t], k[b, t], v[b, t]           # [HV, K], [HV, K], [HV, V]
            decay = None
            if g is not None:
                decay = np.exp(g[b, t])[:, None, None]        # [HV, 1, 1]
            elif gk is not None:
                decay = np.exp(gk[b, t])[:, :, None]          # [HV, K, 1]
            if op in ("delta_rule", "gated_delta_rule", "efla", "comba"):
                coef = beta[b, t]
                if op == "efla":
                    coef = _efla_coefficient(coef, (kt * kt).sum(-1))
                if op == "comba":   # H8's second form: the correction reads the un-decayed state
                    u = (vt - (kt[:, :, None] * S).sum(-2)) * coef[:, None]
                    S = S * decay + kt[:, :, None] * u[:, None, :]
                else:               # H6, H8 (fla's order: decay, then the delta step)
                    if decay is not None:
                        S = S * decay
                    u = (vt - (kt[:, :, None] * S).sum(-2)) * coef[:, None]
                    S = S + kt[:, :, None] * u[:, None, :]
            else:                   # H2, H4
                kv = kt[:, :, None] * vt[:, None, :]
                S = S * decay + kv if decay is not None else S + kv
            o[b, t] = (qt[:, :, None] * S).sum(-2)
        if split is not None and t1 - t0 == split:
            ht_split[n] = S
        ht[n] = S
    if op == "linear_attn_postnorm":   # H3: each output row RMS-normalised
        eps = F(params.get("eps", 0.0))
        ms = (o * o).mean(-1, keepdims=True)
        denom = np.sqrt(ms + eps)
        o = np.where(denom > 0, o / np.where(denom > 0, denom, F(1)), F(0)).astype(F)
    out = {"o": o, "ht": ht}
    if split is not None:
        out["ht_split"] = ht_split
    return out


def _mesa(inputs, params):
    """naive_mesa_net_exact: both states token by token, the system solved exactly."""
    q, k, v = _f(inputs["q"]), _f(inputs["k"]), _f(inputs["v"])
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    q, k = _grouped(q, HV), _grouped(k, HV)
    lam = _f(inputs["lambda"])
    g = _f(inputs["g"]) if "g" in inputs else np.zeros((B, T, HV), F)
    beta = _f(inputs["beta"]) if "beta" in inputs else np.ones((B, T, HV), F)
    seqs = _sequences(inputs, B, T)
    h0 = _f(inputs["h0"]) if "h0" in inputs else np.zeros((len(seqs), HV, K, V), F)
    h0kk = _f(inputs["h0_kk"]) if "h0_kk" in inputs else np.zeros((len(seqs), HV, K, K), F)
    split = int(params["split"]) if "split" in params else None
    o = np.zeros((B, T, HV, V), F)
    out = {name: np.zeros((len(seqs), HV, K, cols), F) for name, cols in
           (("ht", V), ("ht_kk", K), ("ht_split", V), ("ht_kk_split", K))}
    eye = np.eye(K, dtype=F)
    for n, (b, t0, t1) in enumerate(seqs):
        S, Hk = h0[n].copy(), h0kk[n].copy()
        for t in range(t0, t1):
            if split is not None and t == split:
                out["ht_split"][n], out["ht_kk_split"][n] = S, Hk
            a = np.exp(g[b, t])[:, None, None]
            kb = k[b, t] * beta[b, t][:, None]
            S = S * a + kb[:, :, None] * v[b, t][:, None, :]
            Hk = Hk * a + kb[:, :, None] * k[b, t][:, None, :]
            x = np.linalg.solve(Hk + lam[:, :, None] * eye, q[b, t][:, :, None])[:, :, 0].astype(F)
            o[b, t] = (x[:, :, None] * S).sum(-2)
        out["ht"][n], out["ht_kk"][n] = S, Hk
    result = {"o": o, "ht": out["ht"], "ht_kk": out["ht_kk"]}
    if split is not None:
        result["ht_split"], result["ht_kk_split"] = out["ht_split"], out["ht_kk_split"]
    return result


# ---- the attention forms (fla's naive_parallel_attn, naive_forgetting_attn, naive_deltaformer_attn,
# naive_path_attn) ----

def _causal_softmax(L, strict=False):
    """Row-wise softmax over j <= i (j < i if strict), the row maximum subtracted; an empty row is 0."""
    T = L.shape[-1]
    mask = np.tril(np.ones((T, T), bool), -1 if strict else 0)
    L = np.where(mask, L, F(-np.inf))
    m = L.max(-1, keepdims=True)
    m = np.where(np.isfinite(m), m, F(0))
    e = np.where(mask, np.exp(L - m), F(0)).astype(F)
    s = e.sum(-1, keepdims=True)
    return (e / np.where(s > 0, s, F(1))).astype(F)


def _attention(op, inputs, params):
    q, k, v = _f(inputs["q"]), _f(inputs["k"]), _f(inputs["v"])
    B, T, H, K = q.shape
    HV = v.shape[2]
    scale = F(params["scale"])
    q, k = _grouped(q, HV), _grouped(k, HV)
    w = _grouped(_f(inputs["w"]), HV) if "w" in inputs else None
    o = np.zeros_like(v)
    for b, t0, t1 in _sequences(inputs, B, T):
        n = t1 - t0
        for hv in range(HV if n > 0 else 0):
            qh, kh, vh = q[b, t0:t1, hv], k[b, t0:t1, hv], v[b, t0:t1, hv]
            if op == "softmax_attn":
                o[b, t0:t1, hv] = _causal_softmax(scale * (qh @ kh.T)) @ vh
            elif op == "fox":
                if "g" in inputs:
                    G = np.cumsum(_f(inputs["g"])[b, t0:t1, hv], dtype=F)
                else:
                    G = np.arange(n, dtype=F) * _f(inputs["g_gamma"])[hv]
                L = scale * (qh @ kh.T) + (G[:, None] - G[None, :])
                o[b, t0:t1, hv] = _causal_softmax(L) @ vh
            elif op == "deltaformer":
                form = int(params.get("form", 1))
                beta = _f(inputs["beta"])[b, t0:t1, hv] if "beta" in inputs else np.ones(n, F)
                first = qh if form == 2 else kh
                if form == 0:
                    Bm = np.tril(np.exp(scale * (first @ kh.T)), -1).astype(F)
                    A = np.tril(np.exp(scale * (qh @ kh.T))).astype(F)
                else:
                    Bm = _causal_softmax(scale * (first @ kh.T), strict=True)
                    A = _causal_softmax(scale * (qh @ kh.T))
                u = np.zeros_like(vh)
                for i in range(n):   # u_i = v_i - beta_i sum_{j<i} B_ij u_j
                    u[i] = vh[i] - beta[i] * (Bm[i, :i] @ u[:i])
                o[b, t0:t1, hv] = A @ u
            elif op == "path_attn":
                wh = w[b, t0:t1, hv]
                beta = _f(inputs["beta"])[b, t0:t1, hv]
                L = np.zeros((n, n), F)
                for j in range(n):   # x = H_i ... H_{j+1} k_j, carried forward
                    x = kh[j].copy()
                    L[j, j] = qh[j] @ x
                    for i in range(j + 1, n):
                        x = x - beta[i] * wh[i] * (wh[i] @ x)
                        L[i, j] = qh[i] @ x
                if "g" in inputs:    # PaTH-FoX: the gate before the scale
                    G = np.cumsum(_f(inputs["g"])[b, t0:t1, hv], dtype=F)
                    L = L + (G[:, None] - G[None, :])
                o[b, t0:t1, hv] = _causal_softmax(scale * L) @ vh
    return {"o": o}


# ---- the norms (fla's rms_norm_ref; the rest as the formulas and PyTorch autograd give them) ----

def _weight(inputs, dim):
    return _f(inputs["weight"]) if "weight" in inputs else np.ones(dim, F)


def _norms(op, inputs, params):
    x = _f(inputs["x"])
    dy = _f(inputs["dy"]) if "dy" in inputs else None
    with np.errstate(all="ignore"):
        if op in ("rmsnorm", "rmsnorm_vjp"):
            eps = F(params["eps"])
            r = F(1) / np.sqrt((x * x).mean(-1, keepdims=True) + eps)   # rms_norm_ref: unscaled
            y = x * r
            w = _weight(inputs, x.shape[-1])
            if op == "rmsnorm":
                return {"y": y * w if "weight" in inputs else y}
            gy = dy * w
            dx = r * (gy - y * (gy * y).mean(-1, keepdims=True))
            out = {"dx": dx}
            if "weight" in inputs:
                out["dweight"] = (dy * y).sum(0)
            return out
        if op in ("l2norm", "l2norm_vjp"):
            eps, conv = F(params["eps"]), int(params.get("convention", 0))
            norm2 = (x * x).sum(-1, keepdims=True)
            d = np.sqrt(norm2 + eps) if conv == 0 else np.maximum(np.sqrt(norm2), eps)
            y = x / d
            if op == "l2norm":
                return {"y": y}
            return {"dx": (dy - y * (dy * y).sum(-1, keepdims=True)) / d}
        if op in ("dyt", "dyt_vjp"):
            alpha = F(np.asarray(inputs["alpha"]).reshape(-1)[0])
            t = np.tanh(alpha * x)
            w = _weight(inputs, x.shape[-1])
            if op == "dyt":
                y = t * w if "weight" in inputs else t
                return {"y": y + _f(inputs["bias"]) if "bias" in inputs else y}
            s2 = F(1) - t * t                                   # autograd's tanh_backward
            gw = dy * w
            out = {"dx": gw * s2 * alpha, "dalpha": np.array([(gw * s2 * x).sum()], F)}
            if "weight" in inputs:
                out["dweight"], out["dbias"] = (dy * t).sum(0), dy.sum(0)
            return out
        if op in ("dyisru", "dyisru_vjp"):
            C = F(np.asarray(inputs["C"]).reshape(-1)[0])
            r = F(1) / np.sqrt(x * x + C)
            y = x * r
            w = _weight(inputs, x.shape[-1])
            if op == "dyisru":
                y = y * w if "weight" in inputs else y
                return {"y": y + _f(inputs["bias"]) if "bias" in inputs else y}
            gw = dy * w
            out = {"dx": gw * C * r * r * r, "dC": np.array([(gw * F(-0.5) * x * r * r * r).sum()], F)}
            if "weight" in inputs:
                out["dweight"], out["dbias"] = (dy * y).sum(0), dy.sum(0)
            return out
        if op in ("softcap", "softcap_vjp"):
            cap = F(params["cap"])
            u = x / cap
            t = np.tanh(u)
            if op == "softcap":
                return {"y": cap * t}
            s2 = F(1) - t * t
            return {"dx": dy * s2, "dcap": np.array([(dy * (t - u * s2)).sum()], F)}
    raise NotImplementedError(op)


SEQUENCE_OPS = set(RECURRENT) | {"mesa_net", "softmax_attn", "fox", "deltaformer", "path_attn"}


def run(op, inputs, params):
    if op.endswith("_vjp") and op[:-len("_vjp")] in SEQUENCE_OPS:
        # the gradients of the ops on sequences (SPEC.md 4.19) are the backward zoo's (backward_f32.c,
        # backward_chunked.c); this port is of the forwards and the norms' VJPs
        raise NotImplementedError(f"{op}: no backward of the ops on sequences in this port")
    if op in RECURRENT:
        return _recurrent(op, inputs, params)
    if op == "mesa_net":
        return _mesa(inputs, params)
    if op in ("softmax_attn", "fox", "deltaformer", "path_attn"):
        return _attention(op, inputs, params)
    return _norms(op, inputs, params)

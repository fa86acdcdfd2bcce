"""The VJPs of the linear family and of softmax attention / FoX, for the Python
harness, by PyTorch autograd: the forwards written plainly from SPEC.md alone
(sections 2, 4.1, 4.3, 4.8, 4.10) in float64 torch ops, differentiated by
torch.autograd.grad with the case's `do` and `dht` as the cotangents of `o`
and `ht` (SPEC.md 4.19). It covers what the gated delta rule's example in the
README does not: a per-head parameter's gradient summed over the tokens
(`dg_gamma` of retention and ALiBi), per-channel gates (`dgk`), and ops without
a state (no `dht`, no `dh0`). Every other op raises NotImplementedError (a SKIP).

    PYTHONPATH=python /usr/bin/python3 -m lacs check --impl python:tests/python/impls/autograd_vjp.py:run \\
        --op linear_attn_vjp,retention_vjp,simple_gla_vjp,gla_vjp,softmax_attn_vjp,fox_vjp

`run_gate_mean` is the same but for dg_gamma averaged over the tokens where SPEC.md 4.19 sums them: a
wrong twin the harness must reject.
"""

import torch

LINEAR = ("linear_attn", "retention", "simple_gla", "gla")
ATTENTION = ("softmax_attn", "fox")


def _sequences(B, T, cu_seqlens):
    if cu_seqlens is None:
        return [(b, 0, T) for b in range(B)]
    return [(0, int(start), int(end)) for start, end in zip(cu_seqlens[:-1], cu_seqlens[1:])]


def _log_decay(x, shape):
    """The log decay of each token, [B, T, HV, K]: g_gamma per head (retention), g per token (simple_gla),
    gk per key channel (gla), none (linear_attn)."""
    B, T, HV, K = shape
    if "g_gamma" in x:
        return x["g_gamma"][None, None, :, None].expand(B, T, HV, K)
    if "g" in x:
        return x["g"][..., None].expand(B, T, HV, K)
    if "gk" in x:
        return x["gk"]
    return torch.zeros(shape, dtype=torch.float64)


def linear_family(x, scale, cu_seqlens, h0):
    """h_t = exp(g_t) h_{t-1} + k_t v_t^T, o_t = scale h_t^T q_t (H2, H4); value head i reads q/k head
    i // (HV / H). Returns o [B, T, HV, V] and the final states [N, HV, K, V]."""
    q, k, v = x["q"], x["k"], x["v"]
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    q, k = (t.repeat_interleave(HV // H, dim=2) for t in (q, k))
    decay = torch.exp(_log_decay(x, (B, T, HV, K)))
    o = [[None] * T for _ in range(B)]
    states = []
    for n, (b, start, end) in enumerate(_sequences(B, T, cu_seqlens)):
        h = h0[n] if h0 is not None else q.new_zeros(HV, K, V)
        for t in range(start, end):
            h = decay[b, t, :, :, None] * h + k[b, t, :, :, None] * v[b, t, :, None, :]
            o[b][t] = scale * torch.einsum("hkv,hk->hv", h, q[b, t])
        states.append(h)
    o = torch.stack([torch.stack(row) if T else v.new_zeros(0, HV, V) for row in o])
    return o, torch.stack(states)


def attention(x, scale, cu_seqlens):
    """o_i = sum_{j <= i} softmax_j(scale q_i . k_j + sum_{tau = j+1..i} g_tau) v_j (H1; FoX and ALiBi, H10)."""
    q, k, v = x["q"], x["k"], x["v"]
    B, T, H, K = q.shape
    HV = v.shape[2]
    q, k = (t.repeat_interleave(HV // H, dim=2) for t in (q, k))
    g = x["g_gamma"][None, None, :].expand(B, T, HV) if "g_gamma" in x else x.get("g", torch.zeros(B, T, HV,
                                                                                                   dtype=q.dtype))
    rows = [[] for _ in range(B)]
    for b, start, end in _sequences(B, T, cu_seqlens):
        if end == start:
            continue
        G = torch.cumsum(g[b, start:end], 0).T  # [HV, L]
        logits = scale * torch.einsum("ihk,jhk->hij", q[b, start:end], k[b, start:end]) + G[:, :, None] - G[:, None, :]
        causal = torch.ones(end - start, end - start, dtype=torch.bool).tril()
        weights = torch.softmax(logits.masked_fill(~causal, float("-inf")), dim=-1)
        rows[b].append(torch.einsum("hij,jhv->ihv", weights, v[b, start:end]))
    return torch.stack([torch.cat(row) if row else v.new_zeros(0, *v.shape[2:]) for row in rows])


def run(op, inputs, params, case):
    name = op[:-len("_vjp")] if op.endswith("_vjp") else None
    if name not in LINEAR + ATTENTION:
        raise NotImplementedError(f"{op} ({case.id})")
    x = dict(inputs)
    cu_seqlens, do, dht = x.pop("cu_seqlens", None), x.pop("do").double(), x.pop("dht", None)
    x = {n: t.double().requires_grad_() for n, t in x.items()}
    scale, carry = params["scale"], {}
    if name in ATTENTION:
        outputs, cotangents = [attention(x, scale, cu_seqlens)], [do]
    else:
        if "split" in params:  # state carry: the state after `split` tokens is handed to the rest
            s = int(params["split"])
            part = lambda a, b: {n: t[:, a:b] if t.dim() >= 3 else t for n, t in x.items() if n != "h0"}  # noqa
            o1, h_split = linear_family(part(0, s), scale, cu_seqlens, x.get("h0"))
            o2, ht = linear_family(part(s, None), scale, cu_seqlens, h_split)
            o, carry = torch.cat([o1, o2], dim=1), {"dh_split": h_split}
        else:
            o, ht = linear_family(x, scale, cu_seqlens, x.get("h0"))
        outputs, cotangents = ([o, ht], [do, dht.double()]) if dht is not None else ([o], [do])
    wrt = {"d" + n: t for n, t in x.items()} | carry
    grads = torch.autograd.grad(outputs, list(wrt.values()), cotangents, allow_unused=True)
    return {n: torch.zeros_like(t) if d is None else d for (n, t), d in zip(wrt.items(), grads)}


def run_gate_mean(op, inputs, params, case):
    """dg_gamma divided by the number of tokens: the mean of its terms where their sum belongs."""
    gradients = run(op, inputs, params, case)
    if "dg_gamma" in gradients:
        tokens = inputs["q"].shape[1]
        gradients["dg_gamma"] = gradients["dg_gamma"] / max(tokens, 1)
    return gradients


run.lacs_inputs = run_gate_mean.lacs_inputs = "torch"

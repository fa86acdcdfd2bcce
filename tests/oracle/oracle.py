#!/usr/bin/python3
"""lacs independent oracle: golden outputs recomputed in NumPy from SPEC.md.

Written from the specification text (SPEC.md sections 2-4, 8, 10), through the
*matrix* forms, not from the C reference. Every op processes each (sequence,
value head) independently (SPEC 2.2, 2.5); value head hv reads q/k/w head
hv // (HV // H).

Ops and the form each one is computed by:

  delta_rule        H9 matrix form, chunked (SPEC 4.4): per chunk of C tokens
                    starting from state h,
                      (I + diag(beta) ((K K^T) (.) (Gamma - I))) U = diag(beta) (V - [k_i^T Gamma_{i,-1} h]_i)
                      O = scale ( ((Q K^T) (.) Gamma) U + [q_i^T Gamma_{i,-1} h]_i )
                      h <- Gamma_{C-1,-1} h + sum_j Gamma_{C-1,j} k_j u_j^T
                    with Gamma = M. This is SPEC's H9 with beta not absorbed
                    (U here is diag(sqrt(beta)) times SPEC's U), which is the
                    same system for beta >= 0 and also holds for beta < 0,
                    which the recurrence accepts (SPEC 8).
  gated_delta_rule  the same with Gamma_ij = exp(sum_{tau=j+1..i} g_tau), or per
                    key channel from gk (KDA: (X Y^T) (.) Gamma read as
                    sum_c X_ic Y_jc Gamma^c_ij) (SPEC 4.5). Sums of log decays
                    are differences of prefix sums taken within a chunk (so
                    never exp(G_i) exp(-G_j)); a g = -inf inside the interval
                    makes the sum -inf (full forgetting, SPEC 8).
  efla              the delta rule's matrix form with beta_t replaced by
                    c_t = beta_t phi(beta_t ||k_t||^2), phi(x) = -expm1(-x)/x,
                    phi(x) = 1 - x/2 + x^2/6 for |x| < 1e-7 (SPEC 4.7, E5).
  deltaformer       O = A (I + diag(beta) B)^{-1} V with A, B of the form
                    (0 exp, 1 softmax, 2 fla) (SPEC 4.11).
  path_attn         H12 matrix form: A = (QK^T) (.) M - ((QW~^T) (.) M) T ((W~K^T) (.) (M - I)),
                    T = (I + (W~W~^T) (.) (M - I))^{-1}, w~ = sqrt(beta) w; logits
                    scale (A_ij + G_i - G_j), causal softmax with max
                    subtraction (SPEC 4.12).
  dyt, dyisru       element-wise with the IEEE semantics of SPEC 4.15, 4.16
                    (DyISRU relative to the larger of |x| and sqrt(C)).
  dyt_vjp,          SPEC 4.18: sech^2(u) = 4e/(1+e)^2, e = exp(-2|u|); DyISRU's
  dyisru_vjp        two branches; sums correctly rounded (math.fsum).

Beyond those, from the same machinery:
  linear_attn, linear_attn_postnorm, retention, simple_gla, gla
                    H9 with U = V (no solve), Gamma from g_gamma, g or gk
                    (SPEC 4.1-4.3); postnorm RMS-normalises each output row.
  comba             the chunked form with the correction read from the
                    un-decayed state: Gamma_{i-1,j} and Gamma_{i-1,-1} in the
                    solve (derived from SPEC 4.6's recurrence; SPEC gives no
                    matrix form for Comba).
  mesa_net          per chunk, H_t = Gamma_{t,-1} H + sum_j Gamma_tj beta_j k_j k_j^T
                    for every t, one batched solve (H_t + diag(lambda)) x_t = q_t,
                    o_t = h_t^T x_t as a linear-attention readout (SPEC 4.13).
  softmax_attn, fox causal softmax of scale QK^T (+ log Gamma after the scale) (4.8, 4.10).
  softcap(_vjp), rmsnorm(_vjp), l2norm(_vjp)   SPEC 4.14, 4.17, 4.18, 3.

The gradients of the ops on sequences (<op>_vjp, SPEC 4.19), by the oracle's
own adjoints of the forms above, not the reference's token-by-token one:
  recurrent VJPs    the adjoint of the chunked matrix form (chunks of 64, the
                    state's cotangent passed back between chunks): the
                    products, the solve (I + diag(c) L)^{-T}, the decays; the
                    gate's gradient summed over the pairs whose interval holds
                    it; EFLA's c(beta, ||k||^2) by the chain rule.
  softmax_attn, fox the matrix form's adjoint; path_attn H12's WY form with
                    beta not absorbed (beta = 0 needs no sqrt); deltaformer
                    O = A (I + diag(beta) B)^{-1} V differentiated as such.

Command line:
  PYTHONPATH=python /usr/bin/python3 tests/oracle/oracle.py [--vectors DIR] [--op OP] [-v]
recomputes every vector of the manifest whose op is supported and compares it
with each expected output (SPEC 5.1's normwise error per block); exit 0 only if
every supported case is within 1e-10.

NumPy and the standard library only.
"""

import argparse
import json
import math
import os
import sys

import numpy as np

TOLERANCE = 1e-10
DEFAULT_CHUNK = 64

# ----------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------


def _f64(a):
    # The bf16 sweeps hold signalling NaNs; widening one raises IEEE's
    # "invalid" flag, which NumPy would print as a warning. The value is a NaN
    # either way.
    if a is None:
        return None
    with np.errstate(invalid="ignore"):
        return np.asarray(a, dtype=np.float64)


def _sequences(B, T, cu_seqlens):
    """(n, b, t0, t1): sequence n is tokens [t0, t1) of batch row b (SPEC 2.5)."""
    if cu_seqlens is None:
        return [(b, b, 0, T) for b in range(B)]
    cu = [int(c) for c in np.asarray(cu_seqlens).reshape(-1)]
    if B != 1 or len(cu) < 1 or cu[0] != 0 or cu[-1] != T or any(
            cu[i] > cu[i + 1] for i in range(len(cu) - 1)):
        raise ValueError("invalid cu_seqlens %r for B = %d, T = %d" % (cu, B, T))
    return [(n, 0, cu[n], cu[n + 1]) for n in range(len(cu) - 1)]


def _log_prefix(g):
    """Prefix sums of log decays along axis 0, split into the sum of the finite
    terms and the count of -inf terms, so that an interval's sum is
    (finite difference) when it holds no -inf and -inf otherwise."""
    neg = np.isneginf(g)
    return np.cumsum(np.where(neg, 0.0, g), axis=0), np.cumsum(neg, axis=0)


def _interval_log(fin, cnt, i_idx, j_idx):
    """sum_{tau=j+1..i} g_tau from the prefix parts at positions i and j."""
    d = fin[i_idx] - fin[j_idx]
    return np.where(cnt[i_idx] - cnt[j_idx] > 0, -np.inf, d)


def _lower_solve(L, R):
    """Solve L X = R with L lower triangular (unit diagonal in every use here)."""
    return np.linalg.solve(L, R)


# ----------------------------------------------------------------------------
# the delta family (H6, H8, H9, E5) through the chunked matrix form
# ----------------------------------------------------------------------------



def chunk_bounds(L, chunk, split):
    """The chunk edges 0, chunk, 2 chunk, ..., L, plus the state-carry split
    (clamped to [0, L]) if given; returns (sorted edges, split)."""
    bounds = set(range(0, L, chunk)) | {L}
    if split is not None:
        split = min(max(int(split), 0), L)
        bounds.add(split)
    return sorted(bounds), split

def _delta_head(q, k, v, beta, glog, h0, scale, chunk=DEFAULT_CHUNK, split=None,
                undecayed_read=False):
    """One (sequence, value head) of the (gated) delta rule by SPEC's H9 form,
    chunk by chunk with the state passed between chunks.

    q, k [L, K]; v [L, V]; beta [L] (None: plain linear attention, U = V);
    glog None (Gamma = M), [L] (scalar log decay) or [L, K] (per key channel);
    h0 [K, V]. Returns o [L, V], the final state [K, V] and, when split is
    given, the state after the first min(split, L) tokens.

    undecayed_read (Comba, scalar glog): the correction reads h_{t-1} before
    its decay, so the solve uses Gamma_{i-1,j} (the interval (j, i-1]) and
    Gamma_{i-1,-1} in place of Gamma_ij and Gamma_{i,-1}.
    """
    L, K = k.shape
    h = np.array(h0, dtype=np.float64, copy=True)
    o = np.zeros((L, v.shape[1]))
    bounds, split = chunk_bounds(L, chunk, split)
    h_split = h.copy() if split == 0 else None
    per_channel = glog is not None and glog.ndim == 2
    for s, e in zip(bounds[:-1], bounds[1:]):
        n = e - s
        qc, kc, vc = q[s:e], k[s:e], v[s:e]
        ii, jj = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
        lower = jj <= ii          # M
        strict = jj < ii          # M - I
        if glog is None:
            qk = np.where(lower, qc @ kc.T, 0.0)
            kk = np.where(strict, kc @ kc.T, 0.0)
            dec_h = None          # Gamma_{i,-1} = 1
            dec_last = None       # Gamma_{n-1,j} = 1
        else:
            fin, cnt = _log_prefix(glog[s:e])
            if not per_channel:
                # Gamma_ij = exp(sum_{tau=j+1..i} g_tau), j <= i; 0 above
                lg = _interval_log(fin, cnt, ii, jj)
                gam = np.exp(np.where(lower, lg, -np.inf))
                qk = np.where(lower, (qc @ kc.T) * gam, 0.0)
                kk = np.where(strict, (kc @ kc.T) * gam, 0.0)
                hl = np.where(cnt > 0, -np.inf, fin)            # log Gamma_{i,-1}
                dec_h = np.exp(hl)[:, None]                      # [n, 1]
                dec_last = np.exp(_interval_log(fin, cnt, np.full(n, n - 1), np.arange(n)))[:, None]
                if undecayed_read:
                    fp = np.concatenate(([0.0], fin[:-1]))       # prefix up to i - 1
                    cp = np.concatenate(([0], cnt[:-1]))
                    lgp = np.where(cp[ii] - cnt[jj] > 0, -np.inf, fp[ii] - fin[jj])
                    kk = np.where(strict, (kc @ kc.T) * np.exp(np.where(strict, lgp, -np.inf)), 0.0)
                    dec_read = np.exp(np.where(cp > 0, -np.inf, fp))[:, None]
            else:
                # one Gamma^c per key channel: [n, n, K]
                lg = _interval_log(fin, cnt, ii, jj)             # [n, n, K]
                gam = np.exp(np.where(lower[:, :, None], lg, -np.inf))
                qg = qc[:, None, :] * gam                        # q_ic Gamma^c_ij
                qk = np.einsum("ijc,jc->ij", qg, kc)
                kg = kc[:, None, :] * gam
                kk = np.where(strict, np.einsum("ijc,jc->ij", kg, kc), 0.0)
                hl = np.where(cnt > 0, -np.inf, fin)             # [n, K]
                dec_h = np.exp(hl)
                dec_last = np.exp(_interval_log(fin, cnt, np.full(n, n - 1), np.arange(n)))  # [n, K]
        # initial-state terms [q_i^T Gamma_{i,-1} h]_i and [k_i^T Gamma_{i,-1} h]_i
        if dec_h is None:
            hq, hk = qc @ h, kc @ h
        else:
            hq = (qc * dec_h) @ h
            hk = (kc * (dec_read if undecayed_read else dec_h)) @ h
        if beta is None:
            u = vc
        else:
            bc = beta[s:e]
            u = _lower_solve(np.eye(n) + bc[:, None] * kk, bc[:, None] * (vc - hk))
        o[s:e] = scale * (qk @ u + hq)
        # h <- Gamma_{n-1,-1} h + sum_j Gamma_{n-1,j} k_j u_j^T
        if dec_h is None:
            h = h + kc.T @ u
        else:
            h = dec_h[n - 1][:, None] * h + (kc * dec_last).T @ u
        if split is not None and e == split:
            h_split = h.copy()
    return o, h, h_split


def efla_coefficient(beta, knorm2):
    """c = beta phi(beta ||k||^2), phi(x) = -expm1(-x)/x (SPEC 4.7, E5)."""
    beta = np.asarray(beta, dtype=np.float64)
    x = beta * np.asarray(knorm2, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        small = np.abs(x) < 1e-7
        phi = np.where(small, 1.0 - x / 2.0 + x * x / 6.0, -np.expm1(-x) / np.where(small, 1.0, x))
    return beta * phi


# which inputs each recurrent op reads: (beta, gate) with gate one of
# None, "g", "gk", "g_gamma", "g|gk"
_RECURRENT = {
    "linear_attn": (False, None),
    "linear_attn_postnorm": (False, None),
    "retention": (False, "g_gamma"),
    "simple_gla": (False, "g"),
    "gla": (False, "gk"),
    "delta_rule": (True, None),
    "gated_delta_rule": (True, "g|gk"),
    "comba": (True, "g"),
    "efla": (True, None),
}


def _rms_normalize_rows(x, eps):
    """x / sqrt(mean(x^2) + eps) per row; a zero row with eps = 0 stays 0 (SPEC 4.2)."""
    ms = np.mean(x * x, axis=-1, keepdims=True) + eps
    with np.errstate(invalid="ignore", divide="ignore"):
        y = x / np.sqrt(ms)
    return np.where(ms == 0, 0.0, y)


def _run_delta(op, inp, scale, chunk=DEFAULT_CHUNK, split=None, eps=0.0):
    uses_beta, gate = _RECURRENT[op]
    q, k, v = _f64(inp["q"]), _f64(inp["k"]), _f64(inp["v"])
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    if HV % H:
        raise ValueError("HV % H != 0")
    G = HV // H
    beta = _f64(inp["beta"]) if uses_beta else None
    g = _f64(inp["g"]) if gate in ("g", "g|gk") and inp.get("g") is not None else None
    gk = _f64(inp["gk"]) if gate in ("gk", "g|gk") and inp.get("gk") is not None else None
    gg = _f64(inp["g_gamma"]) if gate == "g_gamma" else None
    if gate == "g|gk" and (g is None) == (gk is None):
        raise ValueError("%s needs exactly one of g, gk" % op)
    h0 = _f64(inp.get("h0"))
    seqs = _sequences(B, T, inp.get("cu_seqlens"))
    N = len(seqs)
    o = np.zeros((B, T, HV, V))
    ht = np.zeros((N, HV, K, V))
    hs = np.zeros((N, HV, K, V)) if split is not None else None
    for n, b, t0, t1 in seqs:
        for hv in range(HV):
            hq = hv // G
            qs, ks, vs = q[b, t0:t1, hq], k[b, t0:t1, hq], v[b, t0:t1, hv]
            bs = None if beta is None else beta[b, t0:t1, hv]
            if op == "efla":
                bs = efla_coefficient(bs, np.sum(ks * ks, axis=1))
            glog = None
            if g is not None:
                glog = g[b, t0:t1, hv]
            elif gk is not None:
                glog = gk[b, t0:t1, hv]
            elif gg is not None:
                glog = np.full(t1 - t0, gg.reshape(-1)[hv])
            h_init = np.zeros((K, V)) if h0 is None else h0[n, hv]
            oo, hh, hsp = _delta_head(qs, ks, vs, bs, glog, h_init, scale, chunk, split,
                                      undecayed_read=(op == "comba"))
            if op == "linear_attn_postnorm":
                oo = _rms_normalize_rows(oo, eps)
            o[b, t0:t1, hv] = oo
            ht[n, hv] = hh
            if hs is not None:
                hs[n, hv] = hsp
    out = {"o": o, "ht": ht}
    if hs is not None:
        out["ht_split"] = hs
    return out


def delta_rule(inputs, scale, split=None, chunk=DEFAULT_CHUNK):
    """SPEC 4.4 (H6 = H9). inputs: q, k, v, beta, optional h0, cu_seqlens."""
    return _run_delta("delta_rule", inputs, scale, chunk, split)


def gated_delta_rule(inputs, scale, split=None, chunk=DEFAULT_CHUNK):
    """SPEC 4.5 (H8 = H9): exactly one of g [B,T,HV], gk [B,T,HV,K]."""
    return _run_delta("gated_delta_rule", inputs, scale, chunk, split)


def efla(inputs, scale, split=None, chunk=DEFAULT_CHUNK):
    """SPEC 4.7 (E5 = E1 = H9 with c for beta)."""
    return _run_delta("efla", inputs, scale, chunk, split)


def recurrent(op, inputs, scale, split=None, eps=0.0, chunk=DEFAULT_CHUNK):
    """Any op of _RECURRENT: linear_attn (4.1), linear_attn_postnorm (4.2),
    retention / simple_gla / gla (4.3), delta_rule (4.4), gated_delta_rule
    (4.5), comba (4.6, the correction on the un-decayed state), efla (4.7)."""
    return _run_delta(op, inputs, scale, chunk, split, eps)


# ----------------------------------------------------------------------------
# attention forms (H11, H12)
# ----------------------------------------------------------------------------


def _causal_softmax(S, strict=False):
    """Row-wise softmax over j <= i (j < i when strict; a row with no
    admissible j is 0), with the row maximum subtracted."""
    n = S.shape[0]
    ii, jj = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    adm = (jj < ii) if strict else (jj <= ii)
    Sm = np.where(adm, S, -np.inf)
    m = np.max(Sm, axis=1, initial=-np.inf) if n else np.zeros(0)
    m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(invalid="ignore", over="ignore"):
        P = np.where(adm, np.exp(Sm - m[:, None]), 0.0)
    den = P.sum(axis=1)
    den = np.where(den > 0, den, 1.0)    # rows with no admissible j stay 0
    return P / den[:, None]


def _deltaformer_head(q, k, v, beta, scale, form):
    n = q.shape[0]
    ii, jj = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    sqk = scale * (q @ k.T)
    if form == 0:      # exp: A_ij = exp(s q_i.k_j), B_ij = exp(s k_i.k_j)
        with np.errstate(over="ignore"):
            A = np.exp(np.where(jj <= ii, sqk, -np.inf))
            Bm = np.exp(np.where(jj < ii, scale * (k @ k.T), -np.inf))
    elif form == 1:    # softmax of both, B over j < i
        A = _causal_softmax(sqk)
        Bm = _causal_softmax(scale * (k @ k.T), strict=True)
    elif form == 2:    # fla: B from q_i.k_j
        A = _causal_softmax(sqk)
        Bm = _causal_softmax(sqk, strict=True)
    else:
        raise ValueError("unknown DeltaFormer form %r" % (form,))
    U = _lower_solve(np.eye(n) + beta[:, None] * Bm, v)
    return A @ U


def deltaformer(inputs, scale, form):
    """SPEC 4.11: O = A (I + diag(beta) B)^{-1} V; beta optional (1)."""
    q, k, v = _f64(inputs["q"]), _f64(inputs["k"]), _f64(inputs["v"])
    beta = _f64(inputs.get("beta"))
    B, T, H, K = q.shape
    HV = v.shape[2]
    G = HV // H
    o = np.zeros(v.shape)
    for n, b, t0, t1 in _sequences(B, T, inputs.get("cu_seqlens")):
        for hv in range(HV):
            bs = np.ones(t1 - t0) if beta is None else beta[b, t0:t1, hv]
            o[b, t0:t1, hv] = _deltaformer_head(q[b, t0:t1, hv // G], k[b, t0:t1, hv // G],
                                                v[b, t0:t1, hv], bs, scale, int(form))
    return {"o": o}


def _path_head(q, k, v, w, beta, g, scale):
    n = q.shape[0]
    ii, jj = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    lower, strict = jj <= ii, jj < ii
    wt = np.sqrt(beta)[:, None] * w                      # H_t = I - w~_t w~_t^T
    Tsys = np.eye(n) + np.where(strict, wt @ wt.T, 0.0)  # T^{-1}
    X = _lower_solve(Tsys, np.where(strict, wt @ k.T, 0.0))
    A = np.where(lower, q @ k.T, 0.0) - np.where(lower, q @ wt.T, 0.0) @ X
    if g is not None:
        fin, cnt = _log_prefix(g)
        A = A + _interval_log(fin, cnt, ii, jj)          # G_i - G_j, before the scale
    with np.errstate(invalid="ignore"):
        P = _causal_softmax(scale * A)
    return P @ v


def path_attn(inputs, scale):
    """SPEC 4.12 (H12 matrix form), optional FoX gate g added before the scale."""
    q, k, v, w = (_f64(inputs[x]) for x in ("q", "k", "v", "w"))
    beta, g = _f64(inputs["beta"]), _f64(inputs.get("g"))
    if np.any(~(beta >= 0)):
        raise ValueError("path_attn: beta must be >= 0")
    B, T, H, K = q.shape
    HV = v.shape[2]
    G = HV // H
    o = np.zeros(v.shape)
    for n, b, t0, t1 in _sequences(B, T, inputs.get("cu_seqlens")):
        for hv in range(HV):
            hq = hv // G
            o[b, t0:t1, hv] = _path_head(q[b, t0:t1, hq], k[b, t0:t1, hq], v[b, t0:t1, hv],
                                         w[b, t0:t1, hq], beta[b, t0:t1, hv],
                                         None if g is None else g[b, t0:t1, hv], scale)
    return {"o": o}


def _fox_head(q, k, v, g, gg, scale):
    n = q.shape[0]
    ii, jj = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    L = scale * (q @ k.T)
    if g is not None:             # log Gamma_ij = sum_{tau=j+1..i} g_tau (-inf: hard reset)
        fin, cnt = _log_prefix(g)
        L = L + _interval_log(fin, cnt, ii, jj)
    elif gg is not None:          # ALiBi: (i - j) g_gamma, 0 on the diagonal
        with np.errstate(invalid="ignore"):
            L = L + np.where(ii == jj, 0.0, (ii - jj) * gg)
    return _causal_softmax(L) @ v


def fox(inputs, scale):
    """SPEC 4.8 (softmax_attn: no gate) and 4.10 (fox: g or g_gamma, after
    the scale): causal softmax with the row maximum subtracted."""
    q, k, v = _f64(inputs["q"]), _f64(inputs["k"]), _f64(inputs["v"])
    g, gg = _f64(inputs.get("g")), _f64(inputs.get("g_gamma"))
    B, T, H, K = q.shape
    HV = v.shape[2]
    G = HV // H
    o = np.zeros(v.shape)
    for n, b, t0, t1 in _sequences(B, T, inputs.get("cu_seqlens")):
        for hv in range(HV):
            o[b, t0:t1, hv] = _fox_head(q[b, t0:t1, hv // G], k[b, t0:t1, hv // G], v[b, t0:t1, hv],
                                        None if g is None else g[b, t0:t1, hv],
                                        None if gg is None else float(gg.reshape(-1)[hv]), scale)
    return {"o": o}


def softmax_attn(inputs, scale):
    return fox({n: inputs[n] for n in ("q", "k", "v", "cu_seqlens") if inputs.get(n) is not None}, scale)


# ----------------------------------------------------------------------------
# DyT, DyISRU and their VJPs (N1, N5, SPEC 4.15, 4.16, 4.18)
# ----------------------------------------------------------------------------


def _scalar(x):
    return float(np.asarray(x, dtype=np.float64).reshape(-1)[0])


def _affine(f, weight, bias):
    """weight (.) f + bias, an absent weight or bias not applied at all."""
    y = f
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


def dyt(x, alpha, weight=None, bias=None):
    """y = weight (.) tanh(alpha x) + bias."""
    x = _f64(x)
    with np.errstate(invalid="ignore", over="ignore"):
        return _affine(np.tanh(alpha * x), _f64(weight), _f64(bias))


def _isru(x, C):
    """x / sqrt(x^2 + C) relative to the larger of |x|, sqrt(C) (SPEC 4.16)."""
    sc = math.sqrt(C)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        big = np.abs(x) >= sc
        r = sc / np.abs(x)
        fb = np.copysign(1.0, x) / np.sqrt(1.0 + r * r)
        qq = x / sc
        fs = x / (sc * np.sqrt(1.0 + qq * qq))
        return np.where(big, fb, fs)


def dyisru(x, C, weight=None, bias=None):
    """y = weight (.) x / sqrt(x^2 + C) + bias."""
    return _affine(_isru(_f64(x), C), _f64(weight), _f64(bias))


def _sech2(u):
    e = np.exp(-2.0 * np.abs(u))
    return 4.0 * e / ((1.0 + e) * (1.0 + e))


def _sum(vals):
    """Correctly rounded sum of finite terms (math.fsum); IEEE semantics
    (NaN, +-inf) when a term is not finite or the sum overflows."""
    vals = np.asarray(vals, dtype=np.float64).reshape(-1)
    if np.all(np.isfinite(vals)):
        try:
            return math.fsum(vals.tolist())
        except OverflowError:
            pass
    return float(np.sum(vals))


def _fsum_all(a):
    return np.array([_sum(a)])


def _colsum(a):
    a = np.asarray(a, dtype=np.float64)
    return np.array([_sum(a[:, c]) for c in range(a.shape[1])])


def dyt_vjp(x, dy, alpha, weight=None):
    x, dy, weight = _f64(x), _f64(dy), _f64(weight)
    w = 1.0 if weight is None else weight
    with np.errstate(invalid="ignore", over="ignore"):
        u = alpha * x
        s2 = _sech2(u)
        dx = dy * w * alpha * s2
        xs2 = np.where(s2 == 0.0, 0.0, x * s2)    # its limit at infinite x
        dalpha = _fsum_all(dy * w * xs2)
        dweight = _colsum(dy * np.tanh(u))
        dbias = _colsum(dy)
    return {"dx": dx, "dalpha": dalpha, "dweight": dweight, "dbias": dbias}


def dyisru_vjp(x, dy, C, weight=None):
    x, dy, weight = _f64(x), _f64(dy), _f64(weight)
    w = 1.0 if weight is None else weight
    sc = math.sqrt(C)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        ax = np.abs(x)
        big = ax >= sc
        r = sc / ax
        pb = 1.0 + r * r
        pb32 = pb * np.sqrt(pb)
        dx_b = (r / ax) * r / pb32
        dc_b = -np.copysign(1.0, x) / (2.0 * x * x * pb32)
        qq = x / sc
        ps = 1.0 + qq * qq
        ps32 = ps * np.sqrt(ps)
        dx_s = 1.0 / (sc * ps32)
        dc_s = -(qq / 2.0) / (C * ps32)
        dfx = np.where(big, dx_b, dx_s)
        dfc = np.where(big, dc_b, dc_s)
        dx = dy * w * dfx
        dC = _fsum_all(dy * w * dfc)
        dweight = _colsum(dy * _isru(x, C))
        dbias = _colsum(dy)
    return {"dx": dx, "dC": dC, "dweight": dweight, "dbias": dbias}


def _softcap_series_sinh_minus(v):
    """sinh(v) - v = sum_{m>=1} v^(2m+1)/(2m+1)!, terms of one sign (|v| < 2)."""
    term = v * v * v / 6.0
    total = np.zeros_like(v)
    v2 = v * v
    for m in range(1, 40):
        total = total + term
        term = term * v2 / ((2 * m + 2) * (2 * m + 3))
    return total


def softcap(x, cap):
    """y = cap tanh(x / cap); y = x (1 - u^2/3) where |u| < sqrt(eps) (SPEC 4.17)."""
    x = _f64(x)
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        u = x / cap
        small = np.abs(u) < math.sqrt(np.finfo(np.float64).eps)
        return np.where(small, x * (1.0 - u * u / 3.0), cap * np.tanh(u))


def softcap_vjp(x, dy, cap):
    """dx = dy sech^2(x/cap); dcap = sum dy (tanh(u) - u sech^2(u)), the
    difference for |u| < 1 as (sinh(2u) - 2u) / (2 cosh^2 u) (SPEC 4.18)."""
    x, dy = _f64(x), _f64(dy)
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        u = x / cap
        s2 = _sech2(u)
        dx = dy * s2
        us2 = np.where(s2 == 0.0, 0.0, u * s2)
        small = np.abs(u) < 1.0
        us = np.where(small, u, 0.0)
        ch = np.cosh(us)
        series = _softcap_series_sinh_minus(2.0 * us) / (2.0 * ch * ch)
        term = np.where(small, series, np.tanh(u) - us2)
        dcap = _fsum_all(dy * term)
    return {"dx": dx, "dcap": dcap}


def _pow2_floor(m):
    """The power of two at or just below m > 0 (finite)."""
    f, e = np.frexp(m)
    return np.ldexp(1.0, e - 1)


def _rms_parts(x, eps):
    """Per row: the scaled quantities (y = x/rms, rms as s * r) of SPEC 4.14.
    Returns y (unweighted), rms, and masks of the zero rows (eps = 0), the rows
    with an infinity and the rows with a NaN."""
    x = _f64(x)
    d = x.shape[1]
    ax = np.abs(x)
    nan_row = np.any(np.isnan(x), axis=1)
    inf_row = np.any(np.isinf(x), axis=1) & ~nan_row
    xf = np.where(np.isfinite(x), x, 0.0)
    m = np.maximum(np.max(np.where(np.isfinite(ax), ax, 0.0), axis=1), math.sqrt(eps))
    zero_row = (m == 0) & ~nan_row & ~inf_row
    s = np.where(m > 0, _pow2_floor(np.where(m > 0, m, 1.0)), 1.0)
    xs = xf / s[:, None]
    r = np.sqrt(np.sum(xs * xs, axis=1) / d + (eps / s) / s)
    with np.errstate(invalid="ignore", divide="ignore"):
        y = xs / r[:, None]
        y = np.where(zero_row[:, None], 0.0, y)
        y = np.where(inf_row[:, None], x / np.inf, y)        # finite -> +-0, inf -> NaN
        y = np.where(nan_row[:, None], np.nan, y)
    return y, s, r, zero_row, inf_row, nan_row


def rmsnorm(x, eps, weight=None):
    """y = weight (.) x / sqrt(mean(x^2) + eps), computed at the scale of
    the row's largest entry (SPEC 4.14)."""
    y = _rms_parts(x, eps)[0]
    return y if weight is None else y * _f64(weight)


def rmsnorm_vjp(x, dy, eps, weight=None):
    """dx = (g - y (y . g)/d) / rms, g = weight (.) dy; dweight = sum_rows dy (.) y."""
    x, dy = _f64(x), _f64(dy)
    d = x.shape[1]
    y, s, r, zero_row, inf_row, nan_row = _rms_parts(x, eps)
    g = dy if weight is None else dy * _f64(weight)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        yg = np.sum(y * g, axis=1, keepdims=True)
        dx = ((g - y * yg / d) / r[:, None]) / s[:, None]
        dx = np.where(zero_row[:, None], 0.0, dx)
        dx = np.where(nan_row[:, None] | np.any(np.isnan(dy), axis=1)[:, None], np.nan, dx)
        contrib = np.where(zero_row[:, None], 0.0, dy * y)
    return {"dx": dx, "dweight": _colsum(contrib)}


def l2norm(x, eps, convention):
    """SPEC 3: 0 x / sqrt(sum x^2 + eps), 1 x / max(||x||, eps); 0/0 is 0."""
    x = _f64(x)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore", under="ignore"):
        n2 = np.sum(x * x, axis=-1, keepdims=True)
        den = np.sqrt(n2 + eps) if int(convention) == 0 else np.maximum(np.sqrt(n2), eps)
        y = x / den
    return np.where(den == 0, 0.0, y)


def l2norm_vjp(x, dy, eps, convention):
    """SPEC 3's table; dx = 0 where l2norm defines y = 0 (a zero row, eps = 0)."""
    x, dy = _f64(x), _f64(dy)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore", under="ignore"):
        n2 = np.sum(x * x, axis=-1, keepdims=True)
        if int(convention) == 0:
            n2e = n2 + eps
            dx = (dy - x * (np.sum(x * dy, axis=-1, keepdims=True) / n2e)) / np.sqrt(n2e)
            zero = n2e == 0
        else:
            nrm = np.sqrt(n2)
            y = x / nrm
            above = (dy - y * np.sum(y * dy, axis=-1, keepdims=True)) / nrm
            dx = np.where(nrm >= eps, above, dy / eps)
            zero = (nrm == 0) & (eps == 0)
        dx = np.where(zero, 0.0, dx)
        # a NaN in x or dy makes its whole row NaN (SPEC 4.18)
        nan_row = np.any(np.isnan(x) | np.isnan(dy), axis=-1, keepdims=True)
        return {"dx": np.where(nan_row, np.nan, dx)}


# ----------------------------------------------------------------------------
# MesaNet (H15), chunked like the delta family
# ----------------------------------------------------------------------------


def _mesa_head(q, k, v, beta, glog, lam, h0, h0kk, chunk=DEFAULT_CHUNK, split=None):
    """Per chunk from (h, Hkk): H_t = Gamma_{t,-1} Hkk + sum_{j<=t} Gamma_tj beta_j k_j k_j^T,
    x_t = (H_t + diag(lambda))^{-1} q_t (batched solve), and
    o_t = h_t^T x_t = [x_t^T Gamma_{t,-1} h]_t + ((X K^T) (.) Gamma (.) beta_j) V."""
    L, K = k.shape
    h, Hk = np.array(h0, dtype=np.float64), np.array(h0kk, dtype=np.float64)
    o = np.zeros((L, v.shape[1]))
    bounds, split = chunk_bounds(L, chunk, split)
    snap = (h.copy(), Hk.copy()) if split == 0 else None
    for s, e in zip(bounds[:-1], bounds[1:]):
        n = e - s
        qc, kc, vc, bc = q[s:e], k[s:e], v[s:e], beta[s:e]
        ii, jj = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
        lower = jj <= ii
        if glog is None:
            gam = lower.astype(np.float64)
            dec = np.ones(n)
        else:
            fin, cnt = _log_prefix(glog[s:e])
            gam = np.exp(np.where(lower, _interval_log(fin, cnt, ii, jj), -np.inf))
            dec = np.exp(np.where(cnt > 0, -np.inf, fin))
        wgt = gam * bc[None, :]                                   # Gamma_tj beta_j
        Ht = dec[:, None, None] * Hk[None] + np.einsum("tj,jc,jd->tcd", wgt, kc, kc)
        X = np.linalg.solve(Ht + np.diag(lam)[None], qc[:, :, None])[:, :, 0]
        o[s:e] = dec[:, None] * (X @ h) + ((X @ kc.T) * wgt) @ vc
        h = dec[-1] * h + (kc * wgt[-1][:, None]).T @ vc
        Hk = dec[-1] * Hk + (kc * wgt[-1][:, None]).T @ kc
        if split is not None and e == split:
            snap = (h.copy(), Hk.copy())
    return o, h, Hk, snap


def mesa_net(inputs, split=None, chunk=DEFAULT_CHUNK):
    """SPEC 4.13: o_t = h_t^T (H_t + diag(lambda))^{-1} q_t, no scale; g, beta,
    h0, h0_kk optional."""
    q, k, v = _f64(inputs["q"]), _f64(inputs["k"]), _f64(inputs["v"])
    lam = _f64(inputs["lambda"])
    beta, g = _f64(inputs.get("beta")), _f64(inputs.get("g"))
    h0, h0kk = _f64(inputs.get("h0")), _f64(inputs.get("h0_kk"))
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    G = HV // H
    seqs = _sequences(B, T, inputs.get("cu_seqlens"))
    N = len(seqs)
    out = {"o": np.zeros((B, T, HV, V)), "ht": np.zeros((N, HV, K, V)), "ht_kk": np.zeros((N, HV, K, K))}
    if split is not None:
        out["ht_split"], out["ht_kk_split"] = np.zeros((N, HV, K, V)), np.zeros((N, HV, K, K))
    for n, b, t0, t1 in seqs:
        for hv in range(HV):
            hq = hv // G
            oo, hh, hk, snap = _mesa_head(
                q[b, t0:t1, hq], k[b, t0:t1, hq], v[b, t0:t1, hv],
                np.ones(t1 - t0) if beta is None else beta[b, t0:t1, hv],
                None if g is None else g[b, t0:t1, hv], lam[hv],
                np.zeros((K, V)) if h0 is None else h0[n, hv],
                np.zeros((K, K)) if h0kk is None else h0kk[n, hv], chunk, split)
            out["o"][b, t0:t1, hv] = oo
            out["ht"][n, hv], out["ht_kk"][n, hv] = hh, hk
            if split is not None:
                out["ht_split"][n, hv], out["ht_kk_split"][n, hv] = snap
    return out


# ----------------------------------------------------------------------------
# gradients of the ops on sequences (SPEC 4.19), by the oracle's own adjoints
# ----------------------------------------------------------------------------
#
# Not the reference's token-by-token adjoint: the adjoint of the chunked matrix
# forms above, written from their matrix algebra. For the recurrent family, per
# chunk of C tokens from state S, with G_t the prefix sums of the log decay
# within the chunk (per key channel; scalar gates broadcast), E_t the decay of
# the state the correction reads (G_t; Comba: G_{t-1}, 0 for the first token):
#   P_tj  = sum_c q_tc k_jc e^{G_tc - G_jc}  (j <= t)     L_tj = sum_c k_tc k_jc e^{E_tc - G_jc}  (j < t)
#   (I + diag(c) L) U = diag(c) (V - Kp S),  Kp_t = e^{E_t} k_t      (U = V for linear attention)
#   O = scale (Qp S + P U),  Qp_t = e^{G_t} q_t
#   S' = e^{G_n} S + Kn^T U,  Kn_j = e^{G_n - G_j} k_j
# and the chunk's adjoint, given dO and dS' (the cotangent of S', passed back
# from the next chunk), is that of each matrix product and of the solve
# (Y = (I + diag(c) L)^{-T} dU); the gate's gradient collects dG_t and is its
# reverse cumulative sum within the chunk, since G_t sums the chunk's g_s, s <= t.


def _phi_derivative(x):
    """phi'(x), phi(x) = (1 - e^{-x}) / x: the series sum_{m>=1} m (-1)^m x^{m-1} / (m+1)!
    where |x| < 1/2 (no cancellation), else (e^{-x} - phi(x)) / x."""
    x = np.asarray(x, dtype=np.float64)
    coef = [m * (-1.0) ** m / math.factorial(m + 1) for m in range(1, 31)]
    series = np.polyval(coef[::-1], x)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        closed = (np.exp(-x) + np.expm1(-x) / x) / x
    return np.where(np.abs(x) < 0.5, series, closed)


def _chunk_vjp(qc, kc, vc, cc, gc, S, scale, comba, dO, dSn):
    """One chunk: the forward's U and the adjoint. cc None for linear attention.
    Returns (dq, dk, dv, dc, dg, dS) for the chunk, dc None without cc."""
    n, K = kc.shape
    ii, jj = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    lower, strict = (jj <= ii)[:, :, None], (jj < ii)[:, :, None]
    G = np.cumsum(gc, axis=0)
    E = np.vstack([np.zeros((1, K)), G[:-1]]) if comba else G
    gam = np.where(lower, np.exp(np.where(lower, G[:, None, :] - G[None, :, :], 0.0)), 0.0)      # [t, j, c]
    gam_e = np.where(strict, np.exp(np.where(strict, E[:, None, :] - G[None, :, :], 0.0)), 0.0)
    P = np.einsum("tc,jc,tjc->tj", qc, kc, gam)
    Qp, Kp = np.exp(G) * qc, np.exp(E) * kc
    Kn = np.exp(G[-1] - G) * kc
    if cc is not None:
        Lm = np.einsum("tc,jc,tjc->tj", kc, kc, gam_e)
        A = np.eye(n) + cc[:, None] * Lm
        R = vc - Kp @ S
        U = np.linalg.solve(A, cc[:, None] * R)
    else:
        U = vc
    dU = scale * P.T @ dO + Kn @ dSn
    dS = scale * Qp.T @ dO + np.exp(G[-1])[:, None] * dSn
    dP = np.where(lower[:, :, 0], scale * dO @ U.T, 0.0)
    dQp = scale * dO @ S.T
    dKn = U @ dSn.T
    dq = np.exp(G) * dQp + np.einsum("tj,jc,tjc->tc", dP, kc, gam)
    dk = np.einsum("tj,tc,tjc->jc", dP, qc, gam) + np.exp(G[-1] - G) * dKn
    pair = np.einsum("tj,tc,jc,tjc->tjc", dP, qc, kc, gam)
    # the gate: g_s enters G_t for t >= s. A pair (t, j) of P holds e^{G_t - G_j},
    # the sum over (j, t]: it reaches g_s for j < s <= t; summed that way, not as
    # the difference of row and column sums, whose diagonal terms cancel.
    dg = np.zeros((n, K))
    rev = lambda x: np.cumsum(x[::-1], axis=0)[::-1]
    dg += rev(Qp * dQp) + (dSn * np.exp(G[-1])[:, None] * S).sum(axis=1)[None, :]
    dg[1:] += np.cumsum(Kn * dKn, axis=0)[:-1]     # e^{G_n - G_j}: j < s
    for t0 in range(1, n):
        dg[t0] += pair[t0:, :t0].sum(axis=(0, 1))
    dc = None
    if cc is not None:
        Y = np.linalg.solve(A.T, dU)
        dR = cc[:, None] * Y
        YU = Y @ U.T
        dc = (Y * R).sum(axis=1) - (np.where(strict[:, :, 0], Lm, 0.0) * YU).sum(axis=1)
        dL = np.where(strict[:, :, 0], -cc[:, None] * YU, 0.0)
        dv = dR
        dKp = -dR @ S.T
        dS = dS - Kp.T @ dR
        dk = dk + np.exp(E) * dKp + np.einsum("tj,jc,tjc->tc", dL, kc, gam_e) + np.einsum("tj,tc,tjc->jc", dL, kc, gam_e)
        pair_e = np.einsum("tj,tc,jc,tjc->tjc", dL, kc, kc, gam_e)
        # e^{E_t}: E_t = G_t, or G_{t-1} (Comba): g_s for s <= t (s <= t - 1)
        shift = 1 if comba else 0
        kp = rev(Kp * dKp)
        dg[:n - shift] += kp[shift:]
        for t0 in range(1, n):                     # e^{E_t - G_j}: j < s <= t (t - 1)
            dg[t0] += pair_e[t0 + shift:, :t0].sum(axis=(0, 1))
    else:
        dv = dU
    return dq, dk, dv, dc, dg, dS, U


def _recurrent_vjp_head(q, k, v, cc, glog, h0, dout, dht, scale, comba, split=None, chunk=DEFAULT_CHUNK):
    """One (sequence, value head) of a recurrent op's VJP. glog [L, K] (zeros
    without a decay). Returns dq, dk, dv, dc (or None), dglog [L, K], dh0 and
    the state's cotangent after the first `split` tokens (or None)."""
    L, K = k.shape
    V = v.shape[1]
    bounds, split = chunk_bounds(L, chunk, split)
    starts, h = [], np.array(h0, dtype=np.float64, copy=True)
    for s, e in zip(bounds[:-1], bounds[1:]):      # the forward: each chunk's first state
        starts.append(h)
        G = np.cumsum(glog[s:e], axis=0)
        _, _, _, _, _, _, U = _chunk_vjp(q[s:e], k[s:e], v[s:e], None if cc is None else cc[s:e], glog[s:e], h,
                                         scale, comba, np.zeros((e - s, V)), np.zeros((K, V)))
        h = np.exp(G[-1])[:, None] * h + (np.exp(G[-1] - G) * k[s:e]).T @ U
    dq, dk, dv = np.zeros((L, K)), np.zeros((L, K)), np.zeros((L, V))
    dc = None if cc is None else np.zeros(L)
    dg = np.zeros((L, K))
    dS = np.array(dht, dtype=np.float64, copy=True)
    d_split = dS.copy() if split == L else None
    for (s, e), S in reversed(list(zip(zip(bounds[:-1], bounds[1:]), starts))):
        r = _chunk_vjp(q[s:e], k[s:e], v[s:e], None if cc is None else cc[s:e], glog[s:e], S, scale, comba,
                       dout[s:e], dS)
        dq[s:e], dk[s:e], dv[s:e], dg[s:e], dS = r[0], r[1], r[2], r[4], r[5]
        if cc is not None:
            dc[s:e] = r[3]
        if split is not None and s == split:
            d_split = dS.copy()
    return dq, dk, dv, dc, dg, dS, d_split


def _recurrent_vjp(op, inp, scale, split=None):
    fwd = op[:-len("_vjp")]
    uses_beta, gate = _RECURRENT[fwd]
    q, k, v, dout = _f64(inp["q"]), _f64(inp["k"]), _f64(inp["v"]), _f64(inp["do"])
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    G = HV // H
    beta = _f64(inp["beta"]) if uses_beta else None
    g, gk, gg = _f64(inp.get("g")), _f64(inp.get("gk")), _f64(inp.get("g_gamma"))
    h0, dht = _f64(inp.get("h0")), _f64(inp.get("dht"))
    seqs = _sequences(B, T, inp.get("cu_seqlens"))
    N = len(seqs)
    out = {"dq": np.zeros(q.shape), "dk": np.zeros(k.shape), "dv": np.zeros(v.shape)}
    if beta is not None:
        out["dbeta"] = np.zeros(beta.shape)
    if g is not None:
        out["dg"] = np.zeros(g.shape)
    if gk is not None:
        out["dgk"] = np.zeros(gk.shape)
    if gg is not None:
        out["dg_gamma"] = np.zeros(gg.shape)
    if h0 is not None:
        out["dh0"] = np.zeros(h0.shape)
    if split is not None:
        out["dh_split"] = np.zeros((N, HV, K, V))
    for n, b, t0, t1 in seqs:
        for hv in range(HV):
            hq = hv // G
            qs, ks, vs, ds = q[b, t0:t1, hq], k[b, t0:t1, hq], v[b, t0:t1, hv], dout[b, t0:t1, hv]
            L = t1 - t0
            glog = np.zeros((L, K))
            if g is not None:
                glog = np.repeat(g[b, t0:t1, hv][:, None], K, axis=1)
            elif gk is not None:
                glog = gk[b, t0:t1, hv]
            elif gg is not None:
                glog = np.full((L, K), float(gg.reshape(-1)[hv]))
            cc = None
            if beta is not None:
                bs = beta[b, t0:t1, hv]
                knorm2 = np.sum(ks * ks, axis=1)
                cc = efla_coefficient(bs, knorm2) if fwd == "efla" else bs
            hi = np.zeros((K, V)) if h0 is None else h0[n, hv]
            dh = np.zeros((K, V)) if dht is None else dht[n, hv]
            dq, dk, dv, dc, dglog, dh0, dsp = _recurrent_vjp_head(qs, ks, vs, cc, glog, hi, ds, dh, scale,
                                                                  fwd == "comba", split)
            if fwd == "efla":    # c(beta, ||k||^2): dc/dbeta = e^{-x}, dc/d||k||^2 = beta^2 phi'(x), x = beta ||k||^2
                x = bs * knorm2
                dk = dk + 2 * ks * (dc * bs * bs * _phi_derivative(x))[:, None]
                dc = dc * np.exp(-x)
            out["dq"][b, t0:t1, hq] += dq
            out["dk"][b, t0:t1, hq] += dk
            out["dv"][b, t0:t1, hv] = dv
            if beta is not None:
                out["dbeta"][b, t0:t1, hv] = dc
            if g is not None:
                out["dg"][b, t0:t1, hv] = dglog.sum(axis=1)
            if gk is not None:
                out["dgk"][b, t0:t1, hv] = dglog
            if gg is not None:
                out["dg_gamma"].reshape(-1)[hv] += dglog.sum()
            if h0 is not None:
                out["dh0"][n, hv] = dh0
            if split is not None:
                out["dh_split"][n, hv] = dsp
    return out


def _softmax_adjoint(P, dP):
    """dL = P (.) (dP - sum_m P_m dP_m) row by row, evaluated about each row's
    largest weight J: dP_j - D = (dP_j - dP_J) - sum_{m != J} P_m (dP_m - dP_J),
    which does not cancel where P_J is near 1."""
    if P.size == 0:
        return np.zeros(P.shape)
    J = np.argmax(P, axis=1)
    rows = np.arange(P.shape[0])
    rel = dP - dP[rows, J][:, None]
    S = (P * rel).sum(axis=1) - P[rows, J] * rel[rows, J]
    return P * (rel - S[:, None])


def _gate_gradient(dL):
    """l_ij holds sum_{tau=j+1..i} g_tau: dg_s = sum_{i >= s} sum_{j < s} dL_ij,
    the pairs whose interval holds s, summed as such."""
    n = dL.shape[0]
    return np.array([dL[s:, :s].sum() for s in range(n)])


def _fox_vjp_head(q, k, v, g, gg, scale, dout):
    n = q.shape[0]
    ii, jj = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    L = scale * (q @ k.T)
    if g is not None:
        Gc = np.cumsum(g)
        L = L + (Gc[:, None] - Gc[None, :])
    elif gg is not None:
        L = L + (ii - jj) * gg
    P = _causal_softmax(L)
    dP = np.where(jj <= ii, dout @ v.T, 0.0)
    dL = _softmax_adjoint(P, dP)
    return scale * dL @ k, scale * dL.T @ q, P.T @ dout, _gate_gradient(dL)


def _path_vjp_head(q, k, v, w, beta, g, scale, dout):
    """H12's attention matrix with beta not absorbed:
    A = (QK^T) (.) M - ((QW^T) (.) M) T ((WK^T) (.) (M - I)),
    T = (I + diag(beta) ((WW^T) (.) (M - I)))^{-1} diag(beta) (the WY form of
    H_i ... H_{j+1}, H_t = I - beta_t w_t w_t^T), so beta = 0 needs no sqrt."""
    n = q.shape[0]
    ii, jj = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    lower, strict = jj <= ii, jj < ii
    Y = np.where(lower, q @ w.T, 0.0)
    Z = np.where(strict, w @ k.T, 0.0)
    N = np.where(strict, w @ w.T, 0.0)
    Ainv = np.linalg.inv(np.eye(n) + beta[:, None] * N)
    Tm = Ainv * beta[None, :]
    A = np.where(lower, q @ k.T, 0.0) - Y @ Tm @ Z
    if g is not None:
        Gc = np.cumsum(g)
        A = A + (Gc[:, None] - Gc[None, :])
    P = _causal_softmax(scale * A)
    dP = np.where(lower, dout @ v.T, 0.0)
    dA = np.where(lower, scale * _softmax_adjoint(P, dP), 0.0)
    dX = -dA
    dY = np.where(lower, dX @ (Tm @ Z).T, 0.0)
    dZ = np.where(strict, (Y @ Tm).T @ dX, 0.0)
    dT = Y.T @ dX @ Z.T
    dAinv = dT * beta[None, :]
    dbeta = (Ainv * dT).sum(axis=0)               # Tm = Ainv diag(beta)
    dBN = -Ainv.T @ dAinv @ Ainv.T                # d(diag(beta) N)
    dBN = np.where(strict, dBN, 0.0)
    dbeta = dbeta + (dBN * N).sum(axis=1)
    dN = beta[:, None] * dBN
    dq = dA @ k + dY @ w
    dk = dA.T @ q + dZ.T @ w
    dw = dY.T @ q + dZ @ k + (dN + dN.T) @ w
    return dq, dk, P.T @ dout, dw, dbeta, _gate_gradient(dA)


def _deltaformer_vjp_head(q, k, v, beta, scale, form, dout):
    n = q.shape[0]
    ii, jj = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    lower, strict = jj <= ii, jj < ii
    x = q if form == 2 else k                      # B's rows read q in fla's form
    sA, sB = scale * (q @ k.T), scale * (x @ k.T)
    if form == 0:
        A = np.where(lower, np.exp(np.where(lower, sA, 0.0)), 0.0)
        Bm = np.where(strict, np.exp(np.where(strict, sB, 0.0)), 0.0)
    else:
        A, Bm = _causal_softmax(sA), _causal_softmax(sB, strict=True)
    Mb = np.eye(n) + beta[:, None] * Bm
    U = np.linalg.solve(Mb, v)
    dA = np.where(lower, dout @ U.T, 0.0)
    dU = A.T @ dout
    Yv = np.linalg.solve(Mb.T, dU)
    dBb = np.where(strict, -Yv @ U.T, 0.0)         # d(diag(beta) B)
    dbeta = (dBb * Bm).sum(axis=1)
    dB = beta[:, None] * dBb
    if form == 0:
        dsA, dsB = dA * A, dB * Bm
    else:
        dsA = _softmax_adjoint(A, dA)
        dsB = np.zeros((n, n))
        if n > 1:                                  # row 0 of B has no weight
            dsB[1:] = _softmax_adjoint(np.where(strict, Bm, 0.0)[1:], np.where(strict, dB, 0.0)[1:])
            dsB = np.where(strict, dsB, 0.0)
    dq = scale * dsA @ k
    dk = scale * dsA.T @ q + scale * dsB.T @ x
    dx = scale * dsB @ k
    if form == 2:
        dq = dq + dx
    else:
        dk = dk + dx
    return dq, dk, Yv, dbeta


def _attention_vjp(op, inp, scale, form=1):
    q, k, v, dout = _f64(inp["q"]), _f64(inp["k"]), _f64(inp["v"]), _f64(inp["do"])
    g, gg, beta, w = _f64(inp.get("g")), _f64(inp.get("g_gamma")), _f64(inp.get("beta")), _f64(inp.get("w"))
    B, T, H, K = q.shape
    HV = v.shape[2]
    G = HV // H
    out = {"dq": np.zeros(q.shape), "dk": np.zeros(k.shape), "dv": np.zeros(v.shape)}
    for name, x in (("dg", g), ("dg_gamma", gg), ("dbeta", beta), ("dw", w)):
        if x is not None:
            out[name] = np.zeros(x.shape)
    for n, b, t0, t1 in _sequences(B, T, inp.get("cu_seqlens")):
        for hv in range(HV):
            hq = hv // G
            qs, ks, vs, ds = q[b, t0:t1, hq], k[b, t0:t1, hq], v[b, t0:t1, hv], dout[b, t0:t1, hv]
            gs = None if g is None else g[b, t0:t1, hv]
            bs = None if beta is None else beta[b, t0:t1, hv]
            if op in ("softmax_attn_vjp", "fox_vjp"):
                ggv = None if gg is None else float(gg.reshape(-1)[hv])
                dq, dk, dv, dgate = _fox_vjp_head(qs, ks, vs, gs, ggv, scale, ds)
                if g is not None:
                    out["dg"][b, t0:t1, hv] = dgate
                if gg is not None:
                    out["dg_gamma"].reshape(-1)[hv] += dgate.sum()
            elif op == "path_attn_vjp":
                dq, dk, dv, dw, db, dgate = _path_vjp_head(qs, ks, vs, w[b, t0:t1, hq], bs, gs, scale, ds)
                out["dw"][b, t0:t1, hq] += dw
                out["dbeta"][b, t0:t1, hv] = db
                if g is not None:
                    out["dg"][b, t0:t1, hv] = dgate
            else:  # deltaformer_vjp
                dq, dk, dv, db = _deltaformer_vjp_head(qs, ks, vs, np.ones(t1 - t0) if bs is None else bs, scale,
                                                       int(form), ds)
                if beta is not None:
                    out["dbeta"][b, t0:t1, hv] = db
            out["dq"][b, t0:t1, hq] += dq
            out["dk"][b, t0:t1, hq] += dk
            out["dv"][b, t0:t1, hv] = dv
    return out


VJP_RECURRENT = tuple(op + "_vjp" for op in ("linear_attn", "retention", "simple_gla", "gla", "delta_rule",
                                             "gated_delta_rule", "comba", "efla"))
VJP_ATTENTION = ("softmax_attn_vjp", "fox_vjp", "deltaformer_vjp", "path_attn_vjp")


# ----------------------------------------------------------------------------
# vectors: recompute, compare, report
# ----------------------------------------------------------------------------

SEQUENCE_OPS = tuple(_RECURRENT) + ("mesa_net", "deltaformer", "path_attn", "softmax_attn", "fox")
ELEMENTWISE_OPS = ("dyt", "dyisru", "dyt_vjp", "dyisru_vjp", "softcap", "softcap_vjp",
                   "rmsnorm", "rmsnorm_vjp", "l2norm", "l2norm_vjp")
SIGNED_ZERO_OPS = ("dyt", "dyisru", "softcap", "rmsnorm")   # forward y: the tables fix the sign of 0
SUPPORTED_OPS = SEQUENCE_OPS + ELEMENTWISE_OPS + VJP_RECURRENT + VJP_ATTENTION


def _opt(inputs, name):
    a = inputs.get(name)
    return None if a is None else np.asarray(a)


def compute(op, inputs, params):
    """The oracle's outputs (name -> float64 array) for one case."""
    p = params or {}
    # A vector should record scale (SPEC 2.3: no default); absent, the
    # generator's lacs_reference_run (include/lacs/ops.h) used K^-1/2.
    if "scale" in p:
        scale = float(p["scale"])
    elif "q" in inputs:
        scale = float(np.asarray(inputs["q"]).shape[-1]) ** -0.5
    else:
        scale = 0.0
    split = p.get("split")
    split = None if split is None else int(split)
    if op in _RECURRENT:
        return recurrent(op, inputs, scale, split, float(p.get("eps", 0.0)))
    if op in VJP_RECURRENT:
        return _recurrent_vjp(op, inputs, scale, split)
    if op in VJP_ATTENTION:
        return _attention_vjp(op, inputs, scale, int(p.get("form", 1)))
    if op == "mesa_net":
        return mesa_net(inputs, split)
    if op == "softmax_attn":
        return softmax_attn(inputs, scale)
    if op == "fox":
        return fox(inputs, scale)
    if op == "deltaformer":
        return deltaformer(inputs, scale, int(p.get("form", 1)))   # ops.h: form defaults to 1
    if op == "path_attn":
        return path_attn(inputs, scale)
    if op == "dyt":
        return {"y": dyt(inputs["x"], _scalar(inputs["alpha"]), _opt(inputs, "weight"), _opt(inputs, "bias"))}
    if op == "dyisru":
        return {"y": dyisru(inputs["x"], _scalar(inputs["C"]), _opt(inputs, "weight"), _opt(inputs, "bias"))}
    if op == "dyt_vjp":
        return dyt_vjp(inputs["x"], inputs["dy"], _scalar(inputs["alpha"]), _opt(inputs, "weight"))
    if op == "dyisru_vjp":
        return dyisru_vjp(inputs["x"], inputs["dy"], _scalar(inputs["C"]), _opt(inputs, "weight"))
    eps = float(p.get("eps", 0.0))
    if op == "softcap":
        return {"y": softcap(inputs["x"], float(p["cap"]))}
    if op == "softcap_vjp":
        return softcap_vjp(inputs["x"], inputs["dy"], float(p["cap"]))
    if op == "rmsnorm":
        return {"y": rmsnorm(inputs["x"], eps, _opt(inputs, "weight"))}
    if op == "rmsnorm_vjp":
        return rmsnorm_vjp(inputs["x"], inputs["dy"], eps, _opt(inputs, "weight"))
    if op == "l2norm":
        return {"y": l2norm(inputs["x"], eps, int(p.get("convention", 0)))}
    if op == "l2norm_vjp":
        return l2norm_vjp(inputs["x"], inputs["dy"], eps, int(p.get("convention", 0)))
    raise KeyError(op)


def _block_error(x, ref):
    """||x - ref||_F / ||ref||_F over the finite elements of ref (absolute
    where ||ref|| = 0), after an exact match of the NaN/+inf/-inf pattern;
    a mismatch is inf."""
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    ref = np.asarray(ref, dtype=np.float64).reshape(-1)
    if x.shape != ref.shape:
        return math.inf
    for pred in (np.isnan, np.isposinf, np.isneginf):
        if not np.array_equal(pred(x), pred(ref)):
            return math.inf
    fin = np.isfinite(ref)
    xf, rf = x[fin], ref[fin]
    if rf.size == 0:
        return 0.0
    # scaled norms: no overflow for huge finite values
    m = max(float(np.max(np.abs(rf))), float(np.max(np.abs(xf))))
    if m == 0.0:
        return 0.0
    num = np.linalg.norm((xf / m) - (rf / m)) * m
    den = np.linalg.norm(rf / m) * m
    return float(num / den) if den > 0 else float(num)


def _blocks(op, name, shape, cu_seqlens):
    """Index tuples of the comparison blocks of one output (SPEC 5.1)."""
    if op in VJP_RECURRENT + VJP_ATTENTION:
        if name in ("dq", "dk", "dv", "dw", "dbeta", "dg", "dgk"):   # [B, T, heads, ...]: per (batch or sequence, head)
            B, T, heads = shape[0], shape[1], shape[2]
            return [(b, slice(t0, t1), h) for (_, b, t0, t1) in _sequences(B, T, cu_seqlens) for h in range(heads)]
        if len(shape) == 4:                                           # dh0, dh_split: per (sequence, head)
            return [(n, h) for n in range(shape[0]) for h in range(shape[1])]
        return [(h,) for h in range(shape[0])]                        # dg_gamma: per head
    if op in SEQUENCE_OPS:
        if name == "o":            # [B, T, HV, V]: (batch or sequence, head)
            B, T, HV = shape[0], shape[1], shape[2]
            seqs = _sequences(B, T, cu_seqlens)
            return [(b, slice(t0, t1), hv) for (_, b, t0, t1) in seqs for hv in range(HV)]
        if len(shape) >= 2:        # states [N, HV, K, V]: (sequence, head)
            return [(n, hv) for n in range(shape[0]) for hv in range(shape[1])]
        return [Ellipsis]
    if name in ("y", "dx") and len(shape) == 2:   # [rows, dim]: per row
        return [(r,) for r in range(shape[0])]
    return [Ellipsis]


def compare(op, got, expected, cu_seqlens=None):
    """Worst block error over every expected output, and per-output figures."""
    worst = 0.0
    per = {}
    for name, ref in expected.items():
        ref = np.asarray(ref, dtype=np.float64)
        if name not in got:
            per[name] = math.inf
            worst = math.inf
            continue
        x = np.asarray(got[name], dtype=np.float64)
        if x.shape != ref.shape:
            e = math.inf
        else:
            e = 0.0
            for idx in _blocks(op, name, ref.shape, cu_seqlens):
                be = _block_error(x[idx], ref[idx])
                if not be <= e:
                    e = be if not math.isnan(be) else math.inf
            if op in SIGNED_ZERO_OPS and name == "y":
                # the forward tables fix the sign of zeros too
                z = ref == 0
                if not np.array_equal(np.signbit(x[z]), np.signbit(ref[z])):
                    e = math.inf
        per[name] = e
        worst = max(worst, e)
    return worst, per


def load_vector(path):
    """lacs.vectors.load_vector (python/lacs), importable with PYTHONPATH=python;
    the repository's python/ is added to the path when it is not."""
    try:
        from lacs.vectors import load_vector as lv
    except ImportError:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
        from lacs.vectors import load_vector as lv
    return lv(path)


def _manifest_cases(vectors_dir):
    with open(os.path.join(vectors_dir, "MANIFEST.json")) as f:
        man = json.load(f)
    if isinstance(man, dict):
        for key in ("cases", "vectors", "entries"):
            if isinstance(man.get(key), list):
                return man[key]
        raise ValueError("MANIFEST.json: no list of cases")
    return man


def check_case(path):
    """(op, id, worst error or None if unsupported, per-output errors)."""
    vec = load_vector(path)
    meta = getattr(vec, "meta", {}) or {}
    op = vec.op
    cid = meta.get("id", os.path.basename(path))
    if op not in SUPPORTED_OPS:
        return op, cid, None, {}
    inputs = {k: np.asarray(a) for k, a in vec.inputs.items()}
    got = compute(op, inputs, vec.params)
    cu = inputs.get("cu_seqlens")
    worst, per = compare(op, got, vec.expected, cu)
    return op, cid, worst, per


def run(vectors_dir, op_filter=None, verbose=False, out=sys.stdout):
    """Check every manifest case; returns (cases, failed, skipped, worst)."""
    cases = _manifest_cases(vectors_dir)
    n = failed = 0
    skipped = {}
    worst = 0.0
    for c in cases:
        if op_filter and c.get("op") != op_filter:
            continue
        path = os.path.join(vectors_dir, c["path"])
        op = c.get("op")
        if op not in SUPPORTED_OPS:
            skipped[op] = skipped.get(op, 0) + 1
            continue
        try:
            op, cid, err, per = check_case(path)
        except Exception as exc:  # a case the oracle cannot run is a failure
            cid, err, per = c.get("id", path), math.inf, {"error": repr(exc)}
            print("%s: %r" % (cid, exc), file=out)
        if err is None:
            skipped[op] = skipped.get(op, 0) + 1
            continue
        n += 1
        ok = err <= TOLERANCE
        failed += not ok
        worst = max(worst, err)
        line = "%s %.3e %s" % (cid, err, "PASS" if ok else "FAIL")
        if verbose:
            line += "  " + " ".join("%s=%s" % (k, ("%.3e" % e) if isinstance(e, float) else e)
                                    for k, e in per.items())
        print(line, file=out)
    nskip = sum(skipped.values())
    tail = ""
    if nskip:
        tail = " (unsupported: %s)" % ", ".join("%s x%d" % (k, v) for k, v in sorted(skipped.items(), key=str))
    print("oracle: %d cases, %d failed, %d skipped%s, worst %.3e" % (n, failed, nskip, tail, worst), file=out)
    return n, failed, nskip, worst


def main(argv=None):
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vectors", default=os.path.join(here, "..", "..", "vectors"))
    ap.add_argument("--op", default=None)
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args(argv)
    if not os.path.exists(os.path.join(a.vectors, "MANIFEST.json")):
        print("oracle: %s has no MANIFEST.json" % a.vectors, file=sys.stderr)
        return 2
    n, failed, nskip, worst = run(a.vectors, a.op, a.verbose)
    if n == 0:
        print("oracle: no case checked", file=sys.stderr)
        return 1
    return 0 if failed == 0 and worst <= TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main())

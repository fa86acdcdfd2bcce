"""fla's naive PyTorch functions as a lacs implementation, for the Python harness.

    LACS_FLA=/path/to/flash-linear-attention PYTHONPATH=python python3 -m lacs check \\
        --impl python:tests/tools/fla_naive.py:run [--op OP]

The measurement of SPEC.md 11.7: fla's reference functions (fla-org/
flash-linear-attention at bc3b101d; any checkout whose fla/ops/*/naive.py
have the functions named below) must pass every required case of the ops they
implement. Nothing of fla is copied here: each naive.py is loaded from the
checkout named by LACS_FLA (the files import only torch and einops, so neither
fla's package nor Triton is needed), and fla/modules/layernorm.py's
rms_norm_ref is compiled from its own source in that file (the module itself
imports Triton). Needs torch (CPU is enough) and einops; not part of
`make test`, which has no torch (README, "Validation against the field").

What maps onto what (SPEC.md 7.1), in fp32, on the CPU:

| lacs op | fla function | notes |
|---|---|---|
| linear_attn | linear_attn/naive_recurrent_linear_attn | |
| retention | simple_gla/naive_recurrent_simple_gla | g = g_gamma at every token (chunk_simple_gla's g_gamma) |
| simple_gla | simple_gla/naive_recurrent_simple_gla | |
| gla | gla/naive_recurrent_gla | scale fixed at K^-1/2: other scales unsupported |
| delta_rule | delta_rule/delta_rule_recurrence | head-first; scale fixed at K^-1/2 |
| gated_delta_rule (g) | gated_delta_rule/naive_recurrent_gated_delta_rule | |
| gated_delta_rule (gk) | kda/naive_recurrent_kda | |
| comba | comba/naive_chunk_comba (p = k, chunks of 64) | LACS_FLA_COMBA=recurrent: naive_recurrent_comba |
| softmax_attn | attn/naive_parallel_attn | K = V (its output takes q's head size) |
| fox | forgetting_attn/naive_forgetting_attn | ALiBi: g = g_gamma at every token |
| deltaformer | deltaformer/naive_deltaformer_attn | fla's form (2) only, scale K^-1/2, K = V |
| path_attn | path_attn/naive_path_attn | g = 0 when absent |
| mesa_net | mesa_net/naive_mesa_net_exact | K = V (its h_kv is K x K); LACS_FLA_MESA=cg: naive_mesa_net_CG |
| rmsnorm | modules/layernorm.py rms_norm_ref | weight 1 when absent |

Heads: q, k repeated for grouped value heads where the function wants equal
head counts. Varlen batches run sequence by sequence; state-carry cases
(`split`) run the two parts with the state handed over, as the checker does.
A case a function cannot express (another scale, K != V, another DeltaFormer
form, a missing initial-state argument) raises NotImplementedError: SKIP.
"""

import ast
import importlib.util
import math
import os

import numpy as np
import torch

_MODULES = {}


def _root():
    root = os.environ.get("LACS_FLA")
    if not root or not os.path.isdir(os.path.join(root, "fla", "ops")):
        raise RuntimeError("set LACS_FLA to a checkout of fla-org/flash-linear-attention (the folder holding fla/)")
    return root


def _naive(op_folder, name):
    """Function `name` of fla/ops/<op_folder>/naive.py, loaded by path."""
    if op_folder not in _MODULES:
        path = os.path.join(_root(), "fla", "ops", op_folder, "naive.py")
        spec = importlib.util.spec_from_file_location(f"fla_naive_{op_folder}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _MODULES[op_folder] = module
    return getattr(_MODULES[op_folder], name)


def _rms_norm_ref():
    """rms_norm_ref, compiled from its definition in fla/modules/layernorm.py."""
    if "rms_norm_ref" not in _MODULES:
        path = os.path.join(_root(), "fla", "modules", "layernorm.py")
        with open(path) as f:
            tree = ast.parse(f.read(), path)
        node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "rms_norm_ref")
        namespace = {"torch": torch}
        exec(compile(ast.Module(body=[node], type_ignores=[]), path, "exec"), namespace)
        _MODULES["rms_norm_ref"] = namespace["rms_norm_ref"]
    return _MODULES["rms_norm_ref"]


def _t(x):
    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))


def _np(x):
    return x.detach().to(torch.float64).numpy()


def _repeat_heads(x, HV):
    """q/k heads repeated for their value heads (fla's repeat_interleave, GVA grouped)."""
    return x.repeat_interleave(HV // x.shape[2], dim=2)


def _sequences(inputs, B, T):
    cu = inputs.get("cu_seqlens")
    if cu is None:
        return [(b, 0, T) for b in range(B)]
    cu = [int(c) for c in cu]
    return [(0, cu[n], cu[n + 1]) for n in range(len(cu) - 1)]


def _default_scale(params, K):
    return math.isclose(params["scale"], K ** -0.5, rel_tol=1e-12)


# ---- the recurrent ops: one call per (sequence, part); parts for state carry ----

def _recurrent_call(op, x, h0, params):
    """x: dict of [1, T, ., .] tensors for one sequence; h0 [1, HV, K, V]. Returns (o [1, T, HV, V], ht)."""
    q, k, v = x["q"], x["k"], x["v"]
    HV, K = v.shape[2], q.shape[3]
    scale = params.get("scale")
    if op == "linear_attn":
        o, ht = _naive("linear_attn", "naive_recurrent_linear_attn")(
            _repeat_heads(q, HV), _repeat_heads(k, HV), v, scale=scale, initial_state=h0, output_final_state=True)
        return o, ht
    if op in ("simple_gla", "retention"):
        g = x["g"] if op == "simple_gla" else x["g_gamma"].reshape(1, 1, HV).expand(1, q.shape[1], HV)
        return _naive("simple_gla", "naive_recurrent_simple_gla")(
            _repeat_heads(q, HV), _repeat_heads(k, HV), v, g, scale=scale, initial_state=h0, output_final_state=True)
    if op == "gla":
        if not _default_scale(params, K):
            raise NotImplementedError("naive_recurrent_gla fixes scale = K^-1/2")
        return _naive("gla", "naive_recurrent_gla")(
            _repeat_heads(q, HV), _repeat_heads(k, HV), v, x["gk"], initial_state=h0, output_final_state=True)
    if op == "delta_rule":
        if not _default_scale(params, K):
            raise NotImplementedError("delta_rule_recurrence fixes scale = K^-1/2")
        tr = lambda a: a.transpose(1, 2).contiguous()  # noqa: E731 (head-first)
        o, ht = _naive("delta_rule", "delta_rule_recurrence")(
            tr(_repeat_heads(q, HV)), tr(_repeat_heads(k, HV)), tr(v), x["beta"].transpose(1, 2).contiguous(),
            initial_state=h0, output_final_state=True)
        return o.transpose(1, 2), ht
    if op == "gated_delta_rule" and "gk" in x:
        return _naive("kda", "naive_recurrent_kda")(
            q, k, v, x["gk"], x["beta"], scale=scale, initial_state=h0, output_final_state=True)
    if op == "gated_delta_rule":
        return _naive("gated_delta_rule", "naive_recurrent_gated_delta_rule")(
            _repeat_heads(q, HV), _repeat_heads(k, HV), v, x["beta"], x["g"], scale=scale, initial_state=h0,
            output_final_state=True)
    if op == "comba":
        qq, kk = _repeat_heads(q, HV), _repeat_heads(k, HV)
        if os.environ.get("LACS_FLA_COMBA") == "recurrent":
            return _naive("comba", "naive_recurrent_comba")(  # its order: beta, then g
                qq, kk, v, kk, x["beta"], x["g"], scale=scale, initial_state=h0, output_final_state=True)
        return _naive("comba", "naive_chunk_comba")(
            qq, kk, v, kk, x["g"], x["beta"], chunk_size=64, scale=scale, initial_state=h0, output_final_state=True)
    raise NotImplementedError(f"{op}: no fla naive function")


def _mesa_call(x, h0, h0kk, params):
    q, k, v = x["q"], x["k"], x["v"]
    HV, K, V = v.shape[2], q.shape[3], v.shape[3]
    if K != V:
        raise NotImplementedError("naive_mesa_net_exact keeps h_kv K x K: K = V only")
    T = q.shape[1]
    g = x.get("g", torch.zeros(1, T, HV))
    beta = x.get("beta", torch.ones(1, T, HV))
    qq, kk = _repeat_heads(q, HV), _repeat_heads(k, HV)
    if os.environ.get("LACS_FLA_MESA") == "cg":
        o, h_kk, h_kv = _naive("mesa_net", "naive_mesa_net_CG")(  # its chunks must divide T
            qq, kk, v, g, x["lambda"], beta, chunk_size=64 if T % 64 == 0 else T, h_kk_init=h0kk, h_kv_init=h0)
    else:
        o, h_kk, h_kv = _naive("mesa_net", "naive_mesa_net_exact")(
            qq, kk, v, g, x["lambda"], beta, h_kk_init=h0kk, h_kv_init=h0)
    return o, h_kv, h_kk


def _sequence_op(op, inputs, params):
    t = {name: _t(a) for name, a in inputs.items() if name != "cu_seqlens"}
    B, T, H, K = t["q"].shape
    HV, V = t["v"].shape[2], t["v"].shape[3]
    seqs = _sequences(inputs, B, T)
    N = len(seqs)
    split = int(params["split"]) if "split" in params else None
    mesa = op == "mesa_net"
    o = np.zeros((B, T, HV, V))
    out = {"ht": np.zeros((N, HV, K, V))}
    if mesa:
        out["ht_kk"] = np.zeros((N, HV, K, K))
    if split is not None:
        out["ht_split"] = np.zeros((N, HV, K, V))
        if mesa:
            out["ht_kk_split"] = np.zeros((N, HV, K, K))
    per_token = [n for n in ("q", "k", "v", "beta", "g", "gk") if n in t]
    for n, (b, t0, t1) in enumerate(seqs):
        h = t["h0"][n:n + 1].clone() if "h0" in t else torch.zeros(1, HV, K, V)
        hkk = t["h0_kk"][n:n + 1].clone() if "h0_kk" in t else torch.zeros(1, HV, K, K)
        cuts = [t0, t0 + split, t1] if split is not None else [t0, t1]
        for part, (a, z) in enumerate(zip(cuts, cuts[1:])):
            if z == a:
                continue
            x = {name: t[name][b:b + 1, a:z] for name in per_token}
            for name in ("g_gamma", "lambda"):
                if name in t:
                    x[name] = t[name]
            if mesa:
                op_o, h, hkk = _mesa_call(x, h, hkk, params)
            else:
                op_o, h = _recurrent_call(op, x, h, params)
            o[b, a:z] = _np(op_o[0])
            if split is not None and part == 0:
                out["ht_split"][n] = _np(h[0])
                if mesa:
                    out["ht_kk_split"][n] = _np(hkk[0])
        out["ht"][n] = _np(h[0])
        if mesa:
            out["ht_kk"][n] = _np(hkk[0])
    out["o"] = o
    return out


def _attention_op(op, inputs, params):
    t = {name: _t(a) for name, a in inputs.items() if name != "cu_seqlens"}
    B, T, H, K = t["q"].shape
    HV, V = t["v"].shape[2], t["v"].shape[3]
    scale = params["scale"]
    if op == "softmax_attn" and K != V:
        raise NotImplementedError("naive_parallel_attn reshapes its output with q's head size: K = V only")
    if op == "deltaformer":
        if int(params.get("form", 1)) != 2:
            raise NotImplementedError("naive_deltaformer_attn is fla's form (2) only")
        if not _default_scale(params, K) or K != V:
            raise NotImplementedError("naive_deltaformer_attn fixes scale = K^-1/2 and needs K = V")
    o = np.zeros((B, T, HV, V))
    for b, t0, t1 in _sequences(inputs, B, T):
        if t1 == t0:
            continue
        x = {name: t[name][b:b + 1, t0:t1] for name in ("q", "k", "v", "w", "beta", "g") if name in t}
        q, k, v = _repeat_heads(x["q"], HV), _repeat_heads(x["k"], HV), x["v"]
        n = t1 - t0
        if op == "softmax_attn":
            r = _naive("attn", "naive_parallel_attn")(q, k, v, scale=scale)
            r = r[0] if isinstance(r, tuple) else r
        elif op == "fox":
            g = x["g"] if "g" in x else t["g_gamma"].reshape(1, 1, HV).expand(1, n, HV)
            r = _naive("forgetting_attn", "naive_forgetting_attn")(q, k, v, g, scale=scale)
        elif op == "deltaformer":
            r = _naive("deltaformer", "naive_deltaformer_attn")(q, k, v, x.get("beta"))
        elif op == "path_attn":
            g = x["g"] if "g" in x else torch.zeros(1, n, HV)
            r = _naive("path_attn", "naive_path_attn")(q, k, v, _repeat_heads(x["w"], HV), x["beta"], g, scale)
        else:
            raise NotImplementedError(op)
        o[b, t0:t1] = _np(r[0])
    return {"o": o}


def run(op, inputs, params):
    with torch.no_grad():
        if op in ("linear_attn", "retention", "simple_gla", "gla", "delta_rule", "gated_delta_rule", "comba",
                  "mesa_net"):
            return _sequence_op(op, inputs, params)
        if op in ("softmax_attn", "fox", "deltaformer", "path_attn"):
            return _attention_op(op, inputs, params)
        if op == "rmsnorm":
            x = _t(inputs["x"])
            weight = _t(inputs["weight"]) if "weight" in inputs else torch.ones(x.shape[-1])
            return {"y": _np(_rms_norm_ref()(x, weight, None, eps=params["eps"], upcast=True))}
    raise NotImplementedError(f"{op}: fla has no naive function for it")

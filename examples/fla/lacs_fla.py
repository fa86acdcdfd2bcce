"""fla's kernels as a lacs implementation: a harness function mapping lacs's
cases onto fla's `chunk_*` and `fused_recurrent_*` APIs (the fla-core /
flash-linear-attention packages on PyPI; verified with fla-core 0.6.0).

    python3 -m lacs check --impl python:examples/fla/lacs_fla.py:run [--op OP ...]
    pytest --lacs-impl python:examples/fla/lacs_fla.py:run

LACS_FLA_MODE chooses what answers the calls:
  chunk            fla.ops.<op>.chunk_<op>             (the default; Triton: a GPU)
  fused_recurrent  fla.ops.<op>.fused_recurrent_<op>   (Triton: a GPU)
  naive            the same calls, with the same arguments, answered on the CPU by
                   fla's pure-PyTorch reference functions of the installed package
                   (fla/ops/*/naive.py, loaded by path: neither Triton nor a GPU):
                   this verifies the mapping below where no GPU is.
LACS_FLA_DEVICE (default cuda; cpu in naive mode) is where the tensors go.
fla is imported on the first call, never at import: `lacs list` and the
harness's start need neither torch's CUDA nor Triton.

The mapping (SPEC.md 7.1), for every mode:

| lacs op | fla call | notes |
|---|---|---|
| delta_rule | chunk_delta_rule / fused_recurrent_delta_rule(q, k, v, beta) | |
| gated_delta_rule, g | chunk_gated_delta_rule / fused_recurrent_gated_delta_rule(q, k, v, g, beta) | |
| gated_delta_rule, gk | chunk_kda / fused_recurrent_kda(q, k, v, g=gk, beta) | gk is already a log decay: use_gate_in_kernel=False |
| linear_attn | chunk_linear_attn / fused_recurrent_linear_attn(q, k, v, normalize=False) | chunk_linear_attn normalizes by default |
| simple_gla | chunk_simple_gla / fused_recurrent_simple_gla(q, k, v, g=g) | |
| retention | chunk_simple_gla / fused_recurrent_simple_gla(q, k, v, g_gamma=g_gamma) | chunk_retention fixes its own gammas |
| gla | chunk_gla(q, k, v, g=gk) / fused_recurrent_gla(q, k, v, gk=gk) | |
| comba | chunk_comba(q, k, v, p=k, g, beta) / fused_recurrent_comba(q, k, p=k, v, g, beta) | the two orders differ |

Common arguments: `scale` = the case's scale, always explicit (fla's None means
K^-1/2, which only some cases use); `initial_state` = h0 (fp32), or None;
`output_final_state=True` (ht); `cu_seqlens` = the case's (int64, B = 1,
N rows of h0); `use_qk_l2norm_in_kernel=False`: lacs's ops take q and k as
given (SPEC.md 7.1: the flag is lacs_ref_l2norm with eps 1e-6 applied to q
and k before the op; no lacs case applies it). Heads: lacs's grouped value
heads are fla's GVA as they are (value head i reads q/k head i // (HV/H)), no
repeat. Inputs go in their stored dtype (bfloat16 in the bf16 tier). A
state-carry case is two calls, the second resuming from the final state of
the first (fla #285). The ops of the attention forms, MesaNet and the norms
are not mapped here (tests/tools/fla_naive.py checks fla's naive functions
for them): they are declared out.

LACS_FLA_MISTAKE (for tests/clients/test_fla.py only) makes a mapping
mistake users make, to show that lacs catches it: `scale-none` (scale
left to fla's default), `normalize-default` (chunk_linear_attn's
normalize=True), `state-not-carried` (the second part of a state-carry case
started from zeros).
"""

import importlib
import importlib.util
import os

OPS = ("delta_rule", "gated_delta_rule", "linear_attn", "simple_gla", "retention", "gla", "comba")


def _mode():
    mode = os.environ.get("LACS_FLA_MODE", "chunk")
    if mode not in ("chunk", "fused_recurrent", "naive"):
        raise ValueError(f"LACS_FLA_MODE={mode!r}: expected chunk, fused_recurrent or naive")
    return mode


def _mistake():
    return os.environ.get("LACS_FLA_MISTAKE", "")


# ---- the calls: fla's kernels, or the same signatures over fla's naive functions ----

def _kernel(op_module, name):
    """fla.ops.<op_module>.<name>, imported on first use (needs Triton)."""
    return getattr(importlib.import_module(f"fla.ops.{op_module}"), name)


_NAIVE = {}


def _naive(op_module, name):
    """fla/ops/<op_module>/naive.py's function `name`, from the installed package, loaded by path: the files
    import only torch and einops, so neither fla's package (which imports Triton) nor a GPU is needed."""
    if op_module not in _NAIVE:
        spec = importlib.util.find_spec("fla")
        if spec is None or not spec.submodule_search_locations:
            raise RuntimeError("fla is not installed (pip install fla-core==0.6.0)")
        path = os.path.join(list(spec.submodule_search_locations)[0], "ops", op_module, "naive.py")
        module_spec = importlib.util.spec_from_file_location(f"lacs_fla_naive_{op_module}", path)
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
        _NAIVE[op_module] = module
    return getattr(_NAIVE[op_module], name)


class NaiveAPI:
    """fla's chunk_* / fused_recurrent_* signatures, answered by its naive functions: GVA by repeating q/k
    heads, varlen sequence by sequence, a fixed K^-1/2 by scaling q first, the in-kernel l2norm as
    fla/modules/l2norm.py computes it. The semantics are the kernels' documented ones; what is verified
    through this class is the mapping above, not the kernels."""

    @staticmethod
    def _l2norm(x):
        return x / (x.float().pow(2).sum(-1, keepdim=True) + 1e-6).sqrt().to(x.dtype)

    @staticmethod
    def _run(step, q, k, v, per_token, scale, initial_state, output_final_state, cu_seqlens,
             use_qk_l2norm_in_kernel=False):
        """Calls step(q, k, v, per_token tensors, scale, h0) -> (o, ht) per sequence, q/k repeated onto the
        value heads."""
        import torch
        if use_qk_l2norm_in_kernel:
            q, k = NaiveAPI._l2norm(q), NaiveAPI._l2norm(k)
        K, HV = q.shape[-1], v.shape[2]
        scale = K ** -0.5 if scale is None else scale
        q, k = (x.repeat_interleave(HV // x.shape[2], dim=2) for x in (q, k))
        if cu_seqlens is None:
            bounds = [(b, 0, q.shape[1]) for b in range(q.shape[0])]
        else:
            bounds = [(0, int(a), int(z)) for a, z in zip(cu_seqlens[:-1].tolist(), cu_seqlens[1:].tolist())]
        o = torch.zeros(v.shape, dtype=torch.float32, device=v.device)
        states = []
        for n, (b, a, z) in enumerate(bounds):
            h0 = initial_state[n:n + 1].float() if initial_state is not None else None
            cut = lambda x: x[b:b + 1, a:z]  # noqa: E731
            if z > a:
                part, h = step(cut(q), cut(k), cut(v), {name: cut(x) for name, x in per_token.items()}, scale, h0)
                o[b, a:z] = part[0].float()
            else:
                h = h0 if h0 is not None else torch.zeros(1, HV, K, v.shape[-1], device=v.device)
            states.append(h.float())
        return o, (torch.cat(states) if output_final_state else None)

    @staticmethod
    def _fixed_scale(q, scale):
        """q scaled so that a function that multiplies by K^-1/2 computes `scale`."""
        return q.float() * (scale / q.shape[-1] ** -0.5)

    def delta_rule(self, q, k, v, beta, scale=None, initial_state=None, output_final_state=False,
                   use_qk_l2norm_in_kernel=False, cu_seqlens=None):
        def step(q, k, v, x, scale, h0):  # delta_rule_recurrence: head-first, K^-1/2 fixed
            head_first = lambda t: t.transpose(1, 2).contiguous()  # noqa: E731
            o, h = _naive("delta_rule", "delta_rule_recurrence")(
                head_first(self._fixed_scale(q, scale)), head_first(k), head_first(v), head_first(x["beta"]),
                initial_state=h0, output_final_state=True)
            return o.transpose(1, 2), h
        return self._run(step, q, k, v, {"beta": beta}, scale, initial_state, output_final_state, cu_seqlens,
                         use_qk_l2norm_in_kernel)

    def gated_delta_rule(self, q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                         use_qk_l2norm_in_kernel=False, cu_seqlens=None):
        def step(q, k, v, x, scale, h0):
            return _naive("gated_delta_rule", "naive_recurrent_gated_delta_rule")(
                q, k, v, x["beta"], x["g"], scale=scale, initial_state=h0, output_final_state=True)
        return self._run(step, q, k, v, {"g": g, "beta": beta}, scale, initial_state, output_final_state,
                         cu_seqlens, use_qk_l2norm_in_kernel)

    def kda(self, q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
            use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False, cu_seqlens=None):
        if use_gate_in_kernel:
            raise NotImplementedError("the naive KDA takes the log decay itself")

        def step(q, k, v, x, scale, h0):
            return _naive("kda", "naive_recurrent_kda")(q, k, v, x["g"], x["beta"], scale=scale, initial_state=h0,
                                                        output_final_state=True)
        return self._run(step, q, k, v, {"g": g, "beta": beta}, scale, initial_state, output_final_state,
                         cu_seqlens, use_qk_l2norm_in_kernel)

    def linear_attn(self, q, k, v, scale=None, initial_state=None, output_final_state=False, normalize=True,
                    cu_seqlens=None):
        def step(q, k, v, x, scale, h0):
            o, h = _naive("linear_attn", "naive_recurrent_linear_attn")(
                q, k, v, scale=scale, initial_state=h0, output_final_state=True, normalize=normalize)
            return o, (h[0] if isinstance(h, tuple) else h)
        return self._run(step, q, k, v, {}, scale, initial_state, output_final_state, cu_seqlens)

    def simple_gla(self, q, k, v, g=None, g_gamma=None, scale=None, initial_state=None, output_final_state=False,
                   cu_seqlens=None):
        per_token = {"g": g} if g is not None else {}

        def step(q, k, v, x, scale, h0):
            gate = x["g"] if "g" in x else g_gamma.reshape(1, 1, -1).expand(1, q.shape[1], g_gamma.shape[0])
            return _naive("simple_gla", "naive_recurrent_simple_gla")(q, k, v, gate, scale=scale, initial_state=h0,
                                                                      output_final_state=True)
        return self._run(step, q, k, v, per_token, scale, initial_state, output_final_state, cu_seqlens)

    def gla(self, q, k, v, g, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None):
        def step(q, k, v, x, scale, h0):  # naive_recurrent_gla: K^-1/2 fixed
            return _naive("gla", "naive_recurrent_gla")(self._fixed_scale(q, scale), k, v, x["g"], initial_state=h0,
                                                        output_final_state=True)
        return self._run(step, q, k, v, {"g": g}, scale, initial_state, output_final_state, cu_seqlens)

    def comba(self, q, k, v, p, g, beta, scale=None, initial_state=None, output_final_state=False,
              use_qk_l2norm_in_kernel=False, cu_seqlens=None):
        def step(q, k, v, x, scale, h0):  # the chunk form: naive_recurrent_comba reads the decayed state (SPEC 4.6)
            return _naive("comba", "naive_chunk_comba")(q, k, v, x["p"], x["g"], x["beta"], chunk_size=64,
                                                        scale=scale, initial_state=h0, output_final_state=True)
        p = p.repeat_interleave(v.shape[2] // p.shape[2], dim=2)
        return self._run(step, q, k, v, {"p": p, "g": g, "beta": beta}, scale, initial_state, output_final_state,
                         cu_seqlens, use_qk_l2norm_in_kernel)


_API = NaiveAPI()


def _call(op, gated_by_channel, mode, t, h0, scale, cu_seqlens):
    """One fla call on tensors t (q, k, v and the gates of one part of the case). Returns (o, final state)."""
    common = dict(scale=scale, initial_state=h0, output_final_state=True, cu_seqlens=cu_seqlens)
    q, k, v = t["q"], t["k"], t["v"]
    naive = mode == "naive"
    if op == "delta_rule":
        f = _API.delta_rule if naive else _kernel("delta_rule", f"{mode}_delta_rule")
        return f(q, k, v, t["beta"], use_qk_l2norm_in_kernel=False, **common)
    if op == "gated_delta_rule" and gated_by_channel:
        f = _API.kda if naive else _kernel("kda", f"{mode}_kda")
        return f(q, k, v, t["gk"], t["beta"], use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False, **common)
    if op == "gated_delta_rule":
        f = _API.gated_delta_rule if naive else _kernel("gated_delta_rule", f"{mode}_gated_delta_rule")
        return f(q, k, v, g=t["g"], beta=t["beta"], use_qk_l2norm_in_kernel=False, **common)
    if op == "linear_attn":
        f = _API.linear_attn if naive else _kernel("linear_attn", f"{mode}_linear_attn")
        if _mistake() == "normalize-default" and mode != "fused_recurrent":
            return f(q, k, v, **common)  # chunk_linear_attn's normalize=True
        return f(q, k, v, normalize=False, **common)
    if op in ("simple_gla", "retention"):
        f = _API.simple_gla if naive else _kernel("simple_gla", f"{mode}_simple_gla")
        gate = {"g": t["g"]} if op == "simple_gla" else {"g_gamma": t["g_gamma"]}
        return f(q, k, v, **gate, **common)
    if op == "gla":
        if naive:
            return _API.gla(q, k, v, t["gk"], **common)
        if mode == "chunk":
            return _kernel("gla", "chunk_gla")(q, k, v, g=t["gk"], **common)
        return _kernel("gla", "fused_recurrent_gla")(q, k, v, gk=t["gk"], **common)
    if op == "comba":
        if naive:
            return _API.comba(q, k, v, k, t["g"], t["beta"], use_qk_l2norm_in_kernel=False, **common)
        if mode == "chunk":
            return _kernel("comba", "chunk_comba")(q, k, v, k, t["g"], t["beta"], use_qk_l2norm_in_kernel=False,
                                                   **common)
        return _kernel("comba", "fused_recurrent_comba")(q, k, k, v, t["g"], t["beta"], use_qk_l2norm_in_kernel=False,
                                                         **common)
    raise NotImplementedError(op)


def run(op, inputs, params, case):
    """lacs's call (inputs: torch tensors in their stored dtype, run.lacs_inputs below)."""
    if op not in OPS:
        raise NotImplementedError(f"{op}: not mapped onto fla here")
    import torch
    mode = _mode()
    device = os.environ.get("LACS_FLA_DEVICE", "cpu" if mode == "naive" else "cuda")
    x = {name: tensor.to(device) for name, tensor in inputs.items()}
    cu_seqlens = x.pop("cu_seqlens", None)
    h0 = x.pop("h0", None)
    h0 = h0.float() if h0 is not None else None
    scale = None if _mistake() == "scale-none" else params["scale"]
    per_token = [n for n in ("q", "k", "v", "beta", "g", "gk") if n in x]
    with torch.no_grad():
        if "split" not in params:
            o, ht = _call(op, "gk" in x, mode, x, h0, scale, cu_seqlens)
            return {"o": o, "ht": ht}
        s = int(params["split"])  # state carry (no varlen with it: SPEC.md 10.5)
        first = dict(x, **{n: x[n][:, :s] for n in per_token})
        rest = dict(x, **{n: x[n][:, s:] for n in per_token})
        o1, h_split = _call(op, "gk" in x, mode, first, h0, scale, None)
        resume = None if _mistake() == "state-not-carried" else h_split
        o2, ht = _call(op, "gk" in x, mode, rest, resume, scale, None)
        return {"o": torch.cat([o1, o2], dim=1), "ht": ht, "ht_split": h_split}


run.lacs_inputs = "torch"
run.lacs_describe = {"name": "fla (fla-core) through examples/fla/lacs_fla.py", "ops": list(OPS)}

#!/usr/bin/python3
"""The zoo (SPEC.md 11.6): the proof that the tolerance model separates
legitimate implementations from buggy ones.

Every member is an ABI v1 plugin in tests/zoo (built by `make zoo` into
build/zoo); build/lacs-zoo runs one over the vectors in-process through
lacs_check_implementation, the checker's one path. This file is the zoo's
catalogue:

- LEGITIMATE members must pass every case of their ops and tier, required and
  strict (SPEC.md 11.7), with worst ratio <= LEGIT_LIMIT;
- REQUIRED_ONLY members are legitimate at the required level (every required
  case <= LEGIT_LIMIT) and less robust than the strict cases ask: each must
  fail some strict case with ratio >= BUG_LIMIT, which is what the strict
  level is there to show;
- BUGS must fail some required case with ratio >= BUG_LIMIT;
- the corruptions of SENSITIVITY (one head scaled by 1 + e, a handful of
  elements off by e) measure how small an error each (op, tier) catches.

tests/python/test_zoo.py asserts all of it (and the per-op and per-output
requirements of SPEC.md 11.6); run directly, this prints the README's
separation table and, with --sensitivity, the table of the smallest errors
caught:

    /usr/bin/python3 tests/zoo/zoo.py [--build build] [--vectors vectors/core] [--sensitivity]
"""

import argparse
import concurrent.futures
import json
import math
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LEGIT_LIMIT = 0.5
BUG_LIMIT = 2.0
# all-zero outputs and outputs at half the golden (SPEC.md 11.6): per output whose golden is not all zero
ZERO_LIMIT = 5.0
HALF_LIMIT = 2.5
# Outputs too ill-conditioned for those two limits (SPEC.md 11.3 names them and says why): a legitimate
# implementation's error there is as large as the output itself, so neither all zeros nor half the golden
# can be told from it. (case, output) -> the reason's key in SPEC.md 11.3. The test requires every other
# output to meet the limits, and each named one still to fall short of them (a stale entry shows up).
ILL_CONDITIONED = {
    **{(f"{op}_vjp-{tier}-strong", out): "gate gradient, strong decays"
       for op, out in (("gated_delta_rule", "dg"), ("comba", "dg"), ("simple_gla", "dg"), ("gla", "dgk"))
       for tier in ("fp32", "bf16")},
    **{(f"{op}_vjp-bf16-large-logits", out): "bf16 logits in the hundreds"
       for op, outs in (("softmax_attn", ("dq", "dk")), ("fox", ("dq", "dk", "dg"))) for out in outs},
    **{("fox_vjp-bf16-strong", out): "FlashAttention's D from the bf16 output" for out in ("dq", "dk")},
    **{("delta_rule_vjp-bf16-beta2", out): "bf16 near-reflections" for out in ("dq", "dk", "dbeta")},
    ("path_attn_vjp-bf16-beta2", "dw"): "bf16 near-reflections",
    **{("path_attn_vjp-bf16-reflections", out): "bf16 near-reflections" for out in ("dw", "dbeta")},
    ("retention_vjp-bf16-t129", "dg_gamma"): "bf16 sums of both signs",
    ("deltaformer_vjp-bf16-coupled", "dq"): "bf16 nearly parallel keys",
}

# (label, plugin, environment, tier or None)
LEGITIMATE = [
    ("reference in binary32", "float_reference", {}, None),
    ("reference in binary32, FMA", "float_reference_fma", {}, None),
    ("plain fp32, the other loop order", "plain_f32", {}, None),
    ("plain fp32, the other loop order, fmaf", "plain_f32_fma", {}, None),
    ("plain fp32, exp 3 ulp high", "plain_f32", {"LACS_ZOO_EXP": "high3"}, None),
    ("plain fp32, exp off by -3..3 ulp (a function of the argument)", "plain_f32", {"LACS_ZOO_EXP": "hash3"}, None),
    ("ggml's per-token loop (gated_delta_net, CPU)", "ggml_like", {}, None),
] + [
    (f"chunked WY/UT fp32, chunk {c}{' fmaf' if fma else ''}", "chunked_fma" if fma else "chunked",
     {"LACS_ZOO_CHUNK": str(c)}, None)
    for c in (16, 32, 64) for fma in (False, True)
] + [
    (f"fla-like bf16 intermediates, chunk {c}", "fla_like_bf16", {"LACS_ZOO_CHUNK": str(c)}, "bf16")
    for c in (16, 32, 64)
] + [
    ("online softmax, blocks of 16", "online_softmax", {"LACS_ZOO_BLOCK": "16"}, None),
    ("online softmax, blocks of 64, fmaf", "online_softmax_fma", {"LACS_ZOO_BLOCK": "64"}, None),
    ("online softmax, P and o in bf16", "online_softmax", {"LACS_ZOO_P_BF16": "1"}, "bf16"),
    ("norms fp32", "norms_f32", {}, None),
    ("norms fp32, rational tanh (<= 6.9 ulp)", "norms_f32", {"LACS_ZOO_TANH": "approx"}, None),
    ("norms fp32, fmaf, rational tanh", "norms_f32_fma", {"LACS_ZOO_TANH": "approx"}, None),
    ("norms, outputs stored in bf16", "norms_f32", {"LACS_ZOO_OUT_BF16": "1"}, "bf16"),
    # the gradients of the ops on sequences (SPEC.md 4.19)
    ("plain fp32 backward, the other loop order", "backward_f32", {}, None),
    ("plain fp32 backward, the other loop order, fmaf", "backward_f32_fma", {}, None),
] + [
    (f"fla chunked backward (WY/UT; bf16 intermediates in the bf16 tier), chunk {c}{' fmaf' if fma else ''}",
     "backward_chunked_fma" if fma else "backward_chunked", {"LACS_ZOO_CHUNK": str(c)}, None)
    for c in (16, 32, 64) for fma in (False, True)
]

# Legitimate at the required level only (SPEC.md 11.7): (label, plugin, environment, tier or None).
REQUIRED_ONLY = [
    ("fla's Comba exclusive sum cumsum(g) - g, chunk 64", "chunked", {"LACS_ZOO_COMBA": "minus_g"}, None),
    ("PyTorch autograd's DyT and softcap VJPs (1 - tanh^2)", "norms_f32", {"LACS_ZOO_BUG": "sech2_one_minus_tanh2"},
     None),
    ("fla's rms_norm_ref (x rsqrt(mean x^2 + eps), unscaled)", "norms_f32",
     {"LACS_ZOO_BUG": "rmsnorm_unscaled_sum_of_squares"}, None),
    ("DyISRU as written, x rsqrt(x^2 + C)", "norms_f32", {"LACS_ZOO_BUG": "dyisru_unscaled_square"}, None),
    ("EFLA's coefficient as written, (1 - exp(-x)) / ||k||^2", "plain_f32", {"LACS_ZOO_BUG": "efla_no_expm1"}, None),
]

# Bugs: (name, plugin); LACS_ZOO_BUG=name selects it. Catalogues with what each models: tests/zoo/BUGS.md,
# BUGS-norms.md.
SEQUENCE_BUGS = [
    "delta_beta_erase", "delta_beta_write", "readout_before_update", "gdn_decay_on_write", "log2_gates",
    "gva_tiled", "h0_ignored", "varlen_no_reset", "chunk_state_dropped", "scale_missing", "scale_hardcoded",
    "causal_leak", "efla_epsilon_guard", "efla_eta_for_c", "efla_normalized_k",
    "delta_normalized_k", "path_reversed", "path_off_by_one", "path_gate_after_scale",
    "deltaformer_diag_first_stage", "deltaformer_wrong_beta_side", "deltaformer_fla_reads_k", "softmax_no_max",
    "fox_gate_off_by_one", "bf16_state_every_step", "comba_reads_decayed_state", "beta_clamped", "g_as_factor",
    "h0_decay_skipped", "decay_after_write", "gk_on_value_dim", "ht_transposed", "postnorm_eps_outside_sqrt",
    "postnorm_l2_not_rms", "mesa_no_h0_kk", "mesa_lambda_in_place",
]
NORM_BUGS = [
    "rmsnorm_mean_not_rms", "rmsnorm_l2_not_rms", "dyt_alpha_outside_tanh",
    "tanh_overflow_nan", "dyisru_c_outside_root", "softcap_no_outer_cap",
    "rmsnorm_vjp_no_projection", "rmsnorm_vjp_projection_unweighted", "rmsnorm_vjp_dweight_unnormalised",
    "dyt_vjp_dalpha_no_x", "dyt_vjp_dx_no_alpha", "dyt_vjp_dbias_weighted", "dyisru_vjp_dC_sign",
    "dyisru_vjp_dx_rsqrt", "softcap_vjp_dcap_sign", "softcap_vjp_dcap_tanh_only", "l2norm_vjp_no_projection",
]
# Any op: outputs left at zero, outputs at half the golden (the reference in binary32, halved); the chunked
# member with its gate prefix sums stored in bf16.
ANY_OP_BUGS = ["all_zero", "half_outputs"]
# The backward's bugs (tests/zoo/BUGS.md, "The gradients"): in the plain adjoint, and in the chunked one.
VJP_BUGS = [("dh0_missing", "backward_f32"), ("dht_ignored", "backward_f32"), ("dbeta_no_erase", "backward_f32"),
            ("dq_no_scale", "backward_f32"), ("dgate_as_factor", "backward_f32"),
            ("vjp_group_not_reduced", "backward_f32"), ("varlen_backward_no_reset", "backward_f32"),
            ("gate_no_cumsum", "backward_chunked"), ("chunk_boundary_dropped", "backward_chunked")]
BUGS = ([(b, "plain_f32") for b in SEQUENCE_BUGS] + [(b, "norms_f32") for b in NORM_BUGS] +
        [(b, "float_reference") for b in ANY_OP_BUGS] + [("gate_sums_bf16", "chunked")] + VJP_BUGS)
# Bugs no committed case catches yet (no case makes eps matter): kept so that a
# new case shows up as a change; test_zoo asserts they still pass.
UNCAUGHT = [("rmsnorm_eps_outside_sqrt", "norms_f32"), ("l2norm_convention_swapped", "norms_f32")]

# The ops with a recurrent state: a state carried in bf16 from token to token must fail each in the bf16 tier.
RECURRENT_OPS = ["linear_attn", "linear_attn_postnorm", "retention", "simple_gla", "gla", "delta_rule",
                 "gated_delta_rule", "comba", "efla", "mesa_net"]

# Corruptions of the binary32 reference's outputs (tests/zoo/float_reference.c), by relative size: one head
# scaled by 1 + e, five elements off by e. In fp32, 0.1% and 1% must fail every op (SPEC.md 11.6); the
# sweep finds the smallest caught in each (op, tier).
CORRUPTIONS = ["head_scaled", "elements_off"]
FP32_MUST_CATCH = (1e-3, 1e-2)
SWEEP = (1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 3e-2, 5e-2, 7e-2, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0)


def run_member(build, vectors, plugin, env, tier=None):
    """Runs build/lacs-zoo on one plugin; returns the list of case dicts."""
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "zoo.json")
        cmd = [os.path.join(build, "lacs-zoo"), os.path.join(build, "zoo", plugin + ".so"), "--vectors", vectors,
               "--json", report]
        if tier:
            cmd += ["--tier", tier]
        full_env = dict(os.environ)
        full_env.update(env)
        done = subprocess.run(cmd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if not os.path.exists(report):
            raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()[:400]}")
        with open(report) as f:
            return json.load(f)["cases"]


def ratio_of(case):
    r = case.get("ratio")
    return math.inf if r is None else r


def ran(cases):
    return [c for c in cases if c["status"] != "SKIP"]


def required(cases):
    return [c for c in ran(cases) if c.get("level", "required") == "required"]


def strict(cases):
    return [c for c in ran(cases) if c.get("level") == "strict"]


def run_all(build, vectors, jobs=2, sensitivity=True):
    """{('legit', label): cases, ('required_only', label): cases, ('bug', name): cases,
    ('uncaught', name): cases, ('corrupt', name, error): cases}"""
    work = [(("legit", label), plugin, env, tier) for label, plugin, env, tier in LEGITIMATE]
    work += [(("required_only", label), plugin, env, tier) for label, plugin, env, tier in REQUIRED_ONLY]
    work += [(("bug", name), plugin, {"LACS_ZOO_BUG": name}, None) for name, plugin in BUGS]
    work += [(("uncaught", name), plugin, {"LACS_ZOO_BUG": name}, None) for name, plugin in UNCAUGHT]
    if sensitivity:
        work += [(("corrupt", name, e), "float_reference", {"LACS_ZOO_BUG": name, "LACS_ZOO_ERROR": repr(e)}, None)
                 for name in CORRUPTIONS for e in SWEEP]
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {key: pool.submit(run_member, build, vectors, plugin, env, tier)
                   for key, plugin, env, tier in work}
        return {key: f.result() for key, f in futures.items()}


def judged(kind, cases):
    """The cases a member is judged on: every case for a legitimate member, the required ones otherwise."""
    return ran(cases) if kind == "legit" else required(cases)


def separation(results):
    """Rows (op, tier, worst legitimate ratio, its member, bugs caught, bugs touching the op, smallest
    caught ratio, that bug, margin). Legitimate members count on every case, required-only members on the
    required ones. A bug touches an op if it fails at least one of the op's required cases (either tier);
    it is caught on (op, tier) if its worst ratio over that tier's required cases is >= BUG_LIMIT. The
    margin is the smallest caught ratio over the worst legitimate one."""
    legit, bugs = {}, {}
    for key, cases in results.items():
        kind, name = key[0], key[1]
        if kind in ("legit", "required_only"):
            for c in judged(kind, cases):
                k = (c["op"], c["tier"])
                if ratio_of(c) >= legit.get(k, (-1.0, ""))[0]:
                    legit[k] = (ratio_of(c), name)
        elif kind == "bug":
            for c in required(cases):
                bugs.setdefault(name, {}).setdefault((c["op"], c["tier"]), []).append(ratio_of(c))
    rows = []
    for (op, tier) in sorted(legit):
        smallest, which, caught, touching = math.inf, "-", 0, 0
        for name, per in sorted(bugs.items()):
            if not any(max(v) > 1 for (o, _), v in per.items() if o == op):
                continue
            touching += 1
            worst = max(per.get((op, tier), [0.0]))
            if worst >= BUG_LIMIT:
                caught += 1
                if worst <= smallest:
                    smallest, which = worst, name
        worst_legit = legit[(op, tier)][0]
        margin = smallest / worst_legit if caught and worst_legit > 0 else math.inf
        rows.append((op, tier, worst_legit, legit[(op, tier)][1], caught, touching, smallest, which, margin))
    return rows


def output_ratios(cases, limit, exempt=()):
    """(ratio, id, output) for every output whose golden is not all zero and whose ratio is below limit,
    leaving out the (id, output) pairs of `exempt`."""
    low = []
    for c in ran(cases):
        for o in c.get("outputs", []):
            r = math.inf if o["ratio"] is None else o["ratio"]
            if not o["golden_zero"] and r < limit and (c["id"], o["name"]) not in exempt:
                low.append((r, c["id"], o["name"]))
    return sorted(low)


def smallest_caught(results, name, op, tier):
    """The smallest error e of SWEEP for which corruption `name` fails some required case of (op, tier) with
    ratio >= BUG_LIMIT, and that ratio; (None, None) if none does."""
    for e in SWEEP:
        worst = max((ratio_of(c) for c in required(results.get(("corrupt", name, e), []))
                     if c["op"] == op and c["tier"] == tier), default=0.0)
        if worst >= BUG_LIMIT:
            return e, worst
    return None, None


def fmt(x):
    return "inf" if x == math.inf else f"{x:.3g}"


def percent(e):
    return "-" if e is None else f"{100 * e:g}%"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default=os.path.join(REPO, "build"))
    parser.add_argument("--vectors", default=os.path.join(REPO, "vectors", "core"))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--sensitivity", action="store_true",
                        help="also print the smallest head scaling and element errors caught per (op, tier)")
    args = parser.parse_args()
    results = run_all(args.build, args.vectors, args.jobs, sensitivity=args.sensitivity)
    print("| op | tier | worst legitimate ratio (member) | bugs caught / touching the op | "
          "smallest ratio of a caught bug | margin |")
    print("|---|---|---|---|---|---|")
    for op, tier, lr, lname, caught, touching, br, bname, margin in separation(results):
        bug = f"{fmt(br)} (`{bname}`)" if caught else "-"
        print(f"| {op} | {tier} | {fmt(lr)} ({lname}) | {caught} / {touching} | {bug} | {fmt(margin)} |")
    legit_runs = [(ratio_of(c), k[1], c["id"]) for k, v in results.items() if k[0] in ("legit", "required_only")
                  for c in judged(k[0], v)]
    worst_legit = max(legit_runs)
    weakest_bug = min((max(map(ratio_of, required(v)), default=0), k[1]) for k, v in results.items()
                      if k[0] == "bug")
    print(f"\nworst legitimate ratio {fmt(worst_legit[0])} ({worst_legit[1]}, {worst_legit[2]}); "
          f"weakest bug {fmt(weakest_bug[0])} ({weakest_bug[1]}); "
          f"{sum(k[0] == 'legit' for k in results)} legitimate runs, "
          f"{sum(k[0] == 'required_only' for k in results)} legitimate at the required level, "
          f"{sum(k[0] == 'bug' for k in results)} bugs")
    for label, _, _, _ in REQUIRED_ONLY:
        fails = sorted(((ratio_of(c), c["id"]) for c in strict(results[("required_only", label)])
                        if ratio_of(c) > 1), reverse=True)
        print(f"  required only: {label}: fails {len(fails)} strict case(s), e.g. "
              + ", ".join(f"{i} ({fmt(r)})" for r, i in fails[:3]))
    for name, limit in (("all_zero", ZERO_LIMIT), ("half_outputs", HALF_LIMIT)):
        low = output_ratios(results[("bug", name)], math.inf, ILL_CONDITIONED)
        print(f"  {name}: smallest output ratio {fmt(low[0][0])} ({low[0][1]} {low[0][2]}), limit {limit}; "
              f"{len(ILL_CONDITIONED)} ill-conditioned outputs named in SPEC.md 11.3 left out")
    if args.sensitivity:
        print("\n| op | tier | one head scaled by 1 + e: smallest e caught (ratio) | "
              "five elements off by e: smallest e caught (ratio) |")
        print("|---|---|---|---|")
        keys = sorted({(c["op"], c["tier"]) for c in ran(results[("corrupt", CORRUPTIONS[0], SWEEP[0])])})
        for op, tier in keys:
            cells = []
            for name in CORRUPTIONS:
                e, r = smallest_caught(results, name, op, tier)
                cells.append(f"{percent(e)} ({fmt(r)})" if e is not None else "not caught at 100%")
            print(f"| {op} | {tier} | {cells[0]} | {cells[1]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

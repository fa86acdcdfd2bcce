#!/usr/bin/python3
"""The zoo (SPEC.md 11.6): the proof that the tolerance model separates
legitimate implementations from buggy ones.

Every member is an ABI v1 plugin in tests/zoo (built by `make zoo` into
build/zoo); build/lacs-zoo runs one over the vectors in-process through
lacs_check_implementation, the checker's one path. This file is the zoo's
catalogue: which plugin, with which environment, is a legitimate
implementation (it must pass every case of its ops and tier with worst ratio
<= LEGIT_LIMIT) and which is a bug (it must fail some case with ratio >=
BUG_LIMIT). tests/python/test_zoo.py asserts both; run directly, this prints
the separation table of the README:

    /usr/bin/python3 tests/zoo/zoo.py [--build build] [--vectors vectors/core] [--markdown]
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

# (label, plugin, environment, tier or None)
LEGITIMATE = [
    ("reference in binary32", "float_reference", {}, None),
    ("reference in binary32, FMA", "float_reference_fma", {}, None),
    ("plain fp32, the other loop order", "plain_f32", {}, None),
    ("plain fp32, the other loop order, fmaf", "plain_f32_fma", {}, None),
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

# Bugs: (name, plugin). Catalogues with what each models: tests/zoo/BUGS.md, BUGS-norms.md.
SEQUENCE_BUGS = [
    "delta_beta_erase", "delta_beta_write", "readout_before_update", "gdn_decay_on_write", "log2_gates",
    "gva_tiled", "h0_ignored", "varlen_no_reset", "chunk_state_dropped", "scale_missing", "scale_hardcoded",
    "causal_leak", "efla_no_expm1", "efla_epsilon_guard", "efla_eta_for_c", "efla_normalized_k",
    "delta_normalized_k", "path_reversed", "path_off_by_one", "path_gate_after_scale",
    "deltaformer_diag_first_stage", "deltaformer_wrong_beta_side", "deltaformer_fla_reads_k", "softmax_no_max",
    "fox_gate_off_by_one", "bf16_state_every_step", "comba_reads_decayed_state", "beta_clamped", "g_as_factor",
    "h0_decay_skipped", "decay_after_write", "gk_on_value_dim", "ht_transposed", "postnorm_eps_outside_sqrt",
    "postnorm_l2_not_rms", "mesa_no_h0_kk", "mesa_lambda_in_place",
]
NORM_BUGS = [
    "rmsnorm_mean_not_rms", "rmsnorm_l2_not_rms", "rmsnorm_unscaled_sum_of_squares", "dyt_alpha_outside_tanh",
    "tanh_overflow_nan", "dyisru_c_outside_root", "dyisru_unscaled_square", "softcap_no_outer_cap",
    "rmsnorm_vjp_no_projection", "rmsnorm_vjp_projection_unweighted", "rmsnorm_vjp_dweight_unnormalised",
    "dyt_vjp_dalpha_no_x", "dyt_vjp_dx_no_alpha", "dyt_vjp_dbias_weighted", "dyisru_vjp_dC_sign",
    "dyisru_vjp_dx_rsqrt", "softcap_vjp_dcap_sign", "softcap_vjp_dcap_tanh_only", "l2norm_vjp_no_projection",
    "sech2_one_minus_tanh2",
]
# The backward's bugs (tests/zoo/BUGS.md, "The gradients"): in the plain adjoint, and in the chunked one.
VJP_BUGS = [("dh0_missing", "backward_f32"), ("dht_ignored", "backward_f32"), ("dbeta_no_erase", "backward_f32"),
            ("dq_no_scale", "backward_f32"), ("dgate_as_factor", "backward_f32"),
            ("vjp_group_not_reduced", "backward_f32"), ("varlen_backward_no_reset", "backward_f32"),
            ("gate_no_cumsum", "backward_chunked"), ("chunk_boundary_dropped", "backward_chunked")]
BUGS = [(b, "plain_f32") for b in SEQUENCE_BUGS] + [(b, "norms_f32") for b in NORM_BUGS] + VJP_BUGS
# Bugs no committed case catches yet (no case makes eps matter): kept so that a
# new case shows up as a change; test_zoo asserts they still pass.
UNCAUGHT = [("rmsnorm_eps_outside_sqrt", "norms_f32"), ("l2norm_convention_swapped", "norms_f32")]


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


def run_all(build, vectors, jobs=2):
    """{('legit', label): cases, ('bug', name): cases, ('uncaught', name): cases}"""
    work = [(("legit", label), plugin, env, tier) for label, plugin, env, tier in LEGITIMATE]
    work += [(("bug", name), plugin, {"LACS_ZOO_BUG": name}, None) for name, plugin in BUGS]
    work += [(("uncaught", name), plugin, {"LACS_ZOO_BUG": name}, None) for name, plugin in UNCAUGHT]
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {key: pool.submit(run_member, build, vectors, plugin, env, tier)
                   for key, plugin, env, tier in work}
        return {key: f.result() for key, f in futures.items()}


def separation(results):
    """Rows (op, tier, worst legitimate ratio, its member, bugs caught, bugs touching the op, smallest
    caught ratio, that bug). A bug touches an op if it fails at least one of the op's cases (either
    tier); it is caught on (op, tier) if its worst ratio over that tier's cases is >= BUG_LIMIT."""
    legit, bugs = {}, {}
    for (kind, name), cases in results.items():
        for c in ran(cases):
            key = (c["op"], c["tier"])
            if kind == "legit" and ratio_of(c) >= legit.get(key, (-1.0, ""))[0]:
                legit[key] = (ratio_of(c), name)
            if kind == "bug":
                bugs.setdefault(name, {}).setdefault(key, []).append(ratio_of(c))
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
        rows.append((op, tier, legit[(op, tier)][0], legit[(op, tier)][1], caught, touching, smallest, which))
    return rows


def fmt(x):
    return "inf" if x == math.inf else f"{x:.3g}"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default=os.path.join(REPO, "build"))
    parser.add_argument("--vectors", default=os.path.join(REPO, "vectors", "core"))
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    results = run_all(args.build, args.vectors, args.jobs)
    print("| op | tier | worst legitimate ratio (member) | bugs caught / touching the op | "
          "smallest ratio of a caught bug |")
    print("|---|---|---|---|---|")
    for op, tier, lr, lname, caught, touching, br, bname in separation(results):
        bug = f"{fmt(br)} (`{bname}`)" if caught else "-"
        print(f"| {op} | {tier} | {fmt(lr)} ({lname}) | {caught} / {touching} | {bug} |")
    worst_legit = max((ratio_of(c), k[1], c["id"]) for k, v in results.items() if k[0] == "legit" for c in ran(v))
    weakest_bug = min((max(map(ratio_of, ran(v)), default=0), k[1]) for k, v in results.items() if k[0] == "bug")
    print(f"\nworst legitimate ratio {fmt(worst_legit[0])} ({worst_legit[1]}, {worst_legit[2]}); "
          f"weakest bug {fmt(weakest_bug[0])} ({weakest_bug[1]}); "
          f"{sum(k[0] == 'legit' for k in results)} legitimate runs, {sum(k[0] == 'bug' for k in results)} bugs")
    return 0


if __name__ == "__main__":
    sys.exit(main())

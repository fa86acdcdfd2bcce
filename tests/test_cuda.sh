#!/bin/bash
# make test-cuda: builtin:cuda's checks (optimized/cuda/README.md section 5), in six parts.
#   0. make cuda compiled the library with nvcc, every warning an error (or it is skipped, with the
#      reason, where no nvcc is found: NVCC_FOUND empty);
#   1. the emulation's own tests (build/lacs-test-cuda-emulation: barriers, schedules, products, tiles,
#      shuffles, rule 4) and its compile-time rules (tests/test_cuda_rules.cu: a kernel with static
#      __shared__ memory or a fragment's elements must not compile, naming the rule);
#   2. the kernels under emulation (build/liblacs_cuda_emulated.so) against every core vector of every
#      op, none failing and none skipped (every core case has K, V <= 128);
#   3. the same under the reverse schedule (LACS_CUDA_EMULATION_SCHEDULE=reverse), which must give the
#      same bits: every output's error in the two JSON reports equal (a race shows as a difference);
#   4. the wrong twins (build/liblacs_cuda_mutant.so, LACS_CUDA_MUTANT=<name>), one per family, one
#      for the per-channel gate, two for the recurrent family's gradients and two for the attention forms',
#      each rejected by the vectors of its ops;
#   5. builtin:cuda on the device: every core vector, passing, the only skips a device's shared-memory
#      limit; skipped, with the reason, where this machine has no GPU (always in CI) or no nvcc built
#      the library.
set -u
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=./$BUILD ;; esac
LACS=$BUILD/lacs
EMULATED=$BUILD/liblacs_cuda_emulated.so
MUTANT=$BUILD/liblacs_cuda_mutant.so
JOBS=${CUDA_TEST_JOBS:-2}
PYTHON=/usr/bin/python3
[ -x "$PYTHON" ] || PYTHON=python3
status=0

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
report=$work/report

# A run's report must close with "N passed, 0 failed, S skipped"; skips are refused, or (device: $3 set)
# allowed only where the device's shared memory is the reason. builtin:cuda declares every op of the core
# vectors (lacs_plugin_describe), the attention forms' gradients included: no skip is excused.
expect_pass() {
    local what=$1 rc=$2 allow_shared_memory_skips=${3:-}
    local summary
    summary=$(grep -E '^[0-9]+ passed, ' "$report")
    echo "  $summary"
    if [ "$rc" -ne 0 ] || ! grep -q " 0 failed," <<<"$summary"; then
        echo "test-cuda: $what: every case must pass" >&2
        grep -E "^(FAIL|ERROR|BROKE)" "$report" | head -20 >&2
        status=1
    fi
    local odd_skips
    local skips
    skips=$(grep "^SKIP" "$report" || true)
    if [ -n "$allow_shared_memory_skips" ]; then
        odd_skips=$(grep -v "shared memory" <<<"$skips" || true)
    else
        odd_skips=$skips
    fi
    if [ -n "$odd_skips" ]; then
        echo "test-cuda: $what: no case may be skipped; these were:" >&2
        echo "$odd_skips" | head -20 >&2
        status=1
    fi
}

if [ "${NVCC_FOUND:-}" = yes ]; then
    echo "test-cuda: make cuda compiled $BUILD/liblacs_cuda.so with ${NVCC:-nvcc}"
else
    echo "test-cuda: SKIP make cuda: nvcc not found at '${NVCC:-nvcc}' (install the CUDA toolkit or set NVCC=/path/to/nvcc);" \
         "the kernels are still checked under emulation below"
fi

echo "test-cuda: the emulation's own tests: $BUILD/lacs-test-cuda-emulation"
if ! $BUILD/lacs-test-cuda-emulation | sed 's/^/  /'; then
    echo "test-cuda: the emulation failed its own tests" >&2
    status=1
fi

echo "test-cuda: the emulation's compile-time rules: tests/test_cuda_rules.cu"
RULES_CXX=${CUDA_RULES_CXX:-g++ -std=c++17 -x c++ -DLACS_CUDA_EMULATION -Wall -Wextra -Werror -Iinclude -Ioptimized/cuda}
if $RULES_CXX -fsyntax-only -DLACS_RULE=0 tests/test_cuda_rules.cu 2>"$work/rule0"; then
    echo "  PASS  a kernel that keeps the rules compiles"
else
    echo "test-cuda: the kernel that keeps the rules does not compile:" >&2
    head -5 "$work/rule0" >&2
    status=1
fi
for rule in 1 3; do
    if $RULES_CXX -fsyntax-only -DLACS_RULE=$rule tests/test_cuda_rules.cu 2>"$work/rule$rule"; then
        echo "test-cuda: a kernel breaking rule $rule compiled for the emulation" >&2
        status=1
    elif grep -q "lacs_rule_${rule}_" "$work/rule$rule"; then
        echo "  PASS  a kernel breaking rule $rule is refused: $(grep -o "lacs_rule_${rule}_[a-z_]*" "$work/rule$rule" | head -n 1)"
    else
        echo "test-cuda: the kernel breaking rule $rule failed to compile without naming the rule:" >&2
        head -5 "$work/rule$rule" >&2
        status=1
    fi
done

echo "test-cuda: emulated: LACS_CUDA_LIBRARY=$EMULATED $LACS check --impl builtin:cuda --jobs $JOBS"
start=$SECONDS
LACS_CUDA_LIBRARY=$EMULATED $LACS check --impl builtin:cuda --jobs "$JOBS" --json "$work/forward.json" \
    >"$report" 2>&1
expect_pass "emulated" $?
echo "  ($((SECONDS - start)) s)"

echo "test-cuda: emulated, the reverse schedule: LACS_CUDA_EMULATION_SCHEDULE=reverse (same bits expected)"
start=$SECONDS
LACS_CUDA_EMULATION_SCHEDULE=reverse LACS_CUDA_LIBRARY=$EMULATED $LACS check --impl builtin:cuda --jobs "$JOBS" \
    --json "$work/reverse.json" >"$report" 2>&1
expect_pass "emulated, reverse schedule" $?
if ! $PYTHON - "$work/forward.json" "$work/reverse.json" <<'EOF'
import json, sys
def outputs(path):
    cases = json.load(open(path))["cases"]
    return {(c["id"], o["name"]): (c["status"], o["normwise_error"], o["elementwise_ratio"])
            for c in cases for o in (c["outputs"] or [])}
forward, reverse = outputs(sys.argv[1]), outputs(sys.argv[2])
differ = sorted(k for k in set(forward) | set(reverse) if forward.get(k) != reverse.get(k))
for case, name in differ[:20]:
    print(f"test-cuda: {case} {name}: forward {forward.get((case, name))}, reverse {reverse.get((case, name))}",
          file=sys.stderr)
print(f"  {len(forward) - len(differ)} of {len(forward)} outputs the same under both schedules")
sys.exit(1 if differ or not forward else 0)
EOF
then
    echo "test-cuda: the two schedules disagree: a kernel races (a read not separated from a write by a barrier)" >&2
    status=1
fi
echo "  ($((SECONDS - start)) s)"

echo "test-cuda: the wrong twins ($MUTANT, LACS_CUDA_MUTANT=<name>) must be rejected"
start=$SECONDS
for mutant in "state_bf16:delta_rule,gated_delta_rule,efla:the state kept in bf16 between chunks" \
              "gate_per_token:gla:gk's chunk sums restarted at every sub-chunk of 16" \
              "no_rescale:softmax_attn,fox,deltaformer:the accumulator not rescaled when the row maximum grows" \
              "sech2_from_tanh:dyt_vjp,softcap_vjp:sech^2 as 1 - tanh^2 (a strict-level failure, SPEC.md 11.7)" \
              "mesa_stale_state:mesa_net:o read from the state before the token's update" \
              "vjp_no_erase:delta_rule_vjp,gated_delta_rule_vjp,comba_vjp,efla_vjp:dbeta = du . v, the erase term -du . p dropped" \
              "vjp_dg_of_factor:retention_vjp,simple_gla_vjp,gla_vjp,gated_delta_rule_vjp,comba_vjp:the gate's gradient for the factor exp(g), not the log g" \
              "attn_vjp_no_row_sum:softmax_attn_vjp,fox_vjp,deltaformer_vjp,path_attn_vjp:the softmax's adjoint dS = P (.) dP, without - D" \
              "attn_vjp_gate_sign:fox_vjp:the gate's gradient dG_t = +(column sum), the key's term with the query's sign"; do
    name=${mutant%%:*}
    rest=${mutant#*:}
    ops=${rest%%:*}
    what=${rest#*:}
    # --strict: a twin must fail at the strict level at least (sech2_from_tanh is autograd's form, legitimate at
    # the required level and caught by the strict dyt_vjp-*-saturated)
    LACS_CUDA_MUTANT=$name LACS_CUDA_LIBRARY=$MUTANT $LACS check --impl builtin:cuda --op "$ops" --jobs "$JOBS" \
        --strict >"$report" 2>&1
    rc=$?
    summary=$(grep -E "^[0-9]+ passed, " "$report")
    worst=$(grep "^FAIL" "$report" | sort -k2 -g | tail -n 1 | awk '{print $3 " at " $2}')
    echo "  $name ($what), $ops: $summary${worst:+; worst $worst}"
    if [ "$rc" -eq 0 ] || grep -q " 0 failed," <<<"$summary"; then
        echo "test-cuda: the mutant $name passed: the vectors cannot tell it from a right kernel" >&2
        status=1
    fi
done
echo "  ($((SECONDS - start)) s)"

# kernels no device has run are said to be validated under emulation only (validated_on_device in dispatch.c
# must not name them): exactly the ops added or changed since the last device run (README.md section 6), the H200
# run of 2026-11-28: the attention forms' gradients (section 10)
emulation_only_ops="softmax_attn_vjp fox_vjp deltaformer_vjp path_attn_vjp"
listed=$(LACS_CUDA_LIBRARY=$EMULATED $LACS list --op rmsnorm 2>/dev/null | grep '^  builtin:cuda ')
emulation_only=${listed##*validated under emulation only: }
words() { tr ', ' '\n\n' | grep -v '^$' | sort; }
if [ "$listed" = "$emulation_only" ] ||
   [ "$(words <<<"$emulation_only")" != "$(words <<<"${emulation_only_ops:-no op}")" ]; then
    echo "test-cuda: lacs list does not say exactly these are validated under emulation only: ${emulation_only_ops:-no op} (it says: ${emulation_only:-nothing})" >&2
    status=1
else
    echo "test-cuda: lacs list: validated under emulation only: ${emulation_only}"
fi

why=$($LACS list --op rmsnorm 2>/dev/null | grep '^  builtin:cuda ')
if [ "${NVCC_FOUND:-}" != yes ] && [ -z "${LACS_CUDA_LIBRARY:-}" ]; then
    echo "test-cuda: SKIP on the device: no $BUILD/liblacs_cuda.so was built here (nvcc not found)"
    exit $status
fi
if $LACS check --impl builtin:cuda --op rmsnorm --tier fp32 >/dev/null 2>"$report"; then
    echo "test-cuda: on the device: $LACS check --impl builtin:cuda --jobs 4"
    $LACS check --impl builtin:cuda --jobs 4 >"$report" 2>&1
    expect_pass "on the device" $? shared-memory-skips-allowed
else
    echo "test-cuda: SKIP on the device: $(head -n 1 "$report")"
    [ -n "$why" ] && echo "  (lacs list:${why#*builtin:cuda})"
fi
exit $status

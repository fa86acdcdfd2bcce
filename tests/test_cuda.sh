#!/bin/bash
# make test-cuda: builtin:cuda's checks (optimized/cuda/README.md section 5), in four parts.
#   0. the emulation's own tests (build/lacs-test-cuda-emulation): it catches a missing barrier, a
#      divergent one, and its products and shuffles are right;
#   1. the kernels under emulation (build/liblacs_cuda_emulated.so, optimized/cuda/emulation.h) against
#      every core vector of builtin:cuda's ops: none may fail, and only the per-channel gate (gk) cases,
#      which builtin:cuda does not implement, may be skipped;
#   2. the emulated mutant (the state kept in bf16 between chunks) must be rejected;
#   3. builtin:cuda on the device: the same vectors, all passing; skipped, with the reason, where this
#      machine has no GPU (always in CI) or no nvcc built the library (NVCC_FOUND empty: `make cuda` is
#      skipped too, and said so).
set -u
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=./$BUILD ;; esac
LACS=$BUILD/lacs
OPS=delta_rule,gated_delta_rule,efla,path_attn,rmsnorm,rmsnorm_vjp,dyt,dyt_vjp,dyisru,dyisru_vjp
status=0

# Checks a run's report: a summary line "N passed, 0 failed, S skipped" where every skip is a gk case
# (the line before the verdict's closing line: found by its pattern).
expect_pass() {
    local what=$1 report=$2 rc=$3
    local summary
    summary=$(grep -E '^[0-9]+ passed, ' "$report")
    echo "  $summary"
    if [ "$rc" -ne 0 ] || ! grep -q " 0 failed," <<<"$summary"; then
        echo "test-cuda: $what: every case must pass" >&2
        grep -E "^(FAIL|ERROR|BROKE)" "$report" | head -20 >&2
        status=1
    fi
    local odd_skips
    odd_skips=$(grep "^SKIP" "$report" | grep -v -- "-gk" || true)
    if [ -n "$odd_skips" ]; then
        echo "test-cuda: $what: only the gk cases may be skipped; these were too:" >&2
        echo "$odd_skips" >&2
        status=1
    fi
}

report=$(mktemp)
trap 'rm -f "$report"' EXIT

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

echo "test-cuda: emulated: LACS_CUDA_LIBRARY=$BUILD/liblacs_cuda_emulated.so $LACS check --impl builtin:cuda --op $OPS"
LACS_CUDA_LIBRARY=$BUILD/liblacs_cuda_emulated.so $LACS check --impl builtin:cuda --op "$OPS" >"$report" 2>&1
expect_pass "emulated" "$report" $?

echo "test-cuda: the mutant (state in bf16 between chunks) must be rejected"
LACS_CUDA_LIBRARY=$BUILD/liblacs_cuda_mutant.so $LACS check --impl builtin:cuda --op delta_rule,gated_delta_rule,efla \
    >"$report" 2>&1
rc=$?
summary=$(grep -E '^[0-9]+ passed, ' "$report")
echo "  $summary"
if [ "$rc" -eq 0 ] || grep -q " 0 failed," <<<"$summary"; then
    echo "test-cuda: the mutant passed: the vectors cannot tell a bf16 state from an fp32 one" >&2
    status=1
fi

why=$($LACS list --op rmsnorm 2>/dev/null | grep '^  builtin:cuda ')
if [ "${NVCC_FOUND:-}" != yes ] && [ -z "${LACS_CUDA_LIBRARY:-}" ]; then
    echo "test-cuda: SKIP on the device: no $BUILD/liblacs_cuda.so was built here (nvcc not found)"
    exit $status
fi
if $LACS check --impl builtin:cuda --op rmsnorm --tier fp32 >/dev/null 2>"$report"; then
    echo "test-cuda: on the device: $LACS check --impl builtin:cuda --op $OPS"
    $LACS check --impl builtin:cuda --op "$OPS" >"$report" 2>&1
    expect_pass "on the device" "$report" $?
else
    echo "test-cuda: SKIP on the device: $(cat "$report" | head -n 1)"
    [ -n "$why" ] && echo "  (lacs list:${why#*builtin:cuda})"
fi
exit $status

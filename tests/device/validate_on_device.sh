#!/bin/bash
# builtin:cuda's validation on a GPU (optimized/cuda/README.md section 6): one command, about 6 to 8 minutes
# on an H100 or H200, every step under a time limit, every log under $OUT (default build/device):
#
#     bash tests/device/validate_on_device.sh
#
#   1. the device, the driver, the toolkit;
#   2. the build: liblacs, lacs, and make cuda for this device's architecture only (half the compile);
#   3. lacs check --impl builtin:cuda over every core vector of every op (941 cases, the gradients of the
#      recurrent family and of the attention forms included): none may fail, and only a device's
#      shared-memory limit may skip one (JSON report: check.json, with every output's
#      ratio); the worst ratio per op and tier, beside the emulation's (worst_ratios.txt);
#   4. lacs-bench-cuda (make bench-cuda): cuBLAS and copy anchors, every family's figures;
#   5. compute-sanitizer memcheck over half the cases and over every case of delta_rule_vjp,
#      gated_delta_rule_vjp (the recurrent family's gradients share their kernels), softmax_attn_vjp and
#      path_attn_vjp (the attention forms' gradients: attention_vjp.cu's flash-style passes and PaTH's
#      kernels), racecheck over half those of RACECHECK_OPS (one op of each kernel family new since the
#      last device run: gated_delta_rule_vjp, fox_vjp and deltaformer_vjp included), each within
#      SANITIZER_TIMEOUT seconds (default 120): errors and hazards counted;
#   6. optional: FLA=1 runs tests/device/fla_bench.py (fla's Triton kernels, where installed);
#      K128=1 generates the full set's K = 128 cases here (CPU), and five gradient vectors at K = 128
#      and 256 (lacs generate: three of the recurrent family, softmax_attn_vjp and path_attn_vjp), and
#      checks them on the device.
# The closing summary (summary.txt) says PASS or FAIL per step: what the README's section 6 and
# validated_on_device in optimized/cuda/dispatch.c record.
set -u
BUILD=${BUILD:-build}
OUT=${OUT:-$BUILD/device}
JOBS=${JOBS:-$(nproc)}
SANITIZER_TIMEOUT=${SANITIZER_TIMEOUT:-120}
CHECK_TIMEOUT=${CHECK_TIMEOUT:-300}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-240}
FLA_TIMEOUT=${FLA_TIMEOUT:-240}
# the sanitizer runs of step 5, by name (a shorter list where the device time is short)
SANITIZER_RUNS=${SANITIZER_RUNS:-memcheck memcheck-vjp racecheck}
mkdir -p "$OUT"
LACS=./$BUILD/lacs
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
began=$SECONDS
step() { echo; echo "=== $* (t = $((SECONDS - began)) s, $(date -u +%H:%M:%S))"; }
verdict() { echo "$1  $2" | tee -a "$SUMMARY"; }

step "1. device"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,compute_cap --format=csv | tee "$OUT/device.txt"
nvcc --version | tail -n 2 | tee -a "$OUT/device.txt"
compute-sanitizer --version 2>/dev/null | head -n 2 | tee -a "$OUT/device.txt"
git log -1 --format='commit %H %s' 2>/dev/null | tee -a "$OUT/device.txt"
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .')
arch_flags="-gencode arch=compute_${cap:-90},code=sm_${cap:-90}"

if [ "${PREBUILT:-0}" = 1 ]; then
    # built elsewhere for this architecture and carried here (a device machine without cJSON's headers):
    # BUILD must hold lacs, liblacs_cuda.so and lacs-bench-cuda
    step "2. build: PREBUILT=1, the binaries of $BUILD"
    for f in lacs liblacs_cuda.so lacs-bench-cuda; do
        [ -x "$BUILD/$f" ] || { verdict FAIL "build: PREBUILT=1 but $BUILD/$f is missing"; exit 1; }
    done
    verdict PASS "build: prebuilt $BUILD (lacs, liblacs_cuda.so, lacs-bench-cuda)"
else
step "2. build: make -j$JOBS lib $BUILD/lacs cuda CUDA_ARCH_FLAGS='$arch_flags'"
# ci/deps.sh only checks when everything is installed; where it would install (a machine without the
# network), the build goes on with what is there (make -o deps: the check is not run again)
if ! timeout 60 bash ci/deps.sh >"$OUT/build.log" 2>&1; then
    echo "ci/deps.sh could not complete (see $OUT/build.log): building with the packages installed"
fi
if timeout 420 make -o deps -j"$JOBS" lib "$BUILD/lacs" "$BUILD/lacs-generate" >>"$OUT/build.log" 2>&1 &&
    timeout 420 make -o deps -j"$JOBS" cuda CUDA_ARCH_FLAGS="$arch_flags" >>"$OUT/build.log" 2>&1; then
    verdict PASS "build: make cuda for sm_${cap:-90}, every warning an error"
else
    tail -n 30 "$OUT/build.log"
    verdict FAIL "build: see $OUT/build.log"
    exit 1
fi
fi
$LACS list --op gla | grep "builtin:cuda" | tee -a "$OUT/device.txt"

step "3. $LACS check --impl builtin:cuda --jobs 8 (every core vector)"
timeout "$CHECK_TIMEOUT" $LACS check --impl builtin:cuda --jobs 8 --json "$OUT/check.json" >"$OUT/check.log" 2>&1
rc=$?
summary_line=$(grep -E '^[0-9]+ passed, ' "$OUT/check.log" | tail -n 1)
echo "$summary_line (exit $rc)"
tail -n 1 "$OUT/check.log"
grep -E "^(FAIL|ERROR|BROKE)" "$OUT/check.log" | head -40
# builtin:cuda declares every op of the core vectors (lacs_plugin_describe), the attention forms' gradients
# included: a skip for any reason but the device's shared memory is odd
odd_skips=$(grep "^SKIP" "$OUT/check.log" | grep -v "shared memory" | head -5)
if [ "$rc" -eq 0 ] && grep -q " 0 failed," <<<"$summary_line" && [ -z "$odd_skips" ]; then
    verdict PASS "lacs check --impl builtin:cuda: $summary_line"
else
    verdict FAIL "lacs check --impl builtin:cuda: $summary_line${odd_skips:+ (skips other than shared memory)}"
fi
python3 - "$OUT/check.json" >"$OUT/worst_ratios.txt" <<'EOF'
import json, sys
worst = {}
for case in json.load(open(sys.argv[1]))["cases"]:
    key = (case["op"], case["tier"])
    if case.get("ratio") is not None and (key not in worst or case["ratio"] > worst[key][0]):
        worst[key] = (case["ratio"], case["id"])
for (op, tier), (ratio, case) in sorted(worst.items()):
    print(f"{op:22s} {tier}  worst ratio {ratio:.3g}  ({case})")
EOF
cat "$OUT/worst_ratios.txt"

step "4. $BUILD/lacs-bench-cuda (make bench-cuda)"
timeout "$BENCH_TIMEOUT" ./$BUILD/lacs-bench-cuda >"$OUT/bench_cuda.log" 2>&1
rc=$?
cat "$OUT/bench_cuda.log"
[ "$rc" -eq 0 ] && verdict PASS "lacs-bench-cuda (figures in $OUT/bench_cuda.log)" ||
    verdict FAIL "lacs-bench-cuda exit $rc"
grep -E "target" "$OUT/bench_cuda.log" | sed 's/^/      /' | tee -a "$SUMMARY"

# racecheck (the slower) takes half the cases of one op of each kernel family (fox_vjp and deltaformer_vjp:
# attention_vjp.cu's passes and DeltaFormer's sequential kernels, never run on a device yet; gated_delta_rule_vjp:
# recurrent_vjp.cu, racecheck clean on the H200 of 2026-11-28); memcheck half of every case, then every case of
# softmax_attn_vjp and path_attn_vjp (the attention forms' gradients, validated under emulation only until this
# runs) and of delta_rule_vjp and gated_delta_rule_vjp (memcheck clean on that H200). With a short lease, name
# fewer: RACECHECK_OPS=fox_vjp,deltaformer_vjp SANITIZER_RUNS="memcheck-vjp racecheck" (section 6)
RACECHECK_OPS=${RACECHECK_OPS:-gated_delta_rule,gla,linear_attn,fox,deltaformer,mesa_net,softcap,l2norm,gated_delta_rule_vjp,fox_vjp,deltaformer_vjp}
for run in $SANITIZER_RUNS; do
    tool=${run%-vjp}
    selection="--shard 1/2"
    [ $run = memcheck-vjp ] && selection="--op delta_rule_vjp,gated_delta_rule_vjp,softmax_attn_vjp,path_attn_vjp"
    [ $run = racecheck ] && selection="--op $RACECHECK_OPS --shard 1/2"
    step "5. compute-sanitizer --tool $tool over $selection (at most $SANITIZER_TIMEOUT s)"
    timeout "$SANITIZER_TIMEOUT" compute-sanitizer --tool $tool --target-processes all --error-exitcode 99 \
        $LACS check --impl builtin:cuda $selection --jobs 8 >"$OUT/$run.log" 2>&1
    rc=$?
    counts=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/$run.log" | sort | uniq -c | sort -rn | head -5)
    echo "$counts"
    grep -E "Invalid|Race|hazard" "$OUT/$run.log" | sort | uniq -c | sort -rn | head -10
    done_line=$(grep -E "passed,.*failed" "$OUT/$run.log" | tail -n 1)
    dirty=$(grep -E "ERROR SUMMARY: [1-9]|RACECHECK SUMMARY: [1-9]" "$OUT/$run.log" | head -n 1)
    if [ -n "$dirty" ]; then
        verdict FAIL "$run: $dirty"
    elif [ "$rc" -eq 124 ]; then
        verdict PASS "$run: clean on the cases run before the time limit ($(grep -cE '^(PASS|FAIL|SKIP)' "$OUT/$run.log") cases)"
    elif [ "$rc" -eq 0 ]; then
        verdict PASS "$run: clean, $done_line"
    else
        verdict FAIL "$run: exit $rc, $done_line"
    fi
done

if [ "${FLA:-0}" = 1 ] && python3 -c "import fla" 2>/dev/null; then
    step "6. fla's Triton chunk_gated_delta_rule on the benchmark's shapes"
    timeout "$FLA_TIMEOUT" python3 tests/device/fla_bench.py 2>&1 | grep -v Warning | tee "$OUT/fla_bench.log"
fi
if [ "${K128:-0}" = 1 ]; then
    step "6. the full set's K = 128 cases, generated here and checked on the device"
    timeout 300 ./$BUILD/lacs-generate --set full --only t2048-k128 --out "$OUT/vectors" --jobs "$JOBS" >"$OUT/k128.log" 2>&1 &&
        $LACS check --impl builtin:cuda --vectors "$OUT/vectors/full" --jobs 8 >>"$OUT/k128.log" 2>&1
    verdict "$( [ $? -eq 0 ] && echo PASS || echo FAIL)" "K = 128 full cases: $(tail -n 1 "$OUT/k128.log")"
    # the gradients at K = 128 and 256 (their kernels' largest; the full set has none): vectors of lacs generate
    rm -rf "$OUT/vectors-vjp-k128"
    timeout 120 $LACS generate --like gated_delta_rule_vjp-gk --K 128 --V 128 --T 300 --H 1 --HV 2 --h0 \
        --out "$OUT/vectors-vjp-k128" >"$OUT/vjp-k128.log" 2>&1 &&
        timeout 120 $LACS generate --like delta_rule_vjp-varlen --K 128 --V 96 --H 1 --HV 2 --lengths 70,0,130 \
            --h0 --out "$OUT/vectors-vjp-k128" >>"$OUT/vjp-k128.log" 2>&1 &&
        timeout 120 $LACS generate --like gated_delta_rule_vjp-mixed --K 256 --V 40 --T 150 --H 1 --HV 2 --h0 \
            --out "$OUT/vectors-vjp-k128" >>"$OUT/vjp-k128.log" 2>&1 &&
        timeout 120 $LACS generate --like softmax_attn_vjp-hv2h --K 128 --V 128 --T 200 --H 1 --HV 2 \
            --out "$OUT/vectors-vjp-k128" >>"$OUT/vjp-k128.log" 2>&1 &&
        timeout 120 $LACS generate --like path_attn_vjp-gate --K 128 --V 64 --T 150 --H 1 --HV 2 \
            --out "$OUT/vectors-vjp-k128" >>"$OUT/vjp-k128.log" 2>&1 &&
        $LACS check --impl builtin:cuda --vectors "$OUT/vectors-vjp-k128" --jobs 8 >>"$OUT/vjp-k128.log" 2>&1
    verdict "$( [ $? -eq 0 ] && echo PASS || echo FAIL)" "K = 128 and 256 gradients: $(tail -n 1 "$OUT/vjp-k128.log")"
fi

step "summary ($((SECONDS - began)) s; logs in $OUT)"
cat "$OUT/device.txt" | head -n 3
cat "$SUMMARY"
! grep -q "^FAIL" "$SUMMARY"

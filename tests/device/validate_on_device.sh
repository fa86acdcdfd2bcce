#!/bin/bash
# builtin:cuda's validation on a GPU (optimized/cuda/README.md section 6), in one run, with every log under $OUT (default
# build/device): the device and toolkit; make test-cuda's script (its device part runs); lacs check
# --impl builtin:cuda over every core vector; compute-sanitizer memcheck and racecheck over the same;
# lacs-bench-cuda; and, where fla is installed, fla's Triton chunk_gated_delta_rule on the same shapes.
# Expects the builds of `make cuda cuda-emulated` and test-cuda's artifacts in $BUILD (default build).
set -u
BUILD=${BUILD:-build}
OUT=${OUT:-$BUILD/device}
mkdir -p "$OUT"
LACS=./$BUILD/lacs
OPS=delta_rule,gated_delta_rule,efla,path_attn,rmsnorm,rmsnorm_vjp,dyt,dyt_vjp,dyisru,dyisru_vjp
step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }

step "device"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$OUT/device.txt"
nvcc --version | tail -n 2 | tee -a "$OUT/device.txt"
compute-sanitizer --version | head -n 2 | tee -a "$OUT/device.txt"
$LACS list --op rmsnorm | grep builtin: | tee -a "$OUT/device.txt"

step "make test-cuda's script: BUILD=$BUILD bash tests/test_cuda.sh"
BUILD=$BUILD bash tests/test_cuda.sh 2>&1 | tee "$OUT/test_cuda.log"

step "$LACS check --impl builtin:cuda (every core vector)"
time $LACS check --impl builtin:cuda --jobs 8 --json "$OUT/check.json" >"$OUT/check.log" 2>&1
tail -n 1 "$OUT/check.log"
grep -E "^(FAIL|ERROR|BROKE)" "$OUT/check.log" | head -40

for tool in memcheck racecheck; do
    step "compute-sanitizer --tool $tool --target-processes all $LACS check --impl builtin:cuda --op $OPS"
    time timeout ${SANITIZER_TIMEOUT:-150} compute-sanitizer --tool $tool --target-processes all --error-exitcode 99 \
        $LACS check --impl builtin:cuda --op "$OPS" --jobs 8 >"$OUT/$tool.log" 2>&1
    echo "exit $?"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Invalid|Race|hazard" "$OUT/$tool.log" | sort | uniq -c | sort -rn | head -20
    grep -E "passed,.*failed" "$OUT/$tool.log" | tail -n 1
done

step "$BUILD/lacs-bench-cuda"
./$BUILD/lacs-bench-cuda 2>&1 | tee "$OUT/bench_cuda.log"

if python3 -c "import fla" 2>/dev/null; then
    step "fla's Triton chunk_gated_delta_rule on the same shapes"
    timeout ${FLA_TIMEOUT:-240} python3 tests/device/fla_bench.py 2>&1 | grep -v Warning | tee "$OUT/fla_bench.log"
fi

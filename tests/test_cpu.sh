#!/bin/bash
# make test-cpu: builtin:cpu over every core vector under each instruction set (LACS_ISA = avx512, avx2,
# scalar). Every case must pass, none may be skipped (builtin:cpu implements and declares every op of the
# vectors, the gradients of the ops on sequences included: optimized/cpu/recurrent_backward.c and
# attention_backward.c), and the verdict must conform. An instruction set this CPU lacks is skipped with the
# reason `lacs list` gives.
set -u
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=./$BUILD ;; esac
LACS=$BUILD/lacs
report=$(mktemp)
trap 'rm -f "$report"' EXIT
for isa in avx512 avx2 scalar; do
    why=$(LACS_ISA=$isa $LACS list --op rmsnorm 2>/dev/null | grep '^  builtin:cpu ' | grep 'unavailable')
    if [ -n "$why" ]; then
        echo "test-cpu: SKIP LACS_ISA=$isa:${why#*builtin:cpu}"
        continue
    fi
    echo "test-cpu: LACS_ISA=$isa $LACS check --impl builtin:cpu"
    LACS_ISA=$isa $LACS check --impl builtin:cpu --verbose >"$report" 2>&1
    rc=$?
    summary=$(grep -E "^[0-9]+ passed, " "$report" | tail -n 1)
    skipped=$(grep '^SKIP' "$report" | awk '{print $3}' || true)
    echo "  $summary"
    if [ "$rc" -ne 0 ] || ! grep -q " 0 failed, 0 skipped" <<<"$summary"; then
        echo "test-cpu: every case must pass, none be skipped, and the verdict conform (exit status $rc)" >&2
        grep -E '^(FAIL|ERROR)' "$report" | head -20 >&2
        [ -n "$skipped" ] && { echo "skipped:" >&2; echo "$skipped" | head -20 >&2; }
        grep -E '^  [a-z_]+ +(fp32|bf16) +(partial|fails)' "$report" | head -20 >&2
        exit 1
    fi
done

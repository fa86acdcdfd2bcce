#!/bin/bash
# make test-cpu: builtin:cpu over every core vector under each instruction set (LACS_ISA = avx512, avx2,
# scalar). Every case must pass and the verdict conform, but for the recurrent family's gradients (the
# *_vjp ops of SPEC.md 4.19 but the attention forms'; the norms' VJPs are implemented), which builtin:cpu
# does not implement yet and does not declare: those, and only those, are skipped. An instruction set this CPU lacks is skipped with
# the reason `lacs list` gives.
set -u
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=./$BUILD ;; esac
LACS=$BUILD/lacs
# builtin:cpu declares the ops it implements (lacs_cpu_declared_ops): the sequence VJPs are "not claimed",
# never run; an undeclared skip would make the verdict partial and the exit status 1.
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
    skipped=$(grep -c '^SKIP' "$report")
    odd=$(grep '^SKIP' "$report" | awk '{print $3}' | grep -v -- '_vjp-' || true)
    norm_vjp=$(grep '^SKIP' "$report" | awk '{print $3}' | grep -E '^(rmsnorm|dyt|dyisru|softcap|l2norm|softmax_attn|fox|deltaformer|path_attn)_vjp-' || true)
    echo "  $summary ($skipped skipped: the recurrent family's gradients, which builtin:cpu does not declare)"
    if [ "$rc" -ne 0 ] || ! grep -q " 0 failed," <<<"$summary"; then
        echo "test-cpu: every case must pass, and the verdict conform (exit status $rc)" >&2
        grep -E '^(FAIL|ERROR)' "$report" | head -20 >&2
        grep -E '^  [a-z_]+ +(fp32|bf16) +(partial|fails)' "$report" | head -20 >&2
        exit 1
    fi
    if [ -n "$odd$norm_vjp" ]; then
        echo "test-cpu: only the recurrent family's gradients may be skipped; these were skipped too:" >&2
        echo "$odd$norm_vjp" | head -20 >&2
        exit 1
    fi
done

#!/bin/bash
# make test-cpu: builtin:cpu over every core vector under each instruction set (LACS_ISA = avx512, avx2,
# scalar). Every case must pass, but for the gradients of the ops on sequences (the *_vjp ops of SPEC.md
# 4.19; the norms' VJPs are implemented), which builtin:cpu does not implement yet: those, and only those,
# may be skipped, each with builtin:cpu's reason. An instruction set this CPU lacks is skipped with the
# reason `lacs list` gives.
set -u
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=./$BUILD ;; esac
LACS=$BUILD/lacs
REASON="builtin:cpu does not implement the gradients of the ops on sequences yet"
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
    summary=$(tail -n 1 "$report")
    skipped=$(grep -c '^SKIP' "$report")
    explained=$(grep -c "($(printf '%s' '[a-z_]*_vjp'): $REASON" "$report")
    odd=$(grep '^SKIP' "$report" | awk '{print $3}' | grep -v -- '_vjp-' || true)
    echo "  $summary ($skipped skipped: the gradients of the ops on sequences, \"$REASON\")"
    if [ "$rc" -ne 0 ] || ! grep -q " 0 failed," <<<"$summary"; then
        echo "test-cpu: every case must pass" >&2
        grep -E '^(FAIL|ERROR)' "$report" | head -20 >&2
        exit 1
    fi
    if [ -n "$odd" ] || [ "$skipped" -ne "$explained" ]; then
        echo "test-cpu: only the gradients of the ops on sequences may be skipped, with builtin:cpu's reason;" \
             "these were skipped too (or for another reason):" >&2
        grep -A1 '^SKIP' "$report" | grep -v -- "$REASON" | grep -v '^--' | head -20 >&2
        exit 1
    fi
done

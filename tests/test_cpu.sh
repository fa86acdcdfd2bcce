#!/bin/bash
# make test-cpu: builtin:cpu over every core vector under each instruction set (LACS_ISA = avx512, avx2,
# scalar), and under avx512 the bf16 cases once more with the bf16 products this CPU does not use by default
# (LACS_CPU_BF16_PRODUCTS: native vdpbf16ps or widened fp32, optimized/cpu/README.md section 1), so that both
# are checked on every AVX512-BF16 machine, and under the first instruction set the recurrent family's
# gradients once more with LACS_CPU_BACKWARD_STATE_MIB=0, so that the chunked backward checkpoints every
# sequence (its checkpoint pass: optimized/cpu/README.md section 9; the vectors' sequences otherwise fit the
# default budget, walked once). Every case must pass, none may be skipped (builtin:cpu implements and declares every op of the
# vectors, the gradients of the ops on sequences included: optimized/cpu/recurrent_backward.c and
# attention_backward.c), and the verdict must conform. An instruction set this CPU lacks is skipped with the
# reason `lacs list` gives.
set -u
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=./$BUILD ;; esac
LACS=$BUILD/lacs
report=$(mktemp)
trap 'rm -f "$report"' EXIT
recurrent_vjps=(--op linear_attn_vjp --op retention_vjp --op simple_gla_vjp --op gla_vjp --op delta_rule_vjp
               --op gated_delta_rule_vjp --op comba_vjp --op efla_vjp)
checkpointed_done=0
for run in avx512 avx512-other-bf16-products avx512-checkpointed avx2 avx2-checkpointed scalar scalar-checkpointed; do
    isa=${run%%-*}
    why=$(LACS_ISA=$isa $LACS list --op rmsnorm 2>/dev/null | grep '^  builtin:cpu ' | grep 'unavailable')
    if [ -n "$why" ]; then
        echo "test-cpu: SKIP LACS_ISA=$isa:${why#*builtin:cpu}"
        continue
    fi
    settings=(LACS_ISA=$isa)
    options=()
    if [ "${run#*-}" = checkpointed ]; then
        [ "$checkpointed_done" = 1 ] && continue
        checkpointed_done=1
        settings+=(LACS_CPU_BACKWARD_STATE_MIB=0)
        options=("${recurrent_vjps[@]}")
    fi
    if [ "$run" = avx512-other-bf16-products ]; then
        default=$(LACS_ISA=avx512 $LACS list --op rmsnorm 2>/dev/null | grep -o 'bf16 products [a-z]*' | awk '{print $3}')
        case $default in
            native) settings+=(LACS_CPU_BF16_PRODUCTS=widened) ;;
            widened) settings+=(LACS_CPU_BF16_PRODUCTS=native) ;;
            *) echo "test-cpu: lacs list does not say how builtin:cpu multiplies bf16 ('$default')" >&2; exit 1 ;;
        esac
        options=(--tier bf16)
    fi
    echo "test-cpu: ${settings[*]} $LACS check --impl builtin:cpu ${options[*]}"
    env "${settings[@]}" $LACS check --impl builtin:cpu "${options[@]}" --verbose >"$report" 2>&1
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

#!/bin/bash
# fla's Triton kernels through examples/fla/lacs_fla.py, on a machine with an NVIDIA GPU (nothing here
# compiles fla; pip brings fla-core 0.6.0, torch and Triton from PyPI, about 5.4 GB and a minute).
#   bash examples/fla/verify_on_gpu.sh            (from the repository root, after make)
# Runs the seven mapped ops in both modes (chunk_*, fused_recurrent_*) and prints each run's verdict; the
# JSON reports are left in $OUT (default build/fla-gpu). What was verified on the CPU (LACS_FLA_MODE=naive,
# make test-clients) is the mapping; this checks fla's kernels themselves.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-build/fla-gpu}
VENV=${VENV:-build/venv-fla-gpu}
mkdir -p "$OUT"
[ -f build/liblacs.so ] || make -j"$(nproc)" lib build/lacs
if [ ! -x "$VENV/bin/python" ]; then
    /usr/bin/python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q torch fla-core==0.6.0 einops==0.8.2 numpy
fi
"$VENV/bin/python" -c 'import torch, triton, importlib.metadata as m; print("torch", torch.__version__, "triton", triton.__version__, "fla-core", m.version("fla-core"), "device", torch.cuda.get_device_name(0))'
OPS=linear_attn,retention,simple_gla,gla,delta_rule,gated_delta_rule,comba
status=0
for mode in chunk fused_recurrent; do
    echo "== LACS_FLA_MODE=$mode"
    LACS_FLA_MODE=$mode PYTHONPATH=python LACS_BUILD=build "$VENV/bin/python" -m lacs check \
        --impl python:examples/fla/lacs_fla.py:run --op "$OPS" --json "$OUT/$mode.json" --quiet \
        > "$OUT/$mode.txt" 2>&1 || status=1
    grep -E "^  [a-z_]+ +(fp32|bf16) |passed, .* failed|conform|strict failures" "$OUT/$mode.txt"
done
exit $status

#!/usr/bin/env bash
# Installs what lacs needs from Debian's packages, only what is missing, as root
# with no prompt. Safe to run again: with everything present it only checks.
#   libcriterion-dev  the C test framework (make test)
#   libopenblas-dev   GEMMs of the optimized CPU implementation
#   libcjson-dev      JSON of the vector metadata
#   python3-numpy     the Python reader, harness and NumPy oracle (/usr/bin/python3)
#   python3-jsonschema  validates MANIFEST.json and every vector's metadata against vectors/schema
#   python3-matplotlib  lacs explain --plot (checker/plot_error.py) and its test
#   clang, libclang-rt-14-dev  libFuzzer for the C reader's fuzzing (make fuzz)
#   g++               builtin:cuda's kernels compiled for the CPU emulation (make cuda-emulated), nvcc's host compiler
#   pkg-config, gcc, make
#   python3-pytest    the pytest plugin and helper (lacs.pytest) and their test on a scratch kernel repository
#   python3-venv, python3-pip, python3-setuptools, python3-wheel
#                     `pip install ./python` into a --system-site-packages venv, offline (tests/python/
#                     test_install_python.py); the venv of make test-clients (onnx, fla-core from PyPI)
#   python3-torch     PyTorch 1.13 for the CPU: the README's PyTorch example and the torch-native harness
#                     (tests/python/test_torch.py), fla's naive functions (make test-clients); about 48 MB
#   chromium          headless Chromium renders the HTML report (tests/python/test_report.py); about 122 MB
set -euo pipefail

packages=(libcriterion-dev libopenblas-dev libcjson-dev python3-numpy python3-jsonschema python3-matplotlib
          clang libclang-rt-14-dev pkg-config gcc g++ make
          python3-pytest python3-venv python3-pip python3-setuptools python3-wheel python3-torch chromium)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "ci/deps.sh: installing ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO="sudo -n"
    else
        echo "ci/deps.sh: missing packages (${missing[*]}) and not root; run as root: apt-get install ${missing[*]}" >&2
        exit 1
    fi
else
    SUDO=""
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"

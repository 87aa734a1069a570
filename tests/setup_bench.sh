#!/usr/bin/env bash
# What the benchmark's tests need on a fresh machine (TEST-ONLY; tests/run.sh runs it before pytest):
#   - Debian's chromium: the report is opened in a real headless browser (tests/integration/chromium_cdp.py);
#   - the CPU wheelhouse .cache/molecule/wheels-cpu (molecule/sglang-cpu/build-wheelhouse.sh: SGLang 0.5.23's
#     dependencies with the CPU build of torch, fetched once and kept): inventory/local installs the benchmark
#     client's requirements from it (sglang_bench_find_links, no index).
# Fails loudly when either cannot be had: the tests that need them fail, they never skip.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! command -v chromium >/dev/null 2>&1; then
    echo "installing chromium (apt-get)"
    if [[ $(id -u) -ne 0 ]]; then
        echo "chromium is missing and this is not root: run 'apt-get install -y chromium' as root" >&2
        exit 1
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
chromium --headless --no-sandbox --version >/dev/null 2>&1 || { echo "chromium does not start" >&2; exit 1; }
echo "chromium: $(chromium --version 2>/dev/null | head -1)"

EAGLE_PYTHON="${EAGLE_PYTHON:-${PWD}/.venv/bin/python}" bash molecule/sglang-cpu/build-wheelhouse.sh
wheels=.cache/molecule/wheels-cpu
for must in torch-2.13.0+cpu transformers datasets aiohttp triton; do
    compgen -G "${wheels}/${must}-*.whl" >/dev/null || { echo "no ${must} wheel in ${wheels}" >&2; exit 1; }
done
echo "benchmark client wheels: ${wheels} ($(ls "${wheels}"/*.whl | wc -l) wheels)"

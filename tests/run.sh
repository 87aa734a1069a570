#!/usr/bin/env bash
# The project's test command (README "Tests"): lint, ansible-test sanity, unit + integration tests, then the molecule
# scenarios on podman test hosts. Needs the controller venv (.venv, README "Set-up").
#   tests/run.sh              everything
#   tests/run.sh --quick      lint + unit/integration tests only (no molecule)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH="${PWD}/.venv/bin:${PATH}"
export ANSIBLE_CONFIG="${PWD}/ansible.cfg"
quick=0
[[ "${1:-}" == "--quick" ]] && quick=1

t0=${SECONDS}
echo "== yamllint"
yamllint -s .
echo "== ansible-lint (production profile)"
PYTHONPATH="${PWD}/tests/lint" ansible-lint --offline -q  # sitecustomize: the args rule can import our modules
echo "== ansible-doc renders every module"
for m in library/*.py; do
    ansible-doc -M library "$(basename "${m}" .py)" >/dev/null
done
echo "== ansible-test sanity on the collection eagle.deploy (tests/sanity.sh)"
bash tests/sanity.sh
echo "== fetch the SGLang wheels the tests read (.cache/sglang-wheels; tests never download)"
python tests/unit/sglang_src.py
echo "== the benchmark's tests: chromium and the benchmark client's CPU wheelhouse (tests/setup_bench.sh)"
bash tests/setup_bench.sh
echo "== set up the real sglang-router the rolling-restart test runs (.cache/sglang-router; tests never download)"
python tests/integration/sglang_router_src.py
echo "== fetch the huggingface_hub wheels the model role's tests install (.cache/hf-wheels)"
python tests/integration/hf_wheels.py
echo "== pytest (unit + integration)"
python -m pytest -q tests
echo "== pytest took $((SECONDS - t0)) s so far"

if ((quick == 0)); then
    echo "== molecule (podman test hosts)"
    bash molecule/setup-host.sh
    # shellcheck source=molecule/env.sh
    . molecule/env.sh
    # Every scenario, always: a scenario that went missing fails here instead of being skipped.
    molecule test -s default
    molecule test -s sglang-cpu
    molecule test -s systemd
    molecule test -s model
    molecule test -s multinode
fi
echo "== all tests passed in $((SECONDS - t0)) s"

#!/usr/bin/env bash
# The project's test command (README "Tests"). Needs the controller venv (.venv, README "Quick start").
#   tests/run.sh           everything: lint, ansible-doc, ansible-test sanity, ansible-core 2.21 beside the pinned
#                          2.19 (tests/ansible_core_2_21.sh), unit + integration tests (in parallel,
#                          one file per worker), then the molecule scenarios on podman test hosts (`model` beside the
#                          others: it shares no port, address or container with them)
#   tests/run.sh --fast    lint, ansible-doc, the documentation checks and the unit tests: before every commit
#   tests/run.sh --quick   everything but molecule
# EAGLE_TEST_WORKERS: pytest workers for the integration tests (default 3; 1 runs them one after another).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH="${PWD}/.venv/bin:${PATH}"
export ANSIBLE_CONFIG="${PWD}/ansible.cfg"
mode=full
case "${1:-}" in
    --fast) mode=fast ;;
    --quick) mode=quick ;;
    "") ;;
    *) echo "tests/run.sh: unknown option ${1} (--fast, --quick or none)" >&2; exit 2 ;;
esac
workers=${EAGLE_TEST_WORKERS:-3}

t0=${SECONDS}
echo "== yamllint"
yamllint -s .
echo "== ansible-lint (production profile)"
PYTHONPATH="${PWD}/tests/lint" ansible-lint --offline -q  # sitecustomize: the args rule can import our modules
echo "== ansible-doc renders every module"
for m in library/*.py; do
    ansible-doc -M library "$(basename "${m}" .py)" >/dev/null
done
echo "== the change log's fragments (antsibull-changelog lint)"
antsibull-changelog lint
echo "== fetch the SGLang wheels the tests read (.cache/sglang-wheels; tests never download)"
python tests/unit/sglang_src.py
if [[ ${mode} == fast ]]; then
    echo "== unit tests, the documentation checks among them (pytest.ini: tests/unit)"
    python -m pytest -q
    echo "== fast tests passed in $((SECONDS - t0)) s"
    exit 0
fi
echo "== ansible-test sanity on the collection eagle.deploy (tests/sanity.sh)"
bash tests/sanity.sh
echo "== ansible-core 2.21 (Python 3.12+): the rehearsal converged and kept, ansible-test sanity (tests/ansible_core_2_21.sh)"
bash tests/ansible_core_2_21.sh
echo "== the benchmark's tests: chromium and the benchmark client's CPU wheelhouse (tests/setup_bench.sh)"
bash tests/setup_bench.sh
echo "== set up the real sglang-router the rolling-restart test runs (.cache/sglang-router; tests never download)"
python tests/integration/sglang_router_src.py
echo "== fetch the huggingface_hub wheels the model role's tests install (.cache/hf-wheels)"
python tests/integration/hf_wheels.py
echo "== pytest: unit tests, then the integration tests on ${workers} workers"
python -m pytest -q tests/unit
# the files whose timings need the machine to themselves first (tests/integration/conftest.py), then the others
python -m pytest -q -m alone tests/integration
if ((workers > 1)); then
    python -m pytest -q -m "not alone" -n "${workers}" --dist loadfile tests/integration
else
    python -m pytest -q -m "not alone" tests/integration
fi
echo "== pytest took $((SECONDS - t0)) s so far"

if [[ ${mode} == full ]]; then
    echo "== molecule (podman test hosts)"
    bash molecule/setup-host.sh
    # shellcheck source=molecule/env.sh
    . molecule/env.sh
    # Every scenario, always: a scenario that went missing fails here instead of being skipped.
    model_log=$(mktemp /tmp/eagle-molecule-model.XXXXXX)
    molecule test -s model >"${model_log}" 2>&1 &
    model_pid=$!
    status=0
    for scenario in default sglang-cpu systemd multinode; do
        molecule test -s "${scenario}" || { status=1; break; }
    done
    model_status=0
    wait "${model_pid}" || model_status=$?
    echo "== molecule test -s model (beside the others; its output follows)"
    cat "${model_log}"
    rm -f "${model_log}"
    ((model_status == 0)) || { echo "== molecule test -s model failed (exit ${model_status})" >&2; exit 1; }
    ((status == 0)) || { echo "== molecule test -s ${scenario} failed" >&2; exit 1; }
fi
echo "== all tests passed in $((SECONDS - t0)) s"

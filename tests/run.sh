#!/usr/bin/env bash
# The project's test command (README "Tests"). Needs the controller venv (.venv, README "Quick start").
#   tests/run.sh           everything: lint, ansible-doc, ansible-test sanity, ansible-core 2.21 beside the pinned
#                          2.19 (tests/ansible_core_2_21.sh), unit + integration tests (in parallel,
#                          one file per worker), then the molecule scenarios on podman test hosts in three lanes
#                          side by side (systemd | sglang-cpu, multinode | default, model: no two lanes share a
#                          port, an address or a container)
#   tests/run.sh --fast    lint, ansible-doc, the documentation checks and the unit tests: before every commit
#   tests/run.sh --quick   everything but molecule
#   tests/run.sh --molecule  the molecule scenarios only (their three lanes)
# EAGLE_TEST_WORKERS: pytest workers for the integration tests (default 3; 1 runs them one after another).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH="${PWD}/.venv/bin:${PATH}"
export ANSIBLE_CONFIG="${PWD}/ansible.cfg"
mode=full
case "${1:-}" in
    --fast) mode=fast ;;
    --quick) mode=quick ;;
    --molecule) mode=molecule ;;
    "") ;;
    *) echo "tests/run.sh: unknown option ${1} (--fast, --quick, --molecule or none)" >&2; exit 2 ;;
esac
workers=${EAGLE_TEST_WORKERS:-3}

molecule_lanes() {
    stage "molecule (podman test hosts)"
    bash molecule/setup-host.sh  # idempotent: a second where the full run set it up beside the sanity tests
    python tests/integration/hf_wheels.py  # model's prepare.yml reads them (.cache/hf-wheels; kept when there)
    # shellcheck source=molecule/env.sh
    . molecule/env.sh
    # Every scenario, always: a scenario that went missing fails here instead of being skipped. Three lanes side
    # by side, each about as long as systemd alone; a lane's scenarios run one after another (sglang-cpu and
    # multinode share the SSH port 2231), and no two lanes share a port, an address or a container (default's
    # prepare.yml, which systemd and multinode run too, renames its wheels into place). Each lane's output
    # follows when all have ended.
    lanes=("systemd" "sglang-cpu multinode" "default model")
    logs=() pids=()
    for lane in "${lanes[@]}"; do
        log=$(mktemp /tmp/eagle-molecule-lane.XXXXXX)
        logs+=("${log}")
        (
            for scenario in ${lane}; do
                echo "== molecule test -s ${scenario} (started after $((SECONDS - t0)) s)"
                molecule test -s "${scenario}" || { echo "== molecule test -s ${scenario} FAILED"; exit 1; }
                echo "== molecule test -s ${scenario} passed after $((SECONDS - t0)) s"
            done
        ) >"${log}" 2>&1 &
        pids+=($!)
    done
    failed=()
    for i in "${!lanes[@]}"; do
        wait "${pids[i]}" || failed+=("${lanes[i]}")
    done
    for i in "${!lanes[@]}"; do
        echo "== molecule lane: ${lanes[i]} (its output follows)"
        cat "${logs[i]}"
        rm -f "${logs[i]}"
    done
    if ((${#failed[@]})); then
        printf '== molecule failed in the lane: %s\n' "${failed[@]}" >&2
        exit 1
    fi
}

t0=${SECONDS}
stage() { echo "== $* (at $((SECONDS - t0)) s)"; }
if [[ ${mode} == molecule ]]; then
    molecule_lanes
    echo "== molecule passed in $((SECONDS - t0)) s"
    exit 0
fi
stage "yamllint"
yamllint -s .
stage "ansible-lint (production profile)"
PYTHONPATH="${PWD}/tests/lint" ansible-lint --offline -q  # sitecustomize: the args rule can import our modules
stage "ansible-doc renders every module"
for m in library/*.py; do
    ansible-doc -M library "$(basename "${m}" .py)" >/dev/null
done
stage "the change log's fragments (antsibull-changelog lint)"
antsibull-changelog lint
stage "fetch the SGLang wheels the tests read (.cache/sglang-wheels; tests never download)"
python tests/unit/sglang_src.py
if [[ ${mode} == fast ]]; then
    stage "unit tests, the documentation checks among them (pytest.ini: tests/unit)"
    python -m pytest -q
    echo "== fast tests passed in $((SECONDS - t0)) s"
    exit 0
fi
# Side by side (each is one process at a time, the machine has two cores): ansible-test sanity on the pinned
# ansible-core, and ansible-core 2.21 (its own venv, prefix and port); meanwhile the set-ups and the unit tests.
# Their output follows when both have ended, before any integration test starts.
side_names=("ansible-test sanity on the collection eagle.deploy (tests/sanity.sh)"
    "ansible-core 2.21 (Python 3.12+): the rehearsal converged and kept, ansible-test sanity (tests/ansible_core_2_21.sh)")
side_cmds=("tests/sanity.sh" "tests/ansible_core_2_21.sh")
side_logs=() side_pids=()
for i in "${!side_cmds[@]}"; do
    side_logs+=("$(mktemp /tmp/eagle-side.XXXXXX)")
    stage "started beside: ${side_names[i]}"
    bash "${side_cmds[i]}" >"${side_logs[i]}" 2>&1 &
    side_pids+=($!)
done
stage "the benchmark's tests: chromium and the benchmark client's CPU wheelhouse (tests/setup_bench.sh)"
bash tests/setup_bench.sh
if [[ ${mode} == full ]]; then
    stage "the molecule test hosts' set-up: podman, the images (molecule/setup-host.sh; apt, so after setup_bench.sh)"
    bash molecule/setup-host.sh
fi
stage "set up the real sglang-router the rolling-restart test runs (.cache/sglang-router; tests never download)"
python tests/integration/gateway_src.py sglang-router
stage "set up the real smg, SGLang's gateway after sglang-router, the same test runs too (.cache/smg; tests never download)"
python tests/integration/gateway_src.py smg
stage "fetch the huggingface_hub wheels the model role's tests install (.cache/hf-wheels)"
python tests/integration/hf_wheels.py
stage "pytest: unit tests"
python -m pytest -q tests/unit
side_failed=()
for i in "${!side_cmds[@]}"; do
    wait "${side_pids[i]}" || side_failed+=("${side_cmds[i]}")
done
for i in "${!side_cmds[@]}"; do
    stage "${side_names[i]}: its output"
    cat "${side_logs[i]}"
    rm -f "${side_logs[i]}"
done
if ((${#side_failed[@]})); then
    printf '== failed: %s\n' "${side_failed[@]}" >&2
    exit 1
fi
stage "pytest: the integration tests (the alone files, then the others on ${workers} workers)"
# the files whose timings need the machine to themselves first (tests/integration/conftest.py), then the others
python -m pytest -q -m alone tests/integration
if ((workers > 1)); then
    python -m pytest -q -m "not alone" -n "${workers}" --dist loadfile --no-loadscope-reorder --durations=25 tests/integration
else
    python -m pytest -q -m "not alone" tests/integration
fi
echo "== pytest took $((SECONDS - t0)) s so far"

if [[ ${mode} == full ]]; then
    molecule_lanes
fi
echo "== all tests passed in $((SECONDS - t0)) s"

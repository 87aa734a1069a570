#!/usr/bin/env bash
# ansible-core 2.21 (Python 3.12+) beside the pinned 2.19: its own controller venv .venv-2.21
# (requirements-2.21.txt), the rehearsal's main job converged with it and run again (the re-run must be the one look,
# kept, changed=0), stop.yml, then ansible-test sanity on 2.21 (tests/sanity.sh, tests/sanity/ignore-2.21.txt).
# The rehearsal's SGLang venv is made with the host's python3 (3.11 on Debian 12), not the controller's Python.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
python=""
for candidate in python3.13 python3.12 "${HOME}"/.pyenv/versions/3.13*/bin/python3 \
        "${HOME}"/.pyenv/versions/3.12*/bin/python3; do
    if "${candidate}" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
        python=${candidate}
        break
    fi
done
[[ -n "${python}" ]] || { echo "ansible-core 2.21: no Python 3.12 or newer found (python3.12, python3.13, pyenv)" >&2; exit 1; }
if [[ ! -x .venv-2.21/bin/ansible-playbook ]]; then
    "${python}" -m venv .venv-2.21
fi
.venv-2.21/bin/pip install -q --disable-pip-version-check -r requirements-2.21.txt
core=$(.venv-2.21/bin/python -c 'from ansible.release import __version__ as v; print(v)')
echo "== ansible-core ${core} on $(.venv-2.21/bin/python -V)"

prefix=$(mktemp -d /tmp/eagle-deploy-core221-XXXXXX)
chmod 755 "${prefix}"
port=$(.venv-2.21/bin/python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
play() {
    ANSIBLE_CONFIG="${PWD}/ansible.cfg" ANSIBLE_CALLBACK_RESULT_FORMAT=json ANSIBLE_NOCOLOR=1 \
        .venv-2.21/bin/ansible-playbook -v "playbooks/$1" -i inventory/local -e "eagle_deploy_prefix=${prefix}" \
        -e "sglang_server_port=${port}"
}
stopped=0
cleanup() {
    ((stopped)) || play stop.yml >/dev/null 2>&1 || true
    rm -rf "${prefix}"
}
trap cleanup EXIT
t0=${SECONDS}
play serve_eagle3.yml >"${prefix}.converge.log" || { tail -c 4000 "${prefix}.converge.log"; exit 1; }
echo "== converged in $((SECONDS - t0)) s"
t1=${SECONDS}
play serve_eagle3.yml >"${prefix}.rerun.log" || { tail -c 4000 "${prefix}.rerun.log"; exit 1; }
.venv-2.21/bin/python - "${prefix}.rerun.log" <<'PY'
import json, re, sys
text = open(sys.argv[1]).read()
recap = re.search(r"^localhost\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", text, re.M)
assert recap and recap.group(2) == "0" and recap.group(4) == "0", recap and recap.group(0)
# the one look's result (-v, results as JSON): the server kept, nothing else to run
look = text.split("Look at the host once (install, patch, server)", 1)[1].split("=> ", 1)[1]
keep = json.JSONDecoder().raw_decode(look)[0].get("keep") or {}
assert keep.get("kept") is True, keep.get("why") or keep
print("== the re-run kept the server: changed=0, the look's verdict kept (pid %s)" % keep.get("pid"))
PY
echo "== the re-run took $((SECONDS - t1)) s"
rm -f "${prefix}.converge.log" "${prefix}.rerun.log"
play stop.yml >/dev/null
stopped=1
echo "== ansible-test sanity on ansible-core ${core}"
EAGLE_VENV=.venv-2.21 bash tests/sanity.sh

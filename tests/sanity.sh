#!/usr/bin/env bash
# Ansible's own gate: `ansible-test sanity`, every test that applies, on the collection eagle.deploy assembled from
# this tree (bin/build-collection) in a temporary directory. Needs the controller venv (.venv, README "Quick start").
# ansible-test puts each test's requirements (pylint, pycodestyle, voluptuous, ...) into venvs of its own under
# ~/.ansible/test/venv, from the package index, on the first run.
#   tests/sanity.sh                    every sanity test
#   tests/sanity.sh --test pylint ...  the arguments go to ansible-test sanity
# What it ignores is tests/sanity/ignore-<ansible-core X.Y>.txt, each line with its reason.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=${PWD}
# EAGLE_VENV: the controller venv whose ansible-core runs the tests (default .venv; tests/ansible_core_2_21.sh passes
# .venv-2.21)
venv_bin=${repo}/${EAGLE_VENV:-.venv}/bin
for tool in python ansible-test; do
    [[ -x "${venv_bin}/${tool}" ]] || { echo "sanity: ${venv_bin}/${tool} is missing: create the venv (README \"Quick start\")" >&2; exit 1; }
done
export PATH="${venv_bin}:${PATH}"

core=$(python -c 'from ansible.release import __version__ as v; print(".".join(v.split(".")[:2]))')
pyver=$(python -c 'import sys; print("%d.%d" % sys.version_info[:2])')
ignore=tests/sanity/ignore-${core}.txt
[[ -f "${ignore}" ]] || { echo "sanity: ${ignore} is missing: ansible-core ${core} needs its own ignore file" >&2; exit 1; }

# ansible-test bootstraps pip in each new venv with a get-pip script it downloads from a host outside the package
# index (ci-files.testing.ansible.com), unless the script is in its cache: tests/sanity/get_pip.py stands in for it.
pip_version=$(python -c 'import types
from ansible_test._internal.python_requirements import get_venv_packages
print(get_venv_packages(types.SimpleNamespace(version="'"${pyver}"'"))["pip"])')
get_pip=${HOME}/.ansible/test/cache/get_pip_${pip_version//./_}.py
if [[ ! -f "${get_pip}" ]]; then
    mkdir -p "$(dirname "${get_pip}")"
    # (renamed into place: tests/run.sh runs two of these side by side)
    cp tests/sanity/get_pip.py "${get_pip}.$$"
    mv -f "${get_pip}.$$" "${get_pip}"
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/eagle-deploy-sanity.XXXXXX")
trap 'rm -rf "${tmp}"' EXIT
collection=$(python bin/build-collection --tree "${tmp}")
cd "${collection}"
echo "== ansible-test sanity on ${collection} (ansible-core ${core}, ${ignore})"
ansible-test sanity --venv --python "${pyver}" --color no "$@"

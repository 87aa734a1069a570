# Environment for podman + molecule in this project: `. molecule/env.sh` (setup-host.sh and
# .ci/run source it). Bash.
_eagle_molecule_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export EAGLE_REPO="$(cd "${_eagle_molecule_dir}/.." && pwd)"
export CONTAINERS_CONF="${_eagle_molecule_dir}/containers.conf"
export EAGLE_MOLECULE_IMAGE="${EAGLE_MOLECULE_IMAGE:-localhost/eagle-deploy-debian12:latest}"
export EAGLE_MOLECULE_SYSTEMD_IMAGE="${EAGLE_MOLECULE_SYSTEMD_IMAGE:-localhost/eagle-deploy-debian12-systemd:latest}"
export EAGLE_MOLECULE_CACHE="${EAGLE_REPO}/.cache/molecule"
export PATH="${EAGLE_REPO}/.venv/bin:${PATH}"
unset _eagle_molecule_dir

#!/usr/bin/env bash
# Prepare this machine to run the molecule scenarios (podman test hosts).
# Idempotent. Installs podman, runc and mmdebstrap from Debian (apt), then builds and caches the
# base image of the test hosts. Writes nothing outside the repository except apt packages and
# podman's own storage.
#
# Usage: molecule/setup-host.sh            (then: source molecule/env.sh; cd molecule && ...)
# Env:   EAGLE_MOLECULE_IMAGE   image name (default: localhost/eagle-deploy-debian12:latest)
#        EAGLE_MOLECULE_REBUILD=1 rebuild the image even if it exists
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=molecule/env.sh
. "${here}/env.sh"

t0=${SECONDS}
step() { printf '[setup-host] %-48s %4ss\n' "$1" "$((SECONDS - t0))"; }

need_pkgs=()
# catatonit: `podman run --init` (a PID 1 that forwards SIGTERM and reaps the zombies our tests make).
for pkg in podman runc catatonit mmdebstrap uidmap; do
    dpkg-query -W -f='${Status}' "${pkg}" 2>/dev/null | grep -q 'install ok installed' || need_pkgs+=("${pkg}")
done
if ((${#need_pkgs[@]})); then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null 2>&1
    step "apt-get install ${need_pkgs[*]}"
else
    step "apt packages already installed"
fi

podman info --format '{{.Host.OCIRuntime.Name}} {{.Host.CgroupsVersion}}' >/dev/null
step "podman info ($(podman --version))"

if [[ "${EAGLE_MOLECULE_REBUILD:-0}" != 1 ]] && podman image exists "${EAGLE_MOLECULE_IMAGE}"; then
    step "image ${EAGLE_MOLECULE_IMAGE} cached"
else
    # No registry is reachable: debootstrap a minimal Debian 12 and import it.
    # python3 (Ansible), python3-venv (the role's venv), sudo (become_user), curl (health checks
    # from inside), iproute2 (ss: testinfra's host.socket), procps (ps, pgrep).
    mmdebstrap --quiet --variant=minbase \
        --include=python3,python3-venv,python3-pip,python3-packaging,sudo,iproute2,procps,curl,ca-certificates \
        bookworm - \
        | podman import --quiet --change 'CMD ["/bin/sh"]' - "${EAGLE_MOLECULE_IMAGE}" >/dev/null
    step "built image ${EAGLE_MOLECULE_IMAGE}"
fi

# Smoke: a container starts with this configuration.
podman run --rm --init --stop-timeout=1 "${EAGLE_MOLECULE_IMAGE}" python3 -c 'import sys; print(sys.version.split()[0])' >/dev/null
step "container smoke run"

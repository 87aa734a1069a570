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
for pkg in podman runc catatonit mmdebstrap uidmap openssh-client; do
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

# The test hosts mount it read-only (wheelhouses, test models); prepare fills it.
mkdir -p "${EAGLE_MOLECULE_CACHE}/ssh"
# Ansible reaches the test hosts over SSH (published on 127.0.0.1) with this key; sshd inside reads
# authorized_keys from the mounted cache.
if [[ ! -s "${EAGLE_MOLECULE_CACHE}/ssh/id_ed25519" ]]; then
    rm -f "${EAGLE_MOLECULE_CACHE}/ssh/id_ed25519" "${EAGLE_MOLECULE_CACHE}/ssh/id_ed25519.pub"
    ssh-keygen -q -t ed25519 -N '' -C eagle-molecule -f "${EAGLE_MOLECULE_CACHE}/ssh/id_ed25519"
fi
cp "${EAGLE_MOLECULE_CACHE}/ssh/id_ed25519.pub" "${EAGLE_MOLECULE_CACHE}/ssh/authorized_keys"
chmod 0755 "${EAGLE_MOLECULE_CACHE}" "${EAGLE_MOLECULE_CACHE}/ssh"
chmod 0644 "${EAGLE_MOLECULE_CACHE}/ssh/authorized_keys"
step "ssh key ${EAGLE_MOLECULE_CACHE}/ssh/id_ed25519"

podman info --format '{{.Host.OCIRuntime.Name}} {{.Host.CgroupsVersion}}' >/dev/null
step "podman info ($(podman --version))"

if [[ "${EAGLE_MOLECULE_REBUILD:-0}" != 1 ]] && podman image exists "${EAGLE_MOLECULE_IMAGE}"; then
    step "image ${EAGLE_MOLECULE_IMAGE} cached"
else
    # No registry is reachable: debootstrap a minimal Debian 12 and import it.
    # python3 (Ansible), python3-venv (the role's venv), openssh-server (Ansible reaches the hosts
    # over SSH with pipelining: 4x faster than podman exec per task), sudo (become), curl (health
    # checks from inside), iproute2 (ss: the role's preflight, testinfra's host.socket), procps.
    # sshd takes root's key from the mounted cache (.cache/molecule/ssh), so the image holds no key.
    mmdebstrap --quiet --variant=minbase \
        --include=python3,python3-venv,python3-pip,python3-packaging,openssh-server,sudo,iproute2,procps,curl,ca-certificates \
        --customize-hook='mkdir -p "$1/etc/ssh/sshd_config.d" "$1/run/sshd"' \
        --customize-hook='printf "%s\n" "AuthorizedKeysFile /opt/eagle-cache/ssh/authorized_keys" "PermitRootLogin prohibit-password" "PasswordAuthentication no" "UseDNS no" > "$1/etc/ssh/sshd_config.d/eagle-molecule.conf"' \
        bookworm - \
        | podman import --quiet --change 'CMD ["/bin/sh"]' - "${EAGLE_MOLECULE_IMAGE}" >/dev/null
    step "built image ${EAGLE_MOLECULE_IMAGE}"
fi

# Smoke: a container starts with this configuration.
podman run --rm --init --stop-timeout=1 "${EAGLE_MOLECULE_IMAGE}" python3 -c 'import sys; print(sys.version.split()[0])' >/dev/null
step "container smoke run"

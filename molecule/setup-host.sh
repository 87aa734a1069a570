#!/usr/bin/env bash
# Prepare this machine to run the molecule scenarios (podman test hosts).
# Idempotent. Installs podman, runc and mmdebstrap from Debian (apt), then builds and caches the
# base images of the test hosts. Writes nothing outside the repository except apt packages and
# podman's own storage.
#
# Usage: molecule/setup-host.sh            (then: source molecule/env.sh; cd molecule && ...)
# Env:   EAGLE_MOLECULE_IMAGE          image of `default` and `sglang-cpu` (default: localhost/eagle-deploy-debian12:latest)
#        EAGLE_MOLECULE_SYSTEMD_IMAGE  image of `systemd` (default: localhost/eagle-deploy-debian12-systemd:latest)
#        EAGLE_MOLECULE_REBUILD=1      rebuild the images even if their inputs did not change
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

# build_image NAME CMD PACKAGES [HOOK...]: debootstrap a minimal Debian 12 (no registry is reachable) and import
# it as NAME with CMD, labelled with the hash of these inputs. Kept while the label matches (rebuilt when the
# inputs change, or with EAGLE_MOLECULE_REBUILD=1).
build_image() {
    local name="$1" cmd="$2" pkgs="$3"
    shift 3
    local hooks=() hook
    for hook in "$@"; do hooks+=(--customize-hook="${hook}"); done
    local inputs
    inputs="$(printf '%s\n' bookworm minbase "${cmd}" "${pkgs}" "$@" | sha256sum | cut -c1-16)"
    if [[ "${EAGLE_MOLECULE_REBUILD:-0}" != 1 ]] && podman image exists "${name}" \
        && [[ "$(podman image inspect --format '{{ index .Labels "eagle.inputs" }}' "${name}")" == "${inputs}" ]]; then
        step "image ${name} cached (inputs ${inputs})"
        return
    fi
    mmdebstrap --quiet --variant=minbase --include="${pkgs}" "${hooks[@]}" bookworm - \
        | podman import --quiet --change "CMD ${cmd}" --change "LABEL eagle.inputs=${inputs}" - "${name}" >/dev/null
    step "built image ${name} (inputs ${inputs})"
}

# python3 (Ansible), python3-venv (the role's venv), openssh-server (Ansible reaches the hosts over SSH with
# pipelining: 4x faster than podman exec per task), sudo (become), curl (health checks from inside), iproute2
# (ss: the role's preflight, testinfra's host.socket), procps.
# sshd takes root's key from the mounted cache (.cache/molecule/ssh), so the images hold no key.
base_pkgs=python3,python3-venv,python3-pip,python3-packaging,openssh-server,sudo,iproute2,procps,curl,ca-certificates
sshd_hooks=(
    'mkdir -p "$1/etc/ssh/sshd_config.d" "$1/run/sshd"'
    'printf "%s\n" "AuthorizedKeysFile /opt/eagle-cache/ssh/authorized_keys" "PermitRootLogin prohibit-password" "PasswordAuthentication no" "UseDNS no" > "$1/etc/ssh/sshd_config.d/eagle-molecule.conf"'
)
# The hosts of `default` and `sglang-cpu`: sshd under catatonit, no init system.
build_image "${EAGLE_MOLECULE_IMAGE}" '["/bin/sh"]' "${base_pkgs}" "${sshd_hooks[@]}"
# The hosts of `systemd`: systemd as PID 1 (podman --systemd=always), sshd as its unit ssh.service (enabled by
# the package). No getty on the console (nobody logs in there).
build_image "${EAGLE_MOLECULE_SYSTEMD_IMAGE}" '["/sbin/init"]' "${base_pkgs},systemd-sysv" "${sshd_hooks[@]}" \
    'systemctl --root="$1" enable ssh.service >/dev/null 2>&1' \
    'systemctl --root="$1" mask getty@tty1.service console-getty.service >/dev/null 2>&1'

# Smoke: a container starts with this configuration.
podman run --rm --init --stop-timeout=1 "${EAGLE_MOLECULE_IMAGE}" python3 -c 'import sys; print(sys.version.split()[0])' >/dev/null
step "container smoke run"
# Smoke: systemd boots as PID 1 in a container of the systemd image and starts sshd.
smoke="eagle-setup-systemd-smoke-$$"
podman run -d --rm --name "${smoke}" --systemd=always --stop-timeout=5 "${EAGLE_MOLECULE_SYSTEMD_IMAGE}" >/dev/null
trap 'podman rm -f -t 0 "${smoke}" >/dev/null 2>&1 || true' EXIT
# (until systemd's own socket is up, systemctl cannot connect: retried)
state="$(podman exec "${smoke}" sh -c 'for i in $(seq 120); do
    s=$(systemctl is-system-running --wait 2>/dev/null); case "$s" in running|degraded) break;; esac; sleep 0.5; done; echo "$s"')"
[[ "${state}" == running ]] || { echo "systemd in ${smoke}: ${state}" >&2; podman exec "${smoke}" systemctl --failed --no-pager >&2; exit 1; }
podman exec "${smoke}" systemctl is-active --quiet ssh.service
podman rm -f -t 0 "${smoke}" >/dev/null
trap - EXIT
step "systemd container smoke run (systemd as PID 1, ssh.service active)"

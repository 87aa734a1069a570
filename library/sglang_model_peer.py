#!/usr/bin/python
# -*- coding: utf-8 -*-

# Copyright: eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_model_peer
short_description: Let one host copy a model from another over SSH, read-only, for the time of the copy
description:
  - The two ends of a fan-out copy of M(ansible.legacy.sglang_model) (its O(ansible.legacy.sglang_model#module:models[].peer)
    option), so that a fleet fetches each model from its source once and the other hosts copy it from a host that has
    it.
  - O(side=puller) - on the host that copies - makes an SSH key of its own for this model (ed25519, no passphrase,
    C(<state_dir>/<name>.peer/id_ed25519), root's, 0600; the private key never leaves the host) and returns its public
    key and the address this host reaches the peer from. V(absent) removes the key.
  - O(side=seeder) - on the host that has the model - puts that public key into O(user)'s C(authorized_keys) with
    C(restrict), C(from=) the puller's address, an C(expiry-time) O(ttl) seconds ahead and the forced command
    C(rrsync -ro <path>) - the key can only read the model's directory with rsync, from that address, until then.
    Returns the host's SSH host keys, which the puller accepts and no others. V(absent) removes the line again, and
    every line of this module whose expiry time has passed.
version_added: "1.0.0"
author:
  - eagle-deploy contributors (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
options:
  side:
    description: Which end of the copy this host is.
    type: str
    choices: [puller, seeder]
    required: true
  name:
    description: The model's name (as in M(ansible.legacy.sglang_model)).
    type: str
    required: true
  state:
    description: V(present) sets the key (and access) up, V(absent) removes it.
    type: str
    choices: [present, absent]
    default: present
  state_dir:
    description: M(ansible.legacy.sglang_model)'s state dir (the puller's key lives there; the seeder locks there).
    type: path
    default: /var/lib/eagle-deploy/models
  peer_address:
    description: O(side=puller) - the seeder's address; the result's RV(source_address) is this host's address toward it.
    type: str
  public_key:
    description: O(side=seeder) - the puller's public key (its RV(public_key)).
    type: str
  from_address:
    description: O(side=seeder) - the only address the key is accepted from (the puller's RV(source_address)).
    type: str
  path:
    description: O(side=seeder) - the model's directory, the only one the key can read.
    type: path
  user:
    description: O(side=seeder) - the account whose C(authorized_keys) gets the line (it must be able to read O(path)).
    type: str
    default: root
  ttl:
    description: O(side=seeder) - seconds until the key expires even if it is never removed.
    type: int
    default: 86400
notes:
  - The seeder needs C(rrsync) (Debian's and Ubuntu's C(rsync) package ships it) and C(sshd) reading
    C(~/.ssh/authorized_keys); the puller needs C(ssh) and C(rsync).
attributes:
  check_mode:
    support: full
    details: Reports what would change; writes no key and no line.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: A key for copying Kimi-K2.5-INT4 from gpu-node-01
  ansible.legacy.sglang_model_peer:
    side: puller
    name: Kimi-K2.5-INT4
    peer_address: 10.0.0.11
  register: puller

- name: Let that key read the model on gpu-node-01
  ansible.legacy.sglang_model_peer:
    side: seeder
    name: Kimi-K2.5-INT4
    public_key: "{{ puller.public_key }}"
    from_address: "{{ puller.source_address }}"
    path: /data/models/Kimi-K2.5-INT4
  delegate_to: gpu-node-01
"""

RETURN = r"""
public_key:
  description: O(side=puller) - the copy's public key (C(ssh-ed25519 AAAA... comment)).
  returned: side=puller, state=present, not in check mode on a host without the key
  type: str
  sample: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIO... eagle-deploy-fanout:Kimi-K2.5-INT4
key:
  description: O(side=puller) - the private key's path (for M(ansible.legacy.sglang_model)'s peer option).
  returned: side=puller
  type: str
  sample: /var/lib/eagle-deploy/models/Kimi-K2.5-INT4.peer/id_ed25519
source_address:
  description: O(side=puller) - this host's address toward O(peer_address) (what the seeder sees the copy come from).
  returned: side=puller, state=present
  type: str
  sample: 10.0.0.12
host_keys:
  description: O(side=seeder) - the host's SSH host public keys (C(type base64) each).
  returned: side=seeder, state=present
  type: list
  elements: str
  sample: ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB..."]
manifest:
  description: O(side=seeder) - what this host verified of the model (its manifest) - C(files) (each C(path), C(size),
    C(sha256), C(git_sha1)) and C(source) (repo, revision, commit) - the puller checks its copy against it.
  returned: side=seeder, state=present
  type: dict
  sample: {"files": [{"path": "config.json", "size": 1790, "sha256": "4f17", "git_sha1": "7188"}],
           "source": {"kind": "hub", "repo": "moonshotai/Kimi-K2.5", "revision": "main", "commit": "0123"}}
removed:
  description: O(side=seeder) - how many lines of this module were removed (this one, and expired ones).
  returned: side=seeder
  type: int
  sample: 1
"""

import datetime
import fcntl
import glob
import os
import pwd
import re
import shlex
import shutil
import socket
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils import sglang_weights, sglang_proc

MARK = "eagle-deploy-fanout:"
RRSYNC_PATHS = ("/usr/bin/rrsync", "/usr/local/bin/rrsync")
_KEY = re.compile(r"^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp256|ecdsa-sha2-nistp384|ecdsa-sha2-nistp521) ([A-Za-z0-9+/=]+)")
_EXPIRY = re.compile(r'expiry-time="(\d{12})"')


class PeerError(Exception):
    pass


def source_address(peer, port=22):
    """This host's address toward ``peer`` (a UDP socket's local address after connect: no packet is sent)."""
    infos = socket.getaddrinfo(peer, port, 0, socket.SOCK_DGRAM)
    family, addr = infos[0][0], infos[0][4]
    sock = socket.socket(family, socket.SOCK_DGRAM)
    try:
        sock.connect(addr)
        return sock.getsockname()[0]
    finally:
        sock.close()


def access_line(name, public_key, from_address, path, rrsync, expires):
    """The authorized_keys line: read-only rsync of ``path`` with this key, from that address, until ``expires``."""
    m = _KEY.match(public_key.strip())
    if not m:
        raise PeerError("public_key is not an SSH public key (ssh-ed25519 AAAA...): %r" % public_key[:40])
    if any(c in path for c in '"\\\n\r') or any(c in (from_address or "") for c in '"\\\n\r, '):
        raise PeerError("path and from_address must not hold quotes, backslashes, commas or line breaks")
    opts = ["restrict"]
    if from_address:
        opts.append('from="%s"' % from_address)
    opts.append('expiry-time="%s"' % expires)
    opts.append('command="%s -ro %s"' % (rrsync, shlex.quote(path)))
    return "%s %s %s %s%s" % (",".join(opts), m.group(1), m.group(2), MARK, name)


def ours(line, name=None):
    words = line.split()
    return bool(words) and words[-1].startswith(MARK) and (name is None or words[-1] == MARK + name)


def expired(line, now):
    m = _EXPIRY.search(line)
    return bool(m) and m.group(1) <= now


class Peer(object):

    def __init__(self, module, clock=time.time):
        self.module = module
        self.p = module.params
        self.clock = clock

    # ---------------------------------------------------------------- puller
    def key_dir(self):
        return os.path.join(self.p["state_dir"], "%s.peer" % self.p["name"])

    def puller(self):
        p = self.p
        kdir = self.key_dir()
        key = os.path.join(kdir, "id_ed25519")
        if p["state"] == "absent":
            there = os.path.isdir(kdir)
            if there and not self.module.check_mode:
                shutil.rmtree(kdir)
            return {"changed": there, "key": key}
        if not p["peer_address"]:
            raise PeerError("side=puller needs peer_address (the seeder's address)")
        out = {"key": key, "source_address": source_address(p["peer_address"])}
        if os.path.isfile(key) and os.path.isfile(key + ".pub"):
            with open(key + ".pub") as fh:
                out.update(changed=False, public_key=fh.read().strip())
            return out
        out["changed"] = True
        if self.module.check_mode:
            return out
        sglang_weights.make_state_dir(p["state_dir"])
        if os.path.lexists(kdir):
            shutil.rmtree(kdir)
        os.mkdir(kdir, 0o700)
        keygen = self.module.get_bin_path("ssh-keygen", required=True)
        argv = [keygen, "-q", "-t", "ed25519", "-N", "", "-C", MARK + p["name"], "-f", key]
        rc, dummy, err = self.module.run_command(argv)
        if rc != 0:
            raise PeerError("ssh-keygen failed (rc=%d): %s" % (rc, err.strip()))
        with open(key + ".pub") as fh:
            out["public_key"] = fh.read().strip()
        return out

    # ---------------------------------------------------------------- seeder
    def rrsync(self):
        found = self.module.get_bin_path("rrsync") or next((p for p in RRSYNC_PATHS if os.access(p, os.X_OK)), None)
        if not found:
            raise PeerError("rrsync is not on this host: install rsync (Debian and Ubuntu ship rrsync with it)")
        return found

    def host_keys(self):
        keys = []
        for path in sorted(glob.glob("/etc/ssh/ssh_host_*_key.pub")):
            with open(path) as fh:
                parts = fh.read().split()
            if len(parts) >= 2:
                keys.append("%s %s" % (parts[0], parts[1]))
        return keys

    def seeder(self):
        p = self.p
        try:
            account = pwd.getpwnam(p["user"])
        except KeyError:
            raise PeerError("user %s does not exist on the seeder" % p["user"])
        ssh_dir = os.path.join(account.pw_dir, ".ssh")
        auth = os.path.join(ssh_dir, "authorized_keys")
        now = datetime.datetime.fromtimestamp(self.clock()).strftime("%Y%m%d%H%M")
        want = None
        if p["state"] == "present":
            for key in ("public_key", "path"):
                if not p[key]:
                    raise PeerError("side=seeder needs %s" % key)
            if not os.path.isdir(p["path"]):
                raise PeerError("%s is not a directory on the seeder" % p["path"])
            expires = datetime.datetime.fromtimestamp(self.clock() + p["ttl"]).strftime("%Y%m%d%H%M")
            want = access_line(p["name"], p["public_key"], p["from_address"], p["path"], self.rrsync(), expires)
            manifest, why = sglang_weights.read_manifest(p["state_dir"], p["name"])
            if manifest is None or os.path.normpath(manifest.get("path") or "") != os.path.normpath(p["path"]):
                raise PeerError("this host has no verified copy of %s in %s to give (%s): it fetches the model first"
                                % (p["name"], p["path"], why or "its manifest is for %s" % manifest.get("path")))
        lock_path = os.path.join(p["state_dir"], "fanout.lock") if os.path.isdir(p["state_dir"]) else None
        lock_fd = None
        if lock_path and not self.module.check_mode:
            lock_fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
        try:
            try:
                with open(auth) as fh:
                    lines = fh.read().splitlines()
            except FileNotFoundError:
                lines = []
            key = _KEY.match((p["public_key"] or "").strip())
            key_body = key.group(2) if key else None
            keep, removed = [], 0
            for line in lines:
                if ours(line) and line != want:
                    # ours and expired, or ours for this model and this key (replaced by want, or removed); other
                    # pullers' keys for the same model stay (several hosts may copy from this one at once)
                    if expired(line, now) or (ours(line, p["name"]) and (key_body is None or key_body in line.split())):
                        removed += 1
                        continue
                if line in keep and line == want:
                    continue
                keep.append(line)
            changed = removed > 0
            if want is not None and want not in keep:
                keep.append(want)
                changed = True
            out = {"changed": changed, "removed": removed}
            if want is not None:
                out["host_keys"] = self.host_keys()
                out["manifest"] = {"files": sglang_weights.listing_of_manifest(manifest), "source": manifest["source"]}
            if changed and not self.module.check_mode:
                self.write(ssh_dir, auth, keep, account)
            return out
        finally:
            if lock_fd is not None:
                os.close(lock_fd)

    @staticmethod
    def write(ssh_dir, auth, lines, account):
        if not os.path.isdir(ssh_dir):
            os.mkdir(ssh_dir, 0o700)
            os.chown(ssh_dir, account.pw_uid, account.pw_gid)
        tmp = "%s.eagle-deploy.%d.tmp" % (auth, os.getpid())
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write("".join(line + "\n" for line in lines))
            os.fchown(fh.fileno(), account.pw_uid, account.pw_gid)
            os.fchmod(fh.fileno(), 0o600)
        os.rename(tmp, auth)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            side=dict(type="str", required=True, choices=["puller", "seeder"]),
            name=dict(type="str", required=True),
            state=dict(type="str", default="present", choices=["present", "absent"]),
            state_dir=dict(type="path", default="/var/lib/eagle-deploy/models"),
            peer_address=dict(type="str"),
            public_key=dict(type="str"),
            from_address=dict(type="str"),
            path=dict(type="path"),
            user=dict(type="str", default="root"),
            ttl=dict(type="int", default=86400),
        ),
        supports_check_mode=True,
    )
    if not sglang_proc.safe_name(module.params["name"]):
        module.fail_json(msg="name %r: use letters, digits, '.', '_' and '-' only" % module.params["name"])
    if module.params["ttl"] < 60:
        module.fail_json(msg="ttl must be at least 60 s (got %d)" % module.params["ttl"])
    peer = Peer(module)
    try:
        result = peer.puller() if module.params["side"] == "puller" else peer.seeder()
    except (PeerError, sglang_proc.UntrustedState, OSError) as e:
        module.fail_json(msg="%s (%s side, model %s)" % (e, module.params["side"], module.params["name"]))
    module.exit_json(**result)


if __name__ == "__main__":
    main()

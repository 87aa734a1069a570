"""library/sglang_model_peer.py: the seeder's authorized_keys line (read-only rrsync on one directory, from one
address, until it expires), kept once, removed again with expired ones and other pullers' lines left alone; the
puller's key removed. A temporary home, no ssh-keygen (no process)."""

from __future__ import annotations

import importlib.util
import json
import os
import pwd
import stat

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from module_harness import ExitJson, FailJson
from module_harness import exit_json as _exit_json
from module_harness import fail_json as _fail_json

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("sglang_model_peer", os.path.join(REPO, "library", "sglang_model_peer.py"))
peer = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(peer)

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPuller1xyz eagle-deploy-fanout:m"
KEY2 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPuller2xyz eagle-deploy-fanout:m"
NOW = 1796400000.0  # 2026-12-04 (the expiry is in local time, as sshd reads it)


@pytest.fixture
def seeder(tmp_path, monkeypatch):
    home = tmp_path / "root"
    home.mkdir()
    state = tmp_path / "state"
    state.mkdir()
    model = tmp_path / "models" / "m"
    model.mkdir(parents=True)
    (state / "m.manifest.json").write_text(json.dumps({
        "version": 1, "name": "m", "path": str(model), "files": {"config.json": {
            "size": 3, "sha256": "ab", "git_sha1": "cd", "mtime_ns": 1, "ino": 2}},
        "source": {"kind": "hub", "repo": "o/m", "revision": "main", "commit": "c" * 40}}))
    real = pwd.getpwnam("root")
    monkeypatch.setattr(peer.pwd, "getpwnam", lambda name: pwd.struct_passwd(
        (real.pw_name, "x", os.getuid(), os.getgid(), "", str(home), "/bin/sh")))
    monkeypatch.setattr(peer.Peer, "rrsync", lambda self: "/usr/bin/rrsync")
    monkeypatch.setattr(peer.Peer, "host_keys", lambda self: ["ssh-ed25519 AAAAhostkey"])
    return {"home": home, "state": str(state), "model": str(model),
            "auth": home / ".ssh" / "authorized_keys"}


def run(monkeypatch, check=False, **args):
    monkeypatch.setattr(basic.AnsibleModule, "exit_json", _exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", _fail_json)
    monkeypatch.setattr(peer.Peer, "__init__", lambda self, module, clock=None: (
        setattr(self, "module", module), setattr(self, "p", module.params), setattr(self, "clock", lambda: NOW))[0])
    if check:
        args["_ansible_check_mode"] = True
    with patch_module_args(args):
        peer.main()


def grant(monkeypatch, s, key=KEY, **kw):
    args = dict(side="seeder", name="m", public_key=key, from_address="10.0.0.12", path=s["model"],
                state_dir=s["state"])
    args.update(kw)
    with pytest.raises(ExitJson) as e:
        run(monkeypatch, **args)
    return e.value.args[0]


def test_the_seeder_lets_one_key_read_one_directory_with_rrsync_from_one_address_until_it_expires(seeder, monkeypatch):
    out = grant(monkeypatch, seeder)
    assert out["changed"] and out["host_keys"] == ["ssh-ed25519 AAAAhostkey"]
    assert out["manifest"] == {"files": [{"path": "config.json", "size": 3, "sha256": "ab", "git_sha1": "cd"}],
                               "source": {"kind": "hub", "repo": "o/m", "revision": "main", "commit": "c" * 40}}
    (line,) = seeder["auth"].read_text().splitlines()
    assert line.startswith('restrict,from="10.0.0.12",expiry-time="')
    assert line.endswith(',command="/usr/bin/rrsync -ro %s" ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPuller1xyz '
                         'eagle-deploy-fanout:m' % seeder["model"])
    assert stat.S_IMODE(os.stat(seeder["auth"]).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(seeder["home"] / ".ssh").st_mode) == 0o700
    assert not grant(monkeypatch, seeder)["changed"]  # the same line again: nothing to do
    assert len(seeder["auth"].read_text().splitlines()) == 1


def test_a_revoke_removes_its_own_line_and_expired_ones_and_leaves_the_operators_and_other_pullers(seeder, monkeypatch):
    seeder["home"].joinpath(".ssh").mkdir(mode=0o700)
    mine = "ssh-ed25519 AAAAoperator admin@laptop"
    stale = ('restrict,expiry-time="202001010000",command="/usr/bin/rrsync -ro /x" ssh-ed25519 AAAAold '
             'eagle-deploy-fanout:other')
    seeder["auth"].write_text(mine + "\n" + stale + "\n")
    grant(monkeypatch, seeder)
    grant(monkeypatch, seeder, key=KEY2, from_address="10.0.0.13")
    lines = seeder["auth"].read_text().splitlines()
    assert lines[0] == mine and stale not in lines and len(lines) == 3
    with pytest.raises(ExitJson) as e:
        run(monkeypatch, side="seeder", name="m", state="absent", public_key=KEY, state_dir=seeder["state"])
    assert e.value.args[0]["changed"] and e.value.args[0]["removed"] == 1
    lines = seeder["auth"].read_text().splitlines()
    assert lines[0] == mine and len(lines) == 2 and "AAAAC3NzaC1lZDI1NTE5AAAAIPuller2xyz" in lines[1]


def test_a_seeder_without_a_verified_copy_gives_nothing(seeder, monkeypatch):
    os.unlink(os.path.join(seeder["state"], "m.manifest.json"))
    with pytest.raises(FailJson) as e:
        run(monkeypatch, side="seeder", name="m", public_key=KEY, from_address="10.0.0.12", path=seeder["model"],
            state_dir=seeder["state"])
    assert "no verified copy of m" in e.value.args[0]["msg"]
    assert not seeder["auth"].exists()


def test_check_mode_writes_no_line(seeder, monkeypatch):
    with pytest.raises(ExitJson) as e:
        run(monkeypatch, check=True, side="seeder", name="m", public_key=KEY, from_address="10.0.0.12",
            path=seeder["model"], state_dir=seeder["state"])
    assert e.value.args[0]["changed"] and not seeder["auth"].exists()


def test_a_line_that_could_break_out_of_its_options_is_refused():
    with pytest.raises(peer.PeerError, match="quotes"):
        peer.access_line("m", KEY, '10.0.0.1",command="sh', "/d", "/usr/bin/rrsync", "202701010000")
    with pytest.raises(peer.PeerError, match="not an SSH public key"):
        peer.access_line("m", "hello", "10.0.0.1", "/d", "/usr/bin/rrsync", "202701010000")
    assert "-ro '/data/my model'" in peer.access_line("m", KEY, "", "/data/my model", "/usr/bin/rrsync", "202701010000")


def test_the_pullers_key_is_removed_with_its_directory(tmp_path, monkeypatch):
    kdir = tmp_path / "state" / "m.peer"
    kdir.mkdir(parents=True)
    (kdir / "id_ed25519").write_text("private")
    with pytest.raises(ExitJson) as e:
        run(monkeypatch, side="puller", name="m", state="absent", state_dir=str(tmp_path / "state"))
    assert e.value.args[0]["changed"] and not kdir.exists()

"""Unit tests for sglang_info's look beyond the install (module_utils/sglang_host_look.py, and the module's patch, args_check
and unit options): fake virtualenvs with SGLang's real 0.5.23 option sources, a fake systemctl, no processes."""

from __future__ import annotations

import hashlib
import json
import sys

import pytest

from ansible.module_utils import basic, early_init_plan, sglang_host_look
from ansible.module_utils.testing import patch_module_args
from ansible.module_utils.sglang_unit_facts import unit_name

from module_harness import ExitJson, FailJson
from module_harness import exit_json as _exit_json
from module_harness import fail_json as _fail_json
from test_sglang_args_check import SERVER_ARGS, _config, _venv, sa, sac, sglang_root  # noqa: F401 - fixtures too
from test_sglang_info import run_module, sglang_info

PATCH = {"class_name": "EAGLEWorkerV2", "method": "__init__", "attributes": {"spec_disable_batch_threshold": "0"},
         "state": "present"}
HERE = "%d.%d" % sys.version_info[:2]
EAGLE = b"class EAGLEWorkerV2:\n    def __init__(self, a):\n        self.a = a\n        super().__init__()\n"


def venv_with(tmp_path, source=EAGLE, python=HERE):
    venv = tmp_path / "venv"
    site = venv / "lib" / ("python" + python) / "site-packages"
    (site / "sglang" / "srt" / "speculative").mkdir(parents=True)
    (venv / "bin").mkdir()
    (venv / "bin" / "python").write_text("")
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\nversion = %s.4\n" % python)
    dist = site / "sglang-0.5.23.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.23\n\n")
    eagle = site / "sglang" / "srt" / "speculative" / "eagle_worker_v2.py"
    if source is not None:
        eagle.write_bytes(source)
    return str(venv), eagle


def look(monkeypatch, venv, **sections):
    return run_module(monkeypatch, venv=venv, **sections)


# --- patch -----------------------------------------------------------------------------------------------------------

def test_an_unpatched_file_is_not_in_place_and_says_what_the_patch_would_insert(tmp_path, monkeypatch):
    venv, eagle = venv_with(tmp_path)
    result = look(monkeypatch, venv, patch=PATCH)
    assert result["patch"]["in_place"] is False and result["patch"]["why"] == "the file would change"
    assert result["patch"]["inserted"] == ["spec_disable_batch_threshold"]
    assert result["patch"]["path"] == str(eagle)
    assert eagle.read_bytes() == EAGLE  # a look changes nothing


def test_a_file_the_patch_already_wrote_is_in_place_with_its_sha256(tmp_path, monkeypatch):
    venv, eagle = venv_with(tmp_path)
    planned = early_init_plan.plan(str(eagle), **PATCH)
    eagle.write_bytes(planned["new"])
    result = look(monkeypatch, venv, patch=PATCH)
    assert result["patch"]["in_place"] is True and "why" not in result["patch"]
    assert result["patch"]["sha256"] == hashlib.sha256(planned["new"]).hexdigest()
    # Other attributes than the ones written: not in place.
    other = dict(PATCH, attributes={"spec_disable_batch_threshold": "1"})
    assert look(monkeypatch, venv, patch=other)["patch"]["in_place"] is False


def test_state_absent_on_an_unpatched_file_is_in_place(tmp_path, monkeypatch):
    venv, _ = venv_with(tmp_path)
    assert look(monkeypatch, venv, patch=dict(PATCH, state="absent"))["patch"]["in_place"] is True


def test_a_venv_of_an_older_python_is_read_by_this_one(tmp_path, monkeypatch):
    """A controller newer than the venv (ansible-core 2.21 on 3.12, a rehearsal venv of 3.11) still keeps."""
    older = "3.%d" % (sys.version_info[1] - 1)
    venv, eagle = venv_with(tmp_path, python=older)
    eagle.write_bytes(early_init_plan.plan(str(eagle), **PATCH)["new"])
    assert look(monkeypatch, venv, patch=PATCH)["patch"]["in_place"] is True


def test_a_venv_of_a_newer_python_is_left_to_the_patch_module(tmp_path, monkeypatch):
    other = "3.%d" % (sys.version_info[1] + 1)
    venv, eagle = venv_with(tmp_path, python=other)
    eagle.write_bytes(early_init_plan.plan(str(eagle), **PATCH)["new"])
    result = look(monkeypatch, venv, patch=PATCH)
    assert result["patch"]["in_place"] is False
    assert other in result["patch"]["why"] and HERE in result["patch"]["why"]


def test_no_eagle_worker_v2_is_not_in_place(tmp_path, monkeypatch):
    venv, _ = venv_with(tmp_path, source=None)
    result = look(monkeypatch, venv, patch=PATCH)
    assert result["patch"] == {"path": None, "in_place": False, "why": "no eagle_worker_v2.py found"}


def test_a_damaged_block_is_left_to_the_patch_module_to_refuse(tmp_path, monkeypatch):
    planned = early_init_plan.plan  # the real patch makes the block; one marker is then removed
    venv, eagle = venv_with(tmp_path)
    text = planned(str(eagle), **PATCH)["new"]
    eagle.write_bytes(b"\n".join(line for line in text.split(b"\n") if b"# END eagle-deploy" not in line))
    result = look(monkeypatch, venv, patch=PATCH)
    assert result["patch"]["in_place"] is False and "would refuse" in result["patch"]["why"]
    assert "damaged managed block" in result["patch"]["why"]


# --- args_check ------------------------------------------------------------------------------------------------------

@pytest.fixture
def argcheck(tmp_path, sglang_root, monkeypatch):  # noqa: F811 - the fixture of test_sglang_args_check, by name
    """The argument check (method ast) as sglang_args_check runs it, and sglang_info's look with the same options."""
    python, _site = _venv(tmp_path, sglang_root)
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o755)
    _, config = _config(tmp_path)
    base = dict(python=python, args=dict(SERVER_ARGS), secret_args=["api-key"], config_refused="argv", method="ast",
                cache_dir=str(run_dir), config_file=config)
    monkeypatch.setattr(basic.AnsibleModule, "exit_json", _exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", _fail_json)

    def check(**args):
        with patch_module_args(dict(base, **args)):
            with pytest.raises((ExitJson, FailJson)) as exc:
                sac.main()
        return exc.value.args[0]

    def info(**args):
        with patch_module_args({"python": python, "args_check": dict(base, **args)}):
            with pytest.raises((ExitJson, FailJson)) as exc:
                sglang_info.main()
        return exc.value.args[0]

    return check, info


def test_the_look_reports_the_kept_verdict_of_the_same_inputs_without_reading_sglang(argcheck, monkeypatch):
    check, info = argcheck
    fresh = check()
    assert not fresh.get("failed") and fresh["cached"] is False, fresh
    for name in ("option_strings_from_tree", "config_refused_dests", "option_kinds"):
        monkeypatch.setattr(sa, name, None)  # a hit reads no SGLang source
    looked = info()["args_check"]
    assert looked["cached"] is True, looked.get("cache_miss")
    for key in ("checked_args", "config_refused_args", "config_argv", "config_file_in_place", "sglang_version",
                "eagle_worker_v2", "method"):
        assert looked[key] == fresh[key], key


def test_the_look_checks_nothing_fresh_when_no_verdict_was_kept_for_these_inputs(argcheck, monkeypatch):
    check, info = argcheck
    check()

    def never(*args, **kwargs):
        raise AssertionError("the look never checks fresh")

    for name in ("option_strings_from_tree", "config_refused_dests", "option_kinds"):
        monkeypatch.setattr(sa, name, never)
    # An option SGLang does not have: a fresh check refuses it; the look has no verdict for these inputs.
    looked = info(extra_args={"speculative-num-stepz": 3})["args_check"]
    assert looked["cached"] is False and looked["cache_miss"] == "extra_args changed", looked
    assert "config_argv" not in looked and "config_file_in_place" not in looked
    assert "not checked" in looked["msg"]


def test_a_secret_in_the_arguments_is_reported_for_the_check_to_refuse(argcheck):
    check, info = argcheck
    bad = dict(SERVER_ARGS, **{"hf-token": "x" * 20})
    refused = check(args=bad)
    assert refused["failed"] is True and "secret in server arguments" in refused["msg"]
    result = info(args=bad)
    assert not result.get("failed"), result
    assert result["args_check"]["cached"] is False and result["args_check"]["error"] == refused["msg"]


def test_a_name_that_is_no_plain_file_name_is_reported_not_followed(argcheck, tmp_path):
    _check, info = argcheck
    looked = info(name="../x")["args_check"]
    assert looked["cached"] is False and "may hold only letters" in looked["error"]
    bad = sglang_host_look.look_unit({"name": "../x", "run_dir": str(tmp_path), "launcher": "systemd",
                                 "unit_dir": str(tmp_path)}, FakeSystemctl(), booted=lambda: (True, None),
                                euid=lambda: 0, unit_dirs=[str(tmp_path)])
    assert bad["in_place"] is False and "no plain file name" in bad["why"]


# --- unit ------------------------------------------------------------------------------------------------------------

class FakeSystemctl(object):
    def __init__(self, **show):
        self.show = show
        self.calls = []

    def __call__(self, *args):
        self.calls.append(args)
        return 0, "".join("%s=%s\n" % kv for kv in self.show.items()), ""


def unit_look(tmp_path, text=None, booted=True, euid=0, launcher="auto", **show):
    unit_dir = tmp_path / "system"
    (unit_dir / "multi-user.target.wants").mkdir(parents=True, exist_ok=True)
    run_dir = tmp_path / "run"
    run_dir.mkdir(exist_ok=True)
    path = unit_dir / unit_name("sglang")
    facts = sglang_host_look.unit_facts("sglang", str(run_dir), str(unit_dir), sys.executable)
    if text is not None:
        path.write_text(text(facts) if callable(text) else text)
    systemctl = FakeSystemctl(**dict({"FragmentPath": str(path)}, **show))
    out = sglang_host_look.look_unit({"name": "sglang", "run_dir": str(run_dir), "launcher": launcher,
                                 "unit_dir": str(unit_dir)}, systemctl, booted=lambda: (booted, "no systemd"),
                                euid=lambda: euid, unit_dirs=[str(unit_dir)])
    return out, systemctl, str(path)


def ours(facts):
    return ("# Ansible managed\n# Written by eagle-deploy (role sglang_server, tasks/unit.yml).\n%s\n[Service]\n"
            % facts["deployment_line"])


def test_auto_without_systemd_or_root_is_detached_and_in_place_asking_nothing(tmp_path):
    for booted, euid in ((False, 0), (True, 1000)):
        out, systemctl, _ = unit_look(tmp_path, booted=booted, euid=euid)
        assert out == {"launcher": "detached", "in_place": True}
        assert systemctl.calls == []


def test_our_unit_loaded_and_enabled_is_in_place_with_its_text_sha256(tmp_path):
    out, systemctl, path = unit_look(tmp_path, text=ours, LoadState="loaded", UnitFileState="enabled",
                                     NeedDaemonReload="no")
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    assert out["launcher"] == "systemd" and out["in_place"] is True, out
    assert out["sha256"] == digest and out["unit_facts"]["path"] == path
    assert systemctl.calls and systemctl.calls[0][0] == "show"


@pytest.mark.parametrize("show, words", [
    ({"LoadState": "loaded", "UnitFileState": "disabled"}, "not enabled"),
    ({"LoadState": "loaded", "UnitFileState": "enabled", "NeedDaemonReload": "yes"}, "not loaded"),
    ({"LoadState": "not-found", "UnitFileState": "enabled"}, "not loaded"),
])
def test_our_unit_not_loaded_as_on_disk_or_not_enabled_is_not_in_place(tmp_path, show, words):
    out, _, _ = unit_look(tmp_path, text=ours, **show)
    assert out["in_place"] is False and words in out["why"], out


def test_a_foreign_unit_of_our_name_is_not_in_place_and_says_why(tmp_path):
    out, _, _ = unit_look(tmp_path, text="[Service]\nExecStart=/bin/true\n", LoadState="loaded", UnitFileState="enabled")
    assert out["in_place"] is False and "cannot be this deployment's unit" in out["why"], out


def test_no_unit_yet_is_not_in_place(tmp_path):
    out, _, _ = unit_look(tmp_path, LoadState="not-found")
    assert out["in_place"] is False and out["exists"] is False and out["sha256"] is None


def test_the_unit_option_goes_through_the_module_with_its_own_systemctl(tmp_path, monkeypatch):
    venv, _ = venv_with(tmp_path)
    monkeypatch.setattr(sglang_host_look, "systemd_here", lambda: (False, "no /run/systemd/system"))
    result = look(monkeypatch, venv, unit={"name": "sglang", "run_dir": str(tmp_path), "launcher": "detached"})
    assert result["unit"] == {"launcher": "detached", "in_place": True}
    assert result["_calls"] == []
    assert json.dumps(result)  # plain data

"""Unit tests for sglang_info's keep look (module_utils/sglang_host_look.py: look_keep, keep_options): whether
wait_for_model would keep the running server, asked of its own ModelWaiter in check mode, in the fake world of
module_harness (fake clock, launcher, HTTP and /proc: no process is spawned, nothing sleeps)."""

from __future__ import annotations

import os
import sys

import pytest

from ansible.module_utils import sglang_host_look, sglang_proc
from ansible.module_utils.sglang_run import ModelWaiter

from module_harness import module_exits, record_self_as_server, serve, stops, world, world_tools  # noqa: F401

COMMAND = [sys.executable, "-m", "sglang.launch_server"]
EAGLE = "/opt/sglang/venv/lib/python3.11/site-packages/sglang/srt/speculative/eagle_worker_v2.py"


class Module(object):
    """What look_keep uses of the look's AnsibleModule."""

    def __init__(self):
        self.no_log_values = set()

    def run_command(self, *args, **kwargs):
        raise AssertionError("the keep look of a detached server runs no command")

    def get_bin_path(self, *args, **kwargs):
        return None


def args_check(tmp_path, **extra):
    eagle = tmp_path / "eagle_worker_v2.py"
    if not eagle.exists():
        eagle.write_text("class EAGLEWorkerV2:\n    pass\n")
    out = {"cached": True, "config_argv": [], "eagle_worker_v2": str(eagle), "sglang_version": "0.5.23"}
    out.update(extra)
    return out


def spec_for(world, tmp_path, **extra):
    config = tmp_path / "sglang.yaml"
    if not config.exists():
        config.write_text('model-path: "/models/m"\n')
    spec = {"command": list(COMMAND), "config_path": str(config), "expected_version": "0.5.23",
            "log_dir": world.log_dir, "name": "sglang", "port": None, "program_dir": world.program_dir}
    spec.update(extra)
    return spec


def launched(world, tmp_path, spec, args, api_key=None):
    """Our server started through wait_for_model with the options the look derives for ``spec``: serving, healthy."""
    opts = sglang_host_look.keep_options(spec, args)
    secrets = {"api_key": api_key} if api_key else {}
    return serve(world, argv=opts["argv"], fingerprint_files=opts["fingerprint_files"],
                 fingerprint_data=opts["fingerprint_data"], **secrets)


@pytest.fixture
def ours(monkeypatch):
    """The fake world's server (a PID no process has) counts as the one we launched."""
    monkeypatch.setattr(sglang_proc, "why_not_ours", lambda state: None)


def look(world, spec, args, secrets=None, module=None):
    return sglang_host_look.look_keep(module or Module(), spec, dict(secrets or {}), args,
                                 waiter=lambda m: ModelWaiter(m, **world_tools(world)))


def test_argv_and_the_fingerprint_follow_from_the_argument_check_as_the_role_builds_them():
    spec = {"command": ["/v/bin/python", "-m", "sglang.launch_server"], "config_path": "/etc/sglang/s.yaml",
            "expected_version": "0.5.17"}
    opts = sglang_host_look.keep_options(spec, {"config_argv": ["--json-model-override-args", "{}"],
                                           "eagle_worker_v2": EAGLE, "sglang_version": "0.5.23"})
    assert opts["argv"] == ["/v/bin/python", "-m", "sglang.launch_server", "--config", "/etc/sglang/s.yaml",
                            "--json-model-override-args", "{}"]
    assert opts["fingerprint_files"] == ["/etc/sglang/s.yaml", EAGLE]
    assert opts["fingerprint_data"] == {"sglang_version": "0.5.23"} and opts["state"] == "started"
    # No eagle_worker_v2.py found and no version read: the config file alone, the version the role expects.
    bare = sglang_host_look.keep_options(spec, {"eagle_worker_v2": None, "sglang_version": None})
    assert bare["fingerprint_files"] == ["/etc/sglang/s.yaml"]
    assert bare["fingerprint_data"] == {"sglang_version": "0.5.17"}
    assert bare["argv"] == ["/v/bin/python", "-m", "sglang.launch_server", "--config", "/etc/sglang/s.yaml"]


def test_our_healthy_server_with_the_same_fingerprint_is_kept_and_nothing_is_touched(world, stops, module_exits, ours,
                                                                                       tmp_path):
    args = args_check(tmp_path)
    spec = spec_for(world, tmp_path)
    started = launched(world, tmp_path, spec, args)
    spawned, calls = len(world.spawned), world.http_calls
    out = look(world, spec, args)
    assert out["kept"] is True, out.get("why")
    assert out["pid"] == started["pid"] and out["fingerprint"] == started["fingerprint"]
    assert out["launcher"] == "detached" and "why" not in out
    assert len(world.spawned) == spawned and stops == [] and world.http_calls == calls + 1


@pytest.mark.parametrize("change, words", [
    (lambda spec, args: spec.update(command=COMMAND + ["--tp", "2"]), "fingerprint changed: argv"),
    (lambda spec, args: args.update(config_argv=["--enable-x"]), "fingerprint changed: argv"),
    (lambda spec, args: args.update(sglang_version="0.5.24"), "fingerprint changed: data sglang_version"),
    (lambda spec, args: spec.update(environment={"SGLANG_ENABLE_SPEC_V2": "0"}), "fingerprint changed: environment"),
    (lambda spec, args: spec.update(force_restart=True), "force_restart"),
])
def test_anything_the_server_depends_on_changed_is_not_kept_and_nothing_is_touched(world, stops, module_exits, ours,
                                                                                     tmp_path, change, words):
    args = args_check(tmp_path)
    spec = spec_for(world, tmp_path)
    launched(world, tmp_path, spec, args)
    spawned = len(world.spawned)
    change(spec, args)
    out = look(world, spec, args)
    assert out["kept"] is False and out["why"] == "would restart the server (%s)" % words, out
    assert len(world.spawned) == spawned and stops == []


def test_a_patched_file_changed_on_disk_is_not_kept(world, stops, module_exits, ours, tmp_path):
    args = args_check(tmp_path)
    spec = spec_for(world, tmp_path)
    launched(world, tmp_path, spec, args)
    with open(args["eagle_worker_v2"], "a") as fh:
        fh.write("# edited\n")
    out = look(world, spec, args)
    assert out["kept"] is False and out["why"].startswith("would restart the server (fingerprint changed: file ")


@pytest.mark.parametrize("change", ["edited", "missing", "group-writable"])
def test_an_installed_supervisor_program_that_is_not_this_trees_is_not_kept(world, stops, module_exits, ours, tmp_path,
                                                                            change):
    """The play's no-op proves nothing drifted: a supervisor program in program_dir that is not the one this tree ships
    (the copies in the module's payload) is not kept - the role's copy task then installs this one (no restart)."""
    args = args_check(tmp_path)
    spec = spec_for(world, tmp_path)
    launched(world, tmp_path, spec, args)
    spawned = len(world.spawned)
    path = os.path.join(world.program_dir, "eagle_deploy", "sglang_verdict.py")
    if change == "edited":
        with open(path, "a") as fh:
            fh.write("# an older eagle-deploy's\n")
    elif change == "missing":
        os.unlink(path)
    else:
        os.chmod(path, 0o664)
    out = look(world, spec, args)
    assert out["kept"] is False and "supervisor program" in out["why"] and "sglang_verdict.py" in out["why"], out
    assert len(world.spawned) == spawned and stops == []


def test_a_server_that_does_not_answer_health_is_not_kept(world, stops, module_exits, ours, tmp_path):
    args = args_check(tmp_path)
    spec = spec_for(world, tmp_path)
    launched(world, tmp_path, spec, args)
    world.health = lambda t: 503
    out = look(world, spec, args)
    assert out["kept"] is False and "not healthy" in out["why"], out
    assert stops == []


def test_no_server_recorded_is_not_kept(world, module_exits, tmp_path):
    args = args_check(tmp_path)
    out = look(world, spec_for(world, tmp_path), args)
    assert out["kept"] is False and out["why"] == "would start the server (not running)", out
    assert world.spawned == []


def test_our_server_without_its_supervisor_program_is_not_kept(world, stops, module_exits, ours, tmp_path):
    args = args_check(tmp_path)
    spec = spec_for(world, tmp_path)
    launched(world, tmp_path, spec, args)
    world.supervisors[-1].terminated = True  # killed: the run would put one back (--adopt)
    out = look(world, spec, args)
    assert out["kept"] is False and "without its supervisor program" in out["why"], out
    assert len(world.supervisors) == 1 and stops == []


def test_a_recorded_pid_that_another_program_now_has_is_a_refusal_not_a_keep(world, stops, module_exits, tmp_path):
    args = args_check(tmp_path)
    spec = spec_for(world, tmp_path)
    opts = sglang_host_look.keep_options(spec, args)
    state = record_self_as_server(world, fingerprint="old")
    state["start_time"] = state["start_time"] + 1  # this PID now names another process than the one recorded
    sglang_proc.write_state(world.log_dir, "sglang", state)
    out = look(world, spec, args)
    assert out["kept"] is False and out["why"].startswith("wait_for_model would refuse: pidfile "), out
    assert str(os.getpid()) in out["why"] and stops == [] and opts["argv"][0] == sys.executable


def test_without_a_kept_argument_verdict_the_server_is_not_asked(world, module_exits, tmp_path):
    def no_waiter(_module):
        raise AssertionError("asked wait_for_model without knowing argv")
    out = sglang_host_look.look_keep(Module(), spec_for(world, tmp_path), {}, {"cached": False}, waiter=no_waiter)
    assert out == {"kept": False, "why": "the argument check's verdict is not kept for these inputs"}


def test_options_wait_for_model_refuses_are_reported_and_the_secrets_are_masked(world, module_exits, tmp_path):
    module = Module()
    spec = spec_for(world, tmp_path, port="eighty")
    out = look(world, spec, args_check(tmp_path), secrets={"api_key": "sk-look-secret", "secret_environment":
                                                           {"HF_TOKEN": "hf_look_secret"}}, module=module)
    assert out["kept"] is False and out["why"].startswith("keep: ") and "port" in out["why"], out
    assert {"sk-look-secret", "hf_look_secret"} <= module.no_log_values
    del spec["command"]
    out = look(world, spec, args_check(tmp_path))
    assert out["kept"] is False and "command" in out["why"], out


def test_the_api_key_goes_to_the_health_check_and_is_masked(world, stops, module_exits, ours, tmp_path):
    args = args_check(tmp_path)
    key = "sk-keep-" + os.urandom(4).hex()
    (tmp_path / "sglang.yaml").write_text('model-path: "/models/m"\napi-key: "%s"\n' % key)
    os.chmod(tmp_path / "sglang.yaml", 0o600)
    spec = spec_for(world, tmp_path)
    seen = []
    health = world.http

    def http(url, headers, timeout):
        seen.append(headers.get("Authorization"))
        return health(url, headers, timeout)
    world.http = http
    launched(world, tmp_path, spec, args, api_key=key)
    module = Module()
    out = sglang_host_look.look_keep(module, spec, {"api_key": key}, args,
                                waiter=lambda m: ModelWaiter(m, **world_tools(world)))
    assert out["kept"] is True, out.get("why")
    assert seen[-1] == "Bearer " + key and key in module.no_log_values

"""The plan (keep / restart, a later step's ended launch) and the module/supervisor contract, as pure functions."""
from __future__ import annotations

import json

from ansible.module_utils import sglang_contract, sglang_plan

P = {"argv": ["python", "-m", "sglang.launch_server"], "environment": {}, "fingerprint_files": [],
     "fingerprint_data": {}, "run_as": None, "secret_environment": {}, "redact": [], "force_restart": False,
     "resume_attempt": None}


def opts(**kw):
    return dict(P, **kw)


def recorded(p, launcher="detached", attempt=3):
    parts, fp = sglang_plan.fingerprint(p, launcher)
    return {"fingerprint": fp, "fingerprint_parts": parts, "attempt": attempt}, parts, fp


def test_same_fingerprint_keeps_the_server():
    state, parts, fp = recorded(opts())
    assert sglang_plan.start_plan(opts(), state, True, fp, parts) == (sglang_plan.KEEP, None)


def test_a_changed_argument_restarts_and_names_what_changed():
    state, _, _ = recorded(opts())
    parts, fp = sglang_plan.fingerprint(opts(argv=["python", "-m", "sglang.launch_server", "--tp", "8"]), "detached")
    assert sglang_plan.start_plan(opts(), state, True, fp, parts) == (sglang_plan.RESTART, "fingerprint changed: argv")


def test_the_launcher_is_part_of_the_fingerprint():
    state, _, _ = recorded(opts(), launcher="detached")
    parts, fp = sglang_plan.fingerprint(opts(), "systemd")
    action, why = sglang_plan.start_plan(opts(), state, True, fp, parts)
    assert action == sglang_plan.RESTART and "launcher" in why


def test_force_restart_restarts_except_in_a_later_step_of_its_own_launch():
    state, parts, fp = recorded(opts())
    assert sglang_plan.start_plan(opts(force_restart=True), state, True, fp, parts) == (
        sglang_plan.RESTART, "force_restart")
    later = opts(force_restart=True, resume_attempt=3)
    assert sglang_plan.resuming(later, state, True)
    assert sglang_plan.start_plan(later, state, True, fp, parts) == (sglang_plan.KEEP, None)
    assert not sglang_plan.resuming(opts(force_restart=True, resume_attempt=2), state, True)


def test_a_server_not_ours_is_started():
    state, parts, fp = recorded(opts())
    assert sglang_plan.start_plan(opts(), state, False, fp, parts) == (sglang_plan.RESTART, "not running")
    assert sglang_plan.start_plan(opts(), None, False, fp, parts) == (sglang_plan.RESTART, "not running")


def test_a_later_step_takes_the_verdict_of_its_ended_attempt_only():
    p = opts(resume_attempt=3)
    assert sglang_plan.ended_between_steps(p, {"attempt": 3, "verdict": "stopped"})["verdict"] == "stopped"
    assert sglang_plan.ended_between_steps(p, {"attempt": 3, "verdict": "cuda_oom"})["verdict"] == "cuda_oom"
    assert sglang_plan.ended_between_steps(p, {"attempt": 3, "verdict": "ready"}) is None
    assert sglang_plan.ended_between_steps(p, {"attempt": 3, "verdict": None}) is None
    assert sglang_plan.ended_between_steps(p, {"attempt": 2, "verdict": "cuda_oom"}) is None  # an earlier attempt
    assert sglang_plan.ended_between_steps(opts(), {"attempt": 3, "verdict": "cuda_oom"}) is None
    assert sglang_plan.ended_between_steps(p, None) is None


def test_a_status_is_only_its_own_launch_s_or_attempt_s():
    st = {"launch": "abc", "attempt": 4, "verdict": "cuda_oom"}
    assert sglang_contract.status_of(st, token="abc") is st
    assert sglang_contract.status_of(st, token="def") is None  # another launch's verdict is never this one's
    assert sglang_contract.status_of(st, attempt=4) is st
    assert sglang_contract.status_of(st, attempt=3) is None
    assert sglang_contract.status_of(None, token="abc") is None
    assert sglang_contract.status_of(["not", "a", "dict"], attempt=4) is None


def test_the_supervisor_config_never_holds_the_api_key_and_carries_every_setting():
    p = dict(opts(), chdir=None, log_dir="/var/log/sglang", health_url="http://127.0.0.1:30000/health_generate",
             keep_attempts=20, timeout=1800, stop_timeout=30, log_tail_lines=40, api_key="k" * 32,
             health_interval=0.25, health_timeout=10.0, unhealthy_after=3, child_grace=2.0, settle_time=0.3,
             stall_timeout=900, poll_interval=0.1, serve_health_interval=10.0, serve_stuck_seconds=300.0,
             serve_stuck_action="report")
    cfg = sglang_contract.supervisor_config(p, "tok", {"PATH": "/usr/bin"}, ["s" * 20], {"path": "/etc/s.yaml",
                                            "key": "api-key"}, "fp", {"argv": "x"}, 30000, None, None)
    assert "k" * 32 not in json.dumps(cfg)
    assert cfg["api_key_file"] == {"path": "/etc/s.yaml", "key": "api-key"} and cfg["secrets"] == ["s" * 20]
    assert set(sglang_contract.SETTINGS) <= set(cfg["settings"]) and cfg["settings"]["extend_timeout"] == 960
    assert cfg["journal"] is False and cfg["unit"] is None and "events" not in cfg["settings"]
    unit = sglang_contract.supervisor_config(p, "tok", {}, [], None, "fp", {}, 30000, "sglang-x.service",
                                             ("/sys/fs/cgroup", "/eagle/x"), events=False)
    assert unit["journal"] is True and unit["cgroup"] == "/eagle/x" and unit["settings"]["events"] is False


def test_exit_statuses():
    assert sglang_contract.exit_status("cuda_oom", ready=False) == sglang_contract.EXIT_PERMANENT
    assert sglang_contract.exit_status("stalled", ready=False) == sglang_contract.EXIT_RESTARTABLE
    assert sglang_contract.exit_status("child_died", ready=True) == sglang_contract.EXIT_RESTARTABLE


def test_the_step_protocol_is_no_user_option_of_the_module():
    import yaml
    import wait_for_model as wfm
    documented = set(yaml.safe_load(wfm.DOCUMENTATION)["options"])
    spec = set(wfm.argument_spec())
    assert {"_step_time", "_resume_attempt"} <= spec - documented  # the action plugin's protocol, not in ansible-doc
    assert not {"step_time", "resume_attempt"} & (spec | documented)
    assert spec - documented == {"_step_time", "_resume_attempt"}  # every other option is documented

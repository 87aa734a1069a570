"""wait_for_model's result built from its executors' reports, without a module (module_utils/sglang_reports.py):
the reports in the order the run made them, ``changed`` when any says so, the last word on every other key, and a
failed executor's findings carried up with its exception. Also the frozen Settings and
the pure plan the run hands to its executors."""
from __future__ import annotations

import dataclasses

import pytest

from ansible.module_utils import sglang_plan, sglang_result_schema
from ansible.module_utils.sglang_input_checks import WaitError
from ansible.module_utils.sglang_reports import build_result, findings, reports_of
from ansible.module_utils.sglang_settings import Settings


def test_a_restart_s_result_is_built_from_its_reports_in_order():
    reports = [
        {"launcher": "detached"},                        # validate (Settings.found)
        {"lock_wait": 0.0},                               # the run lock
        {"fingerprint": "f" * 64},
        {"restart_reason": "fingerprint changed: argv"},
        {"changed": True},
        {"stopped": {"signalled": [41], "killed": [], "remaining": []}},   # the old server's stop
        {"gpu_release": {"below_mib": 1024, "seconds": 0.5, "polls": 2, "gpus": []}},
        {"changed": True, "tree_tracking": "session", "supervisor_pid": 77,  # the launch, its verdict included
         "pid": 42, "log_path": "/var/log/sglang/s.1.log", "attempt": 2, "elapsed": 12.5, "phase": "ready",
         "phases": [], "shards": None, "log_tail": ["ready"]},
    ]
    result = build_result(reports)
    assert result == {"changed": True, "launcher": "detached", "lock_wait": 0.0, "fingerprint": "f" * 64,
                      "restart_reason": "fingerprint changed: argv",
                      "stopped": {"signalled": [41], "killed": [], "remaining": []},
                      "gpu_release": {"below_mib": 1024, "seconds": 0.5, "polls": 2, "gpus": []},
                      "tree_tracking": "session", "supervisor_pid": 77, "pid": 42,
                      "log_path": "/var/log/sglang/s.1.log", "attempt": 2, "elapsed": 12.5, "phase": "ready",
                      "phases": [], "shards": None, "log_tail": ["ready"]}
    assert sglang_result_schema.problems(result) == []
    assert reports[0] == {"launcher": "detached"}  # the reports themselves are left as they were


def test_nothing_changed_unless_a_report_says_so_and_the_last_word_counts():
    assert build_result([]) == {"changed": False}
    assert build_result([{"changed": False, "pid": 1}, {"pid": 2, "restart_reason": "not running"},
                         {"restart_reason": None}]) == {"changed": False, "pid": 2, "restart_reason": None}
    # a later report never takes back a change
    assert build_result([{"changed": True}, {"changed": False}])["changed"] is True


def test_the_stop_before_a_launch_and_the_stop_after_its_failure_are_two_keys():
    """``stopped``: what stopping the previous server did; ``stopped_after_failure``: the failed new one's stop."""
    result = build_result([{"stopped": {"signalled": [41], "killed": [], "remaining": []}},
                           {"failed": True, "stopped_after_failure": {"unit": "sglang-a.service", "how": "systemctl stop"}}])
    assert result["stopped"]["signalled"] == [41] and result["stopped_after_failure"]["how"] == "systemctl stop"


def test_a_failed_executor_s_findings_go_up_with_its_exception_innermost_last():
    def inner():
        with findings() as report:
            report["stopped"] = {"signalled": [9], "killed": [], "remaining": [9]}
            raise WaitError("could not stop our server: PIDs [9] survived SIGKILL")

    def outer():
        with findings() as report:
            report["restart_reason"] = "force_restart"
            report.update(inner())

    with pytest.raises(WaitError) as caught:
        outer()
    reports = reports_of(caught.value)
    assert reports == [{"restart_reason": "force_restart"},
                       {"stopped": {"signalled": [9], "killed": [], "remaining": [9]}}]
    assert build_result([{"lock_wait": 0.1}] + reports) == {
        "changed": False, "lock_wait": 0.1, "restart_reason": "force_restart",
        "stopped": {"signalled": [9], "killed": [], "remaining": [9]}}
    assert reports_of(WaitError("no findings")) == []


def _settings(**over):
    p = {"name": "s", "force_restart": False, "resume_attempt": None}
    got = dict(p=p, check=False, launcher="detached", port=30000, run_dir="/run/sglang", fresh=False)
    got.update(over)
    return Settings(**got)


def test_the_settings_are_frozen_and_say_what_validation_found():
    s = _settings()
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.port = 1
    assert s.found() == {"launcher": "detached"}
    facts = {"unit_dir": "/etc/systemd/system"}
    assert _settings(launcher="systemd", unit="sglang-s.service", unit_facts=facts).found() == {
        "launcher": "systemd", "unit": "sglang-s.service", "unit_facts": facts}


def test_the_plan_is_made_from_the_settings_and_what_is_recorded_alone():
    p = _settings().p
    parts = {"argv": "a"}
    ours = sglang_plan.Recorded({"pid": 42, "attempt": 3, "fingerprint": "fp", "fingerprint_parts": parts}, True)
    assert sglang_plan.plan_start(p, ours, parts, "fp") == sglang_plan.Plan(sglang_plan.KEEP, None, False, parts, "fp")
    changed = sglang_plan.plan_start(p, ours, {"argv": "b"}, "fp2")
    assert (changed.action, changed.reason) == (sglang_plan.RESTART, "fingerprint changed: argv")
    assert sglang_plan.plan_start(p, sglang_plan.Recorded(None, False), parts, "fp").reason == "not running"
    later_step = dict(p, force_restart=True, resume_attempt=3)
    assert sglang_plan.plan_start(later_step, ours, parts, "fp").resuming is True
    assert sglang_plan.plan_start(later_step, ours, parts, "fp").action == sglang_plan.ATTACH  # its supervisor awaited

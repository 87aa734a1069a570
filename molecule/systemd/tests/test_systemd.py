"""Verify scenario `systemd`: the server under systemd (the role's systemd launcher) after converge, idempotence and
the ordered cases of cases.py (reboot, SSH drop mid-wait, kill -9 of a scheduler when serving and while loading,
stop.yml, units that are not this deployment's, a serving server whose health fails, systemctl stop while loading).

The cases recorded what they saw, sample by sample, in $MOLECULE_EPHEMERAL_DIRECTORY/systemd-cases/<case>.json;
the rest is read from the host as it is now (systemctl, /proc, sockets, HTTP from inside).
"""

from __future__ import annotations

import json
import re
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))


from tests.molecule_support import hostcheck  # noqa: E402 - importable once sys.path has the repository root

V = hostcheck.scenario_vars()
USER = V["sglang_install_user"]
KEY = V["sglang_server_api_key"]
PORT = V["sglang_server_port"]
RUN_DIR = hostcheck.RUN_DIR
CONFIG_DIR = hostcheck.role_default("sglang_install_config_dir")
UNIT = "sglang-sglang.service"
UNIT_MARK = "# Written by eagle-deploy (role sglang_server, tasks/unit.yml). Changes here are replaced on its next run."
# The task of module_call.yml that failed: the role's check (tasks/unit.yml, before its template), or the module alone.
ROLE_CHECK = "Check the unit of this name and resolve the launcher (changes nothing)"
MODULE_CALL = "Call wait_for_model with the case's arguments"
BASE_URL = f"http://127.0.0.1:{PORT}"
CASES = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent")) / "systemd-cases"
# What kill -9 of one of its schedulers makes of a server (module_utils/sglang_log.py's classes).
KILL_CLASSES = ("child_died", "child_sigquit", "killed")
EXIT_RESTARTABLE, EXIT_PERMANENT = 69, 78  # the host watcher's exit statuses (docs/DESIGN.md, the contract)


def record(case):
    path = CASES / f"{case}.json"
    assert path.is_file(), f"{path}: the side_effect case {case} did not run (cases.py)"
    return json.loads(path.read_text())


def unit(host, name="sglang"):
    out = host.check_output(f"systemctl show sglang-{name}.service")
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def loading(sample):
    return "loading weights" in sample.get("StatusText", "")


# --------------------------------------------------------------------------- the main server, as the host runs it now
def test_unit_is_ours_enabled_notify_and_active(host):
    u = unit(host)
    assert (u["LoadState"], u["ActiveState"], u["SubState"]) == ("loaded", "active", "running")
    assert u["UnitFileState"] == "enabled"
    assert u["Type"] == "notify"
    assert u["Restart"] == "on-failure"
    assert str(EXIT_PERMANENT) in u["RestartPreventExitStatus"].split()
    assert u["KillMode"] == "control-group"
    assert u["FragmentPath"] == f"/etc/systemd/system/{UNIT}"
    f = host.file(u["FragmentPath"])
    assert (f.user, f.group, f.mode) == ("root", "root", 0o644)


def test_the_unit_file_is_the_roles_template_and_records_its_deployment(host):
    """roles/sglang_server/templates/sglang.service.j2, written by tasks/unit.yml: ansible_managed, the mark and the
    deployment line (name + the run dir's hash, as the module computes it) in its header; loaded as it is on disk."""
    text = host.file(f"/etc/systemd/system/{UNIT}").content_string
    header = text.split("\n[Unit]\n", 1)[0].splitlines()
    assert "# Ansible managed" in header, header
    assert UNIT_MARK in header, header
    deployment = [line for line in header if line.startswith("# eagle-deploy deployment: sglang-")]
    assert len(deployment) == 1 and deployment[0].endswith(f" run_dir={RUN_DIR}"), header
    assert "wait_for_model" not in text
    exec_start = next(line for line in text.splitlines() if line.startswith("ExecStart="))
    # the supervisor program the role installed (tasks/program.yml), run as a directory
    assert exec_start.endswith(f' "-I" "-B" "{RUN_DIR}/supervisor" "{RUN_DIR}" "sglang"'), exec_start
    assert unit(host)["NeedDaemonReload"] == "no"


def test_status_text_says_ready(host):
    text = unit(host)["StatusText"]
    assert "ready" in text and "loading" not in text and "failed" not in text, text


def test_main_pid_is_the_watcher_as_root_and_the_server_runs_as_the_service_user(host, procs):
    u = unit(host)
    main = int(u["MainPID"])
    watcher = next(p for p in procs if p["pid"] == main)
    assert watcher["user"] == "root"
    assert watcher["argv"][1:4] == ["-I", "-B", f"{RUN_DIR}/supervisor"], watcher["argv"]
    assert watcher["argv"][-2:] == [RUN_DIR, "sglang"]
    status = json.loads(host.file(f"{RUN_DIR}/sglang.status.json").content_string)
    assert status["watcher_pid"] == main
    assert status["verdict"] == "ready"
    tree = hostcheck.server_tree(procs, status["server_pid"])
    assert {p["user"] for p in tree} == {USER}
    assert len(tree) >= 3, f"leader + 2 schedulers + detokenizer expected: {tree}"
    # The server descends from the watcher (the unit's main process), nothing else started it.
    assert {p["pid"] for p in tree} <= {p["pid"] for p in hostcheck.server_tree(procs, main)}


def test_no_api_key_on_any_command_line(procs):
    assert procs
    assert not [p for p in procs if any(KEY in a for a in p["argv"])]


def test_api_key_is_in_no_journal_line_and_only_in_the_servers_config_file(host):
    """The unit's output goes to the journal too: the watcher redacts it. The key it needs (health requests) it reads
    from the server's 0600 --config file, the key's one copy on disk: no file of the run dir, the log dir or the
    unit dir holds it (the watcher's config neither)."""
    found = host.run(f"journalctl -b --no-pager | grep -cF -e {KEY}")
    assert (found.rc, found.stdout.strip()) == (1, "0"), "the key reached the journal"  # grep: 1 = no match
    journal = host.check_output("journalctl -b -u sglang-sglang.service --no-pager")
    assert "server_args=" in journal  # not vacuous: the server's own lines are there
    holders = host.check_output(f"grep -rlF -e {KEY} {RUN_DIR} /var/log/sglang /etc/systemd/system || true").split()
    assert holders == [], holders
    config = host.file(f"{V.get('sglang_server_config_dir', '/etc/sglang')}/{V.get('sglang_server_name', 'sglang')}.yaml")
    assert KEY in config.content_string and config.mode == 0o600


def test_health_and_generate(host):
    assert hostcheck.http_status(host, f"{BASE_URL}/health_generate")[0] == 200
    request = {"text": "Hello", "sampling_params": {"max_new_tokens": 4}}
    code, text = hostcheck.http_status(host, f"{BASE_URL}/generate", KEY, "POST", request)
    assert code == 200 and '"text"' in text


def test_the_cases_left_the_main_server_alone(host):
    """The other deployments' cases (ssh_drop, crash, crash_load) came after the reboot case: same unit run."""
    r = record("reboot")
    u = unit(host)
    assert u["InvocationID"] == r["after_rerun"]["InvocationID"]
    assert int(u["MainPID"]) == r["after_rerun"]["MainPID"]
    assert int(u["NRestarts"]) == 0


# --------------------------------------------------------------------------- reboot: podman restart of the host
def test_reboot_the_unit_is_activating_with_the_phase_while_loading():
    samples = record("reboot")["samples"]
    during = [s for s in samples if s.get("ActiveState") == "activating" and loading(s)]
    assert during, f"no sample showed the unit activating while loading weights: {samples}"
    # The shard count moves in StatusText (6 shards in molecule.yml's emulator arguments).
    assert len({s["StatusText"] for s in during}) >= 2, [s["StatusText"] for s in during]
    assert any("/6 shards" in s["StatusText"] for s in during)


def test_reboot_health_generate_answers_only_once_the_unit_is_active():
    samples = record("reboot")["samples"]
    assert [s["health_generate"] for s in samples if loading(s) and s["health_generate"] == 200] == []
    active = [s for s in samples if s.get("ActiveState") == "active"]
    assert active, samples[-3:]
    # health is read after the unit's state: an active unit always has a server that answers.
    assert {s["health_generate"] for s in active} == {200}


def test_reboot_brought_the_server_back_without_a_restart_loop():
    r = record("reboot")
    assert r["after"]["ActiveState"] == "active"
    assert r["after"]["UnitFileState"] == "enabled"
    assert r["after"]["NRestarts"] == 0
    assert r["after"]["InvocationID"] != r["before"]["InvocationID"]
    assert r["status"]["verdict"] == "ready"


def test_reboot_rerun_of_the_playbook_is_a_no_op():
    r = record("reboot")
    assert r["rerun"]["rc"] == 0, r["rerun"]["tail"]
    assert r["rerun"]["recap"]["changed"] == 0, r["rerun"]["tail"]
    assert r["after_rerun"]["MainPID"] == r["after"]["MainPID"]
    assert r["after_rerun"]["InvocationID"] == r["after"]["InvocationID"]
    assert r["status_after_rerun"]["attempt"] == r["status"]["attempt"]
    assert r["health_after_rerun"] == 200


# --------------------------------------------------------------------------- SSH connection cut mid-wait
def test_ssh_drop_cut_a_connection_that_was_waiting_on_a_loading_server():
    r = record("ssh_drop")
    assert r["mid"]["unit"]["ActiveState"] == "activating"
    assert loading(r["mid"]["unit"])
    assert r["drop"]["killed_sshd"] and r["drop"]["modules"]
    # The first run lost its host: Ansible saw the connection go (unreachable, or the task failed with it).
    assert r["run1"]["rc"] != 0, r["run1"]["tail"]
    assert r["run1"]["recap"] is None or r["run1"]["recap"]["unreachable"] + r["run1"]["recap"]["failed"] >= 1
    assert r["run1"]["result"] is None, "run 1 recorded a wait result: its wait was not cut"


def test_ssh_drop_the_server_kept_loading_in_its_unit():
    r = record("ssh_drop")
    mid, after = r["mid"]["unit"], r["after_drop"]["unit"]
    assert after["InvocationID"] == mid["InvocationID"]
    assert after["MainPID"] == mid["MainPID"]
    assert after["NRestarts"] == 0
    assert after["ActiveState"] in ("activating", "active")
    assert r["after_drop"]["status"]["attempt"] == r["mid"]["status"]["attempt"]


def test_ssh_drop_the_rerun_picked_up_the_same_attempt_and_its_wait_completed():
    r = record("ssh_drop")
    run2, mid = r["run2"], r["mid"]
    assert run2["rc"] == 0, run2["tail"]
    result = run2["result"]
    assert result is not None, run2["tail"]
    assert not result.get("failed") and not result.get("pending")
    assert result["changed"] is False, result  # no (re)start: it waited on the running attempt
    assert result["launcher"] == "systemd"
    assert result["attempt"] == mid["status"]["attempt"]
    final = r["final"]
    assert (final["ActiveState"], final["health_generate"]) == ("active", 200)
    assert (final["MainPID"], final["InvocationID"], final["NRestarts"]) == \
        (mid["unit"]["MainPID"], mid["unit"]["InvocationID"], 0)
    assert r["status_final"]["attempt"] == mid["status"]["attempt"]
    assert r["status_final"]["verdict"] == "ready"
    # The server became ready after the re-run began: the re-run's wait is what saw it through.
    assert final["ActiveEnterTimestampMonotonic"] > run2["started_monotonic_us"]


# --------------------------------------------------------------------------- stop.yml
def test_stop_left_the_unit_inactive_and_nothing_running():
    r = record("stop")
    assert r["stop"]["rc"] == 0, r["stop"]["tail"]
    assert r["before"]["procs"], "nothing ran before the stop"
    assert r["after"]["ActiveState"] == "inactive"
    assert r["after"]["UnitFileState"] != "enabled", "a stopped server would come back at the next boot"
    assert not any(r["alive"].values()), r["alive"]
    assert r["tree_after"]["procs"] == []
    assert r["listening"] is False
    assert r["health"] == 0


def test_stopped_unit_is_still_inactive_and_its_port_free(host):
    u = unit(host, "slow")
    assert u["ActiveState"] == "inactive"
    assert not host.socket("tcp://127.0.0.1:30001").is_listening


# --------------------------------------------------------------------------- kill -9 of a scheduler when serving
def test_crash_each_kill_while_serving_was_restarted_until_the_start_limit():
    r = record("crash")
    kills, final = r["kills"], r["final"]
    assert len(kills) >= 2, "a restartable crash was not restarted"
    # Every kill made the unit try a restart (NRestarts counts the last one too, which the start limit refused).
    assert [k["unit"]["NRestarts"] for k in kills] == list(range(len(kills)))
    assert final["NRestarts"] == len(kills) <= final["StartLimitBurst"]
    assert final["ActiveState"] == "failed"
    # systemd 252 keeps the last run's result (exit-code) when the start limit refuses the restart.
    assert final["Result"] in ("exit-code", "start-limit-hit")
    assert final["ExecMainStatus"] == EXIT_RESTARTABLE
    assert any("Start request repeated too quickly" in line for line in r["journal"]), r["journal"][-10:]


def test_crash_no_restart_loop_after_the_limit(host):
    r = record("crash")
    settle = r["settle"]
    assert settle[-1]["t"] >= 25
    assert {(s["ActiveState"], s["NRestarts"], s["InvocationID"]) for s in settle} == \
        {("failed", r["failed"]["NRestarts"], r["failed"]["InvocationID"])}
    u = unit(host, "crash")
    assert (u["ActiveState"], int(u["NRestarts"]), u["InvocationID"]) == \
        ("failed", r["failed"]["NRestarts"], r["failed"]["InvocationID"])
    assert r["tree_after"]["procs"] == []
    assert not host.socket("tcp://127.0.0.1:30002").is_listening


def test_crash_status_names_our_class():
    r = record("crash")
    assert r["status"]["verdict"] in KILL_CLASSES, r["status"]
    assert r["status"]["verdict"] in r["final"]["StatusText"], r["final"]["StatusText"]


# --------------------------------------------------------------------------- kill -9 of a scheduler while loading
def test_crash_load_failed_at_once_with_exit_78_and_was_never_restarted(host):
    r = record("crash_load")
    assert r["unit_at_kill"]["ActiveState"] == "activating" and loading(r["unit_at_kill"])
    final = r["final"]
    assert (final["ActiveState"], final["Result"], final["ExecMainStatus"]) == ("failed", "exit-code", EXIT_PERMANENT)
    assert final["NRestarts"] == 0
    assert {(s["ActiveState"], s["NRestarts"]) for s in r["settle"]} == {("failed", 0)}
    u = unit(host, "crashload")
    assert (u["ActiveState"], u["NRestarts"], u["InvocationID"]) == ("failed", "0", final["InvocationID"])
    assert r["tree_after"]["procs"] == []


def test_crash_load_status_and_the_playbook_name_our_class():
    r = record("crash_load")
    cls = r["status"]["verdict"]
    assert cls in KILL_CLASSES, r["status"]
    assert cls in r["final"]["StatusText"]
    assert r["status"]["report"]["exit_status"] == EXIT_PERMANENT
    assert not any("Scheduled restart job" in line for line in r["journal"]), r["journal"][-10:]
    assert r["converge"]["rc"] != 0
    assert f"crash class: {cls}" in r["converge"]["tail"], r["converge"]["tail"][-2000:]


@pytest.mark.parametrize("name", ["sglang", "slow", "crash", "crashload"])
def test_no_zombies_and_no_stray_server(host, procs, name):
    assert not [p for p in procs if p["state"] == "Z"], "zombies left"
    running = [p for p in procs if any(f"{CONFIG_DIR}/{name}.yaml" in a for a in p["argv"])]
    if name == "sglang":
        assert running
    else:
        assert running == [], f"{name}: {running}"


# --------------------------------------------------------------------------- units that are not this deployment's
def refused(run, *named, by=ROLE_CHECK):
    """A wait_for_model result that refused before anything: failed, each named thing in its message; by the role's
    check (before its template: nothing of the unit written) or by the module alone."""
    res = run["result"]
    assert res.get("failed") is True, res
    assert res.get("failed_task") == by, res.get("failed_task")
    assert "Nothing was stopped or launched." in res["msg"], res["msg"]
    for what in named:
        assert what in res["msg"], (what, res["msg"])
    assert not res.get("stopped"), res


def test_second_deployment_of_the_name_is_refused_in_check_mode_and_for_real():
    r = record("second_deployment")
    for run in (r["check"], r["run"]):
        refused(run, f"/etc/systemd/system/{UNIT}", RUN_DIR, "choose another name")
    refused(r["module"], f"/etc/systemd/system/{UNIT}", RUN_DIR, "choose another name", by=MODULE_CALL)


def test_second_deployment_left_the_first_serving_and_untouched():
    r = record("second_deployment")
    assert r["before"]["unit"]["ActiveState"] == "active" and r["before"]["health"] == 200
    assert r["after"] == r["before"]  # same MainPID, InvocationID, NRestarts, unit file (sha256, mode), answer
    assert r["run_dir2"] == []  # no watcher program, no config, no run state of the second one
    assert r["listening"] is False  # nothing was launched on its port


@pytest.mark.parametrize("case", ["foreign_unit", "transient"])
def test_a_unit_of_the_name_we_did_not_write_is_refused_and_runs_on(case):
    r = record(case)
    path = r.get("path") or r["before"]["unit"]["FragmentPath"]
    if case == "transient":
        assert path == "/run/systemd/transient/sglang-transient.service"
    for run, by in ((r["run"], ROLE_CHECK), (r["module"], MODULE_CALL)):
        refused(run, path, "transient unit" if case == "transient" else "did not write", by=by)
    assert r["before"]["unit"]["ActiveState"] == "active"
    assert r["after"] == r["before"]  # same process, same invocation, same file; no unit of ours was written
    assert r["after"]["ours"] is None


def test_a_foreign_drop_in_is_refused_for_a_start_and_for_stop_yml():
    r = record("dropin")
    refused(r["run"], r["path"], "drop-in")
    refused(r["module"], r["path"], "drop-in", by=MODULE_CALL)
    assert r["stop"]["rc"] != 0 and r["path"] in r["stop"]["tail"], r["stop"]["tail"][-2000:]
    assert r["before"]["unit"]["ActiveState"] == "active" and r["before"]["health"] == 200
    assert r["after"] == r["before"]  # the server serves on, its unit and the drop-in unchanged


def test_a_distributions_harmless_drop_in_for_every_service_is_accepted_named_and_serves():
    r = record("vendor_dropin")
    assert r["start"]["rc"] == 0 and not r["start"]["result"].get("failed"), r["start"]["tail"][-2000:]
    assert r["serving"]["ActiveState"] == "active" and r["serving"]["health_generate"] == 200
    # systemd applies it to the unit (named through /usr/lib or, on a split-/usr search path, /lib)
    shipped = "/systemd/system/service.d/10-timeout-abort.conf"
    assert any(d.endswith(shipped) for d in r["dropins"]), r["dropins"]
    warning = re.sub(r"\s+", " ", r["start"]["tail"])
    assert shipped in warning and "accepted, it sets only Service.TimeoutStopFailureMode" in warning, warning[-2000:]
    assert r["stop"]["rc"] == 0 and r["after_stop"]["ActiveState"] == "inactive"


def test_a_harmless_drop_in_planted_for_our_unit_is_refused_and_nothing_is_touched():
    r = record("planted_dropin")
    refused(r["run"], r["path"], "drop-in")
    refused(r["module"], r["path"], "drop-in", by=MODULE_CALL)
    assert r["before"]["unit"]["ActiveState"] == "active" and r["before"]["health"] == 200
    assert r["after"] == r["before"]  # the server serves on, its unit and the drop-in unchanged


# --------------------------------------------------------------------------- a unit the module wrote, taken over
def test_takeover_the_roles_template_replaced_the_unit_the_module_wrote_without_a_restart():
    r = record("takeover")
    assert r["before"]["text"] == r["old"] and r["old"].startswith("# Written by eagle-deploy (wait_for_model).")
    assert r["rerun"]["rc"] == 0, r["rerun"]["tail"]
    assert r["after"]["text"] == r["template"]  # the role's template again, byte for byte
    assert r["after"]["unit"] == r["before"]["unit"]  # same MainPID, InvocationID, NRestarts: not restarted
    assert r["after"]["health"] == 200 and r["after"]["unit"]["ActiveState"] == "active"
    assert r["need_reload"] == "no"  # the handler reloaded systemd
    log = Path(r["rerun"]["log"]).read_text(errors="replace")
    assert "RUNNING HANDLER [sglang_server : Reload systemd units]" in log, r["rerun"]["tail"][-3000:]


# --------------------------------------------------------------------------- a serving server whose health fails
def test_unhealthy_the_deployment_served_with_the_small_numbers_before_its_health_failed():
    r = record("unhealthy")
    res = r["start"]["result"]
    assert not res.get("failed") and res["changed"] and res["launcher"] == "systemd", res
    assert (r["serving"]["ActiveState"], r["serving"]["health_generate"]) == ("active", 200)
    assert r["status_serving"]["verdict"] == "ready"
    assert len(r["tree"]["procs"]) >= 3, r["tree"]  # the watcher, the emulator's leader and its children
    assert r["delay"]["status"] == 200 and r["delay"]["body"]["health_delay"] == [15.0, 1000]


def test_unhealthy_the_watcher_failed_the_serving_server_with_exit_69():
    r = record("unhealthy")
    st = r["status"]
    assert st["verdict"] == "stuck", st  # failed health while serving is a question: stuck, nothing moving
    assert st["attempt"] == r["status_serving"]["attempt"]  # the attempt that served, not a new one
    assert st["report"]["after_ready"] is True
    assert st["report"]["exit_status"] == EXIT_RESTARTABLE
    assert any("sglang-watcher: failed: stuck" in line for line in r["journal"]), r["journal"][-20:]
    # the window 2 s, serve_stuck_seconds 10 and serve_stuck_action restart took effect: the defaults (20 s, 300 s,
    # report) would never restart it.
    assert r["samples"][-1]["t"] < 45, [(s["t"], s["ActiveState"], s["SubState"]) for s in r["samples"]]


def test_unhealthy_systemd_shows_the_unit_restarting_with_exec_main_status_69():
    """Restart=on-failure (RestartSec=10, StartLimitBurst=3 in 600 s): exit 69 is restarted, so systemd shows the
    unit waiting for its restart (activating/auto-restart), not `failed`."""
    r = record("unhealthy")
    s = r["samples"][-1]
    assert (s["ActiveState"], s["SubState"], s["Result"]) == ("activating", "auto-restart", "exit-code"), s
    assert (s["ExecMainCode"], s["ExecMainStatus"]) == ("1", EXIT_RESTARTABLE), s  # 1: CLD_EXITED
    assert s["Restart"] == "on-failure" and s["NRestarts"] == 0
    assert s["MainPID"] == 0
    assert r["serving"]["MainPID"] != 0


def test_unhealthy_no_process_of_the_old_tree_is_left():
    r = record("unhealthy")
    assert r["alive"] and not any(r["alive"].values()), r["alive"]
    assert r["tree_failed"]["procs"] == []


def test_unhealthy_the_restart_serves_again_and_the_stop_leaves_nothing(host):
    r = record("unhealthy")
    back = r["restart"]
    assert (back["ActiveState"], back["health_generate"], back["NRestarts"]) == ("active", 200, 1)
    assert back["MainPID"] not in (0, r["serving"]["MainPID"])
    assert r["status_restart"]["verdict"] == "ready"
    assert r["status_restart"]["attempt"] > r["status"]["attempt"]
    assert not r["stop"]["result"].get("failed"), r["stop"]["result"]
    assert r["after_stop"]["ActiveState"] == "inactive" and r["tree_after_stop"]["procs"] == []
    assert r["listening_after_stop"] is False
    u = unit(host, "unhealthy")
    assert u["ActiveState"] == "inactive" and u["UnitFileState"] != "enabled"
    assert not host.socket("tcp://127.0.0.1:30020").is_listening


# --------------------------------------------------------------------------- systemctl stop while loading
def test_stop_loading_the_stop_came_while_the_unit_loaded_weights():
    r = record("stop_loading")
    assert r["unit_at_stop"]["ActiveState"] == "activating" and loading(r["unit_at_stop"])
    assert r["tree"]["procs"], "nothing ran when the unit was stopped"
    assert r["stop_rc"] == 0, r["stop_out"]


def test_stop_loading_the_task_says_stopped_while_loading_not_a_crash():
    r = record("stop_loading")
    res = r["start"]["result"]
    assert res is not None, r["start"]["tail"]
    assert res.get("failed") is True, res
    assert res["crash_class"] == "stopped", res
    assert "the server was stopped while loading (phase 'loading_weights'), not crashed" in res["msg"], res["msg"]
    assert "unit_failed" not in json.dumps(res)
    assert res["attempt"] == r["status_before"]["attempt"]


def test_stop_loading_the_status_says_stopped_and_nothing_is_left(host):
    r = record("stop_loading")
    assert r["status"]["verdict"] == "stopped", r["status"]
    assert r["status"]["attempt"] == r["status_before"]["attempt"]
    # The watcher ended the server and exited 0: the unit is inactive, not failed, and was not restarted.
    assert (r["after"]["ActiveState"], r["after"]["Result"], r["after"]["NRestarts"]) == ("inactive", "success", 0)
    assert not any(r["alive"].values()), r["alive"]
    assert r["tree_after"]["procs"] == []
    assert r["listening"] is False
    assert not any("Scheduled restart job" in line for line in r["journal"]), r["journal"][-10:]
    assert not r["cleanup"]["result"].get("failed"), r["cleanup"]["result"]
    u = unit(host, "stoploading")
    assert u["ActiveState"] == "inactive" and u["UnitFileState"] != "enabled"
    assert not host.socket("tcp://127.0.0.1:30021").is_listening


# --------------------------------------------------------------------------- a failed start rolled back, under the unit
def test_rollback_the_good_deployment_was_recorded_root_only():
    r = record("rollback")
    assert r["good_run"]["rc"] == 0, r["good_run"]["tail"][-2000:]
    (good,) = r["record"]["deployments"]
    assert good["fingerprint"] == r["good_state"]["fingerprint"]
    assert good["fingerprint_data"]["sglang_version"] == V["sglang_install_version"]
    assert r["record_stat"].split() == ["0", "600"]
    assert KEY not in json.dumps(r["record"])


def test_rollback_a_crash_while_loading_put_the_good_deployment_back_under_its_unit():
    r = record("rollback")
    failed = r["failed_run"]
    assert failed["rc"] != 0 and failed["recap"]["failed"] == 1, failed["tail"][-3000:]
    good, now = r["good_state"], r["state_after"]
    assert now["fingerprint"] == good["fingerprint"] and now["pid"] != good["pid"]
    assert now["launcher"] == "systemd" and now["unit"] == "sglang-rollback.service"
    told = " ".join(failed["tail"].split())  # the callback's YAML folds long lines
    assert "server rollback did not come up: why is shown just above; rolled back to %s, SGLang %s, " \
           "serving, pid %d" % (good["fingerprint"][:16], V["sglang_install_version"], now["pid"]) in told, told[-3000:]
    assert (r["after"]["ActiveState"], r["after"]["health_generate"]) == ("active", 200)
    assert r["status_after"]["verdict"] == "ready"
    # the new deployment's config (another context length) was put back: the good one's bytes, owner and mode, in
    # the config dir that is root's (the service user's group reads it)
    (entry,) = [f for f in r["record"]["deployments"][0]["fingerprint_files"] if f["path"] == r["config"]]
    assert r["config_after"]["sha256"] == entry["sha256"]
    assert r["config_after"]["stat"] == "sglang sglang 600" and r["config_after"]["dir_stat"] == "root sglang 750"
    assert "(put back: %s" % r["config"] in told, told[-3000:]
    assert not r["stop"]["result"].get("failed") and r["after_stop"]["ActiveState"] == "inactive"
    assert r["listening_after_stop"] is False


@pytest.mark.parametrize("port", [30020, 30021, 30022, 30023])
def test_no_emulator_of_the_last_cases_runs(procs, port):
    assert procs
    assert not [p for p in procs if "sglang-emulator" in " ".join(p["argv"]) and str(port) in p["argv"]]

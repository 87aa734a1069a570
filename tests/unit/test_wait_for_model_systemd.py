"""wait_for_model with launcher=systemd, systemctl faked: what it writes (the watcher program and its 0600 config; the
unit is the role's template, written here as the role's tasks/unit.yml writes it, from the module's check-mode
unit_facts), what it asks systemd, and how it reads the watcher's status file. No process, no sleep: the fake
systemctl plays systemd and the watcher on the harness's fake clock."""
from __future__ import annotations

import json
import os
import sys
import stat

import pytest

import wait_for_model as wfm
from ansible.module_utils import sglang_plan
import role_unit
from ansible.module_utils import sglang_contract, sglang_proc, sglang_unit_facts, sglang_supervisor
from ansible_run import free_port
from module_harness import module_exits, run, stops, world  # noqa: F401 - fixtures

pytestmark = pytest.mark.usefixtures("module_exits")


def test_runs_as_root():
    # launcher=systemd needs root, and CI runs as root: these tests fail loudly elsewhere instead of skipping.
    assert os.geteuid() == 0


class FakeSystemd(object):
    """systemctl as the module calls it; ``start`` makes the fake watcher write its status file over time."""

    def __init__(self, world, unit_dir, script):
        self.world = world
        self.unit_dir = unit_dir
        self.script = script  # [(t after start, status fields)]
        self.calls = []
        self.active = "inactive"
        self.started = 0
        self.props = {}  # what `systemctl show -p CHECK_PROPS` says besides the defaults (see check_props)
        self.fail = {}  # verb -> rc: that systemctl call fails

    def check_props(self, unit):
        """systemd's view of the unit: loaded from our unit dir when the file is there, else not found."""
        path = os.path.join(self.unit_dir, unit)
        there = os.path.exists(path)
        props = {"FragmentPath": path if there else "", "DropInPaths": "", "Transient": "no",
                 "LoadState": "loaded" if there else "not-found", "UnitFileState": "enabled" if there else "",
                 "ActiveState": self.active}
        props.update(self.props)
        return "".join("%s=%s\n" % kv for kv in props.items())

    def __call__(self, *args):
        self.calls.append(args)
        if args[0] in self.fail:
            return self.fail[args[0]], "", "Failed to %s: the fake says no" % args[0]
        if args[0] == "show":
            assert args[1:3] == ("-p", ",".join(sglang_unit_facts.CHECK_PROPS)), args
            return 0, self.check_props(args[3]), ""
        if args[0] in ("stop", "disable"):
            self.active = "inactive"
        if args[0] == "start":
            self.started += 1
            self.active = "activating"
            self.world.t0 = self.world.now
            config = sglang_proc.read_json(self.world.log_dir, sglang_contract.CONFIG % "sglang")
            for t, fields in self.script:
                self.world.at(t, self._writer(config["launch"], fields))
        return 0, "", ""

    def _writer(self, launch, fields):
        def write():
            st = {"launch": launch, "attempt": 3, "log_path": os.path.join(self.world.log_dir, "sglang_r3.log"),
                  "server_pid": 4100000, "started_at": 0.0, "phase": "launching", "phases": [], "verdict": None}
            st.update(fields)
            active = st.pop("_active", None)  # the unit's state as systemd shows it then (default: as the verdict)
            if active is not None:
                self.active = active
            elif st["verdict"] == "ready":
                self.active = "active"
            elif st["verdict"]:
                self.active = "failed"
            sglang_proc.write_files(self.world.log_dir, ((sglang_contract.STATUS % "sglang", json.dumps(st)),))
        return write

    def show(self, unit):
        self.calls.append(("show", unit))
        return {"ActiveState": self.active, "SubState": "start", "Result": "success", "NRestarts": "0",
                "ExecMainStatus": "78" if self.active == "failed" else "0", "UnitFileState": "enabled"}

    def names(self):
        return [c[0] for c in self.calls]

    def touched(self):
        """Every systemctl call that is more than a question (show, cat)."""
        return [c for c in self.calls if c[0] not in ("show", "cat")]

KEY = "sk-unit-0123456789"


def unit_dirs(world):
    """The unit dirs systemd reads, for these tests: our unit_dir first, then stand-ins for /run/systemd/system,
    /run/systemd/transient and /usr/lib/systemd/system (under the test's tmp dir)."""
    dirs = [os.path.join(world.log_dir, d) for d in ("units", "run-systemd-system", "run-systemd-transient",
                                                      "usr-lib-systemd-system")]
    for d in dirs:
        os.makedirs(d, exist_ok=True)
    return dirs


def role_unit_tasks(world, inject, params, check_mode=False):  # noqa: F811
    """roles/sglang_server/tasks/unit.yml before the launch task: wait_for_model in check mode with the launch's
    arguments (prove_launch), which refuses (the role stops there: nothing is written) or returns unit_facts; then the
    role's template written from them, systemd reloaded (the fake reads a unit as loaded when its file is there)
    and the unit enabled. Returns (status, result) of the check."""
    status, r = run(world, check_mode=True, inject=inject, **dict(params, prove_launch=True))
    if status == "ok" and r["launcher"] == "systemd" and not check_mode:
        role_unit.install(r["unit_facts"], name=params.get("name", "sglang"),
                          stall_timeout=params.get("stall_timeout", 120), stop_timeout=params.get("stop_timeout", 30))
    return status, r


def systemd_run(world, script, check_mode=False, fake=None, role=True, **args):  # noqa: F811 - world is the fixture's
    """The launch as the role makes it (role=True: its unit tasks first, see role_unit_tasks; a refusal of its check is
    the result), or wait_for_model alone (role=False)."""
    dirs = unit_dirs(world)
    fake = fake or FakeSystemd(world, dirs[0], script)
    inject = {"systemctl": fake, "booted": lambda: (True, None), "unit_dirs": dirs}
    if args.pop("inject_wall", False):
        inject["wall"] = world.clock  # the wall clock moves with the fake clock (started_at is checked against it)
    # The server's 0600 --config file (as the role writes it), outside the run dir: the key's one copy on disk.
    etc = os.path.join(os.path.dirname(world.log_dir), "etc")
    os.makedirs(etc, exist_ok=True)
    config = os.path.join(etc, "sglang.yaml")
    if not os.path.exists(config):
        with open(os.open(config, os.O_WRONLY | os.O_CREAT, 0o600), "w") as fh:
            fh.write('# {{ ansible_managed }}\nmodel-path: "/models/m"\napi-key: "%s"\nport: 30000\n' % KEY)
    params = dict(launcher="systemd", unit_dir=dirs[0], api_key=KEY, run_as=None, port=free_port(),
                  argv=[sys.executable, "-m", "sglang.launch_server", "--config", config])
    params.update(args)
    if role and params.get("state", "started") == "started":
        status, result = role_unit_tasks(world, inject, params, check_mode)
        if status != "ok":
            return status, result, fake
    status, result = run(world, check_mode=check_mode, inject=inject, **params)
    return status, result, fake


READY = [(0.5, {"phase": "loading_weights", "shards": [1, 4], "phases": [{"phase": "launching", "at": 0},
                                                                       {"phase": "loading_weights", "at": 0.4}]}),
         (3.0, {"verdict": "ready", "phase": "ready", "ready_after": 3.0,
                "phases": [{"phase": "launching", "at": 0}, {"phase": "loading_weights", "at": 0.4},
                           {"phase": "ready", "at": 2.9}],
                "report": {"phases": [], "log_tail": ["... fired up"], "shards": [4, 4]}})]


def test_launch_writes_the_unit_the_program_and_a_private_config_then_waits_for_ready(world):  # noqa: F811
    status, r, fake = systemd_run(world, READY)
    assert status == "ok", r
    assert r["changed"] and r["launcher"] == "systemd" and r["unit"] == "sglang-sglang.service"
    assert r["pid"] == 4100000 and r["attempt"] == 3 and r["phase"] == "ready"
    assert r["progress"]["launcher"] == "systemd" and r["progress"]["eta"] == 0.0
    # The module writes, reloads and enables no unit (the role's unit tasks do): it starts it, without blocking.
    assert fake.touched() == [("reset-failed", "sglang-sglang.service"),
                              ("start", "--no-block", "sglang-sglang.service")]
    unit = open(os.path.join(fake.unit_dir, "sglang-sglang.service")).read()
    for line in ("Type=notify", "KillMode=control-group", "LimitMEMLOCK=infinity", "Restart=on-failure",
                 "RestartPreventExitStatus=78", "TimeoutStopSec=30s", "TimeoutStartSec=180s",
                 "WantedBy=multi-user.target", "NotifyAccess=main"):
        assert line in unit.splitlines(), line
    assert sglang_unit_facts.unit_owner(unit) is not None and unit.splitlines()[3].startswith(sglang_unit_facts.UNIT_MARK)
    assert "sk-unit" not in unit  # the unit file is world-readable: no secret in it
    # The unit runs the supervisor program the role installed (program_dir); the module writes no program.
    assert ('"%s" "-I" "-B" "%s" "%s" "sglang"' % (sys.executable, world.program_dir, world.log_dir)) in unit
    assert not os.path.exists(os.path.join(world.log_dir, "watcher"))
    assert not os.path.exists(os.path.join(world.log_dir, "supervisor"))
    cfg_path = os.path.join(world.log_dir, "sglang.watcher.json")
    assert stat.S_IMODE(os.stat(cfg_path).st_mode) == 0o600
    cfg = json.load(open(cfg_path))
    # The key's one copy on disk is the server's --config file: the watcher gets its path and the key's name.
    assert cfg["headers"] == {} and cfg["api_key_file"] == {"path": os.path.join(os.path.dirname(world.log_dir), "etc",
                                                                                 "sglang.yaml"), "key": "api-key"}
    assert KEY not in open(cfg_path).read()
    assert cfg["unit"] == "sglang-sglang.service" and cfg["settings"]["extend_timeout"] == 180


@pytest.mark.parametrize("args, interval", [({}, 10.0), ({"serve_health_interval": 1.5}, 1.5)])
def test_the_serve_health_interval_reaches_the_watchers_settings(world, args, interval):  # noqa: F811
    status, r, fake = systemd_run(world, READY, **args)
    assert status == "ok", r
    cfg = json.load(open(os.path.join(world.log_dir, "sglang.watcher.json")))
    # the watcher program's serve() reads it from there (sglang_supervisor.Watcher.serve)
    assert cfg["settings"]["serve_health_interval"] == interval
    assert cfg["settings"]["health_timeout"] == 10.0 and cfg["settings"]["unhealthy_after"] == 3


@pytest.mark.parametrize("value, needle", [(0, "serve_health_interval must be > 0"),
                                           (-1, "serve_health_interval must be > 0"),
                                           (86401, "and <= 86400"),
                                           (float("inf"), "serve_health_interval must be a finite number")])
def test_a_bad_serve_health_interval_is_refused_before_anything(world, stops, value, needle):  # noqa: F811
    status, r, fake = systemd_run(world, READY, serve_health_interval=value)
    assert status == "failed" and needle in r["msg"], r["msg"]
    assert fake.touched() == [] and stops == []
    assert not os.path.exists(os.path.join(world.log_dir, "sglang.watcher.json"))


def test_a_failed_start_reports_the_watchers_class_and_leaves_the_failed_unit(world):  # noqa: F811
    report = {"failed": True, "crash_class": "cuda_oom", "hint": "lower --mem-fraction-static",
              "deciding_line": "torch.OutOfMemoryError: CUDA out of memory", "exit_status": 78,
              "evidence": "the server's leader process exited (rc=1)", "msg": "server crashed: cuda_oom",
              "log_tail": ["..."]}
    status, r, fake = systemd_run(world, [(2.0, {"verdict": "cuda_oom", "report": report})])
    assert status == "failed"
    assert r["crash_class"] == "cuda_oom" and r["exit_status"] == 78
    assert "not restarted" in r["msg"] and "journalctl -u sglang-sglang.service" in r["msg"]
    assert r["unit_state"]["ActiveState"] == "failed"
    assert "stop" not in fake.names()  # the failed unit stays for systemctl status; nothing runs in it


@pytest.mark.parametrize("exit_status, calls", [
    (78, []),  # a start that failed for good: the watcher ends its tree after the verdict, systemd never restarts it
    (69, [("stop", "--no-block", "sglang-sglang.service")]),  # restartable: a queued stop keeps systemd from it
])
def test_a_verdict_returns_at_once_while_the_watcher_ends_the_failed_tree(world, exit_status, calls):  # noqa: F811
    report = {"failed": True, "crash_class": "python_exception", "exit_status": exit_status,
              "evidence": "worker PID 7 of the server died", "msg": "server crashed: python_exception"}
    status, r, fake = systemd_run(world, [(2.0, {"verdict": "python_exception", "report": report,
                                                 "_active": "activating"})])
    assert status == "failed" and r["crash_class"] == "python_exception"
    assert [c for c in fake.calls if c[0] == "stop"] == calls  # never a blocking `systemctl stop`
    assert world.now - world.t0 <= 2.0 + 0.2  # the task ends a poll after the verdict


def test_the_module_timeout_stops_a_unit_still_loading(world):  # noqa: F811
    status, r, fake = systemd_run(world, READY[:1], timeout=5)
    assert status == "failed" and r["crash_class"] == "timeout"
    assert ("stop", "sglang-sglang.service") in fake.calls


def test_the_watcher_gets_the_timeout_and_the_backstop_counts_from_the_launch_not_the_step(world):  # noqa: F811
    # A later step of the same launch (step_time): the status file says the launch was 500 s ago. The module's
    # backstop ends at timeout + margin after the launch, not after this step began.
    script = [(0.5, {"phase": "loading_weights", "shards": [1, 4], "started_at": 1000.0 - 500.0})]
    status, r, fake = systemd_run(world, script, timeout=520, inject_wall=True)
    cfg = json.load(open(os.path.join(world.log_dir, "sglang.watcher.json")))
    assert cfg["timeout"] == 520  # the watcher itself ends the start at the timeout, with the phase it reached
    assert status == "failed" and r["crash_class"] == "timeout"
    assert world.now - world.t0 <= 520 + sglang_unit_facts.SERVICE_TIMEOUT_MARGIN - 500 + 1.5
    assert ("stop", "sglang-sglang.service") in fake.calls


def test_the_backstop_ends_at_timeout_plus_margin_after_the_launch_not_before(world):  # noqa: F811
    # A watcher that never writes a verdict (the load goes on): the module's backstop is timeout + margin after the
    # launch (its status's started_at), however often the status is read meanwhile; never about half of it.
    script = [(0.5, {"phase": "loading_weights", "shards": [1, 4], "started_at": 1000.0})]
    status, r, fake = systemd_run(world, script, timeout=60, inject_wall=True)
    assert world.t0 == 1000.0  # the launch, as started_at says
    assert status == "failed" and r["crash_class"] == "timeout"
    waited = world.now - world.t0
    assert 60 + sglang_unit_facts.SERVICE_TIMEOUT_MARGIN - 0.5 <= waited <= 60 + sglang_unit_facts.SERVICE_TIMEOUT_MARGIN + 1.5, waited


def test_a_stop_during_the_load_is_reported_as_stopped_not_as_a_crash(world):  # noqa: F811
    script = [READY[0], (1.0, {"verdict": "stopped", "status": "stopped", "phase": "loading_weights"})]
    status, r, fake = systemd_run(world, script)
    assert status == "failed" and r["crash_class"] == "stopped"
    assert "stopped while loading (phase 'loading_weights')" in r["msg"] and "unit_failed" not in r["msg"]
    assert r["progress"]["verdict"] == "stopped" and "done" not in r["progress"]["status"]


def test_a_step_ends_pending_with_progress(world):  # noqa: F811
    status, r, fake = systemd_run(world, READY, _step_time=1.0)
    assert status == "ok" and r["pending"] is True and r["changed"]
    assert r["progress"]["status"] == "loading weights 1/4 shards" and r["progress"]["shards"] == [1, 4]
    assert r["progress"]["attempt"] == 3


def test_a_unit_of_that_name_not_written_by_us_is_refused_before_anything(world):  # noqa: F811
    unit_dir = os.path.join(world.log_dir, "units")
    os.makedirs(unit_dir)
    with open(os.path.join(unit_dir, "sglang-sglang.service"), "w") as fh:
        fh.write("[Service]\nExecStart=/usr/bin/someone-elses\n")
    status, r, fake = systemd_run(world, READY)
    assert status == "failed" and "was not written by eagle-deploy" in r["msg"]
    assert fake.touched() == []


def test_check_mode_writes_and_starts_nothing(world):  # noqa: F811
    status, r, fake = systemd_run(world, READY, check_mode=True)
    assert status == "ok" and r["changed"]
    assert [c for c in fake.names() if c != "show"] == []
    assert not os.path.exists(os.path.join(world.log_dir, "units", "sglang-sglang.service"))
    assert not os.path.exists(os.path.join(world.log_dir, "sglang.watcher.json"))


def test_stopped_disables_and_stops_the_unit(world):  # noqa: F811
    systemd_run(world, READY)
    status, r, fake = systemd_run(world, [], state="stopped")
    assert status == "ok" and r["changed"]
    assert ("disable", "--now", "sglang-sglang.service") in fake.calls


def test_systemd_asked_where_it_does_not_run_is_refused(world):  # noqa: F811
    status, r = run(world, launcher="systemd", inject={"booted": lambda: (False, "no /run/systemd/system")})
    assert status == "failed" and "use launcher: detached" in r["msg"] and "Nothing was stopped" in r["msg"]
    assert not world.spawned


def test_auto_is_detached_without_systemd(world):  # noqa: F811
    world.health = lambda t: 200 if t > 1 else None
    status, r = run(world)
    assert status == "ok" and r["launcher"] == "detached" and world.spawned


class Gone(Exception):
    pass


def test_a_dropped_connection_ends_the_wait_not_the_server_and_lets_the_lock_go(world, monkeypatch):  # noqa: F811
    import fcntl
    looks = []

    def caller_gone():
        looks.append(1)
        return len(looks) > 3

    def exit_now(code):
        raise Gone(code)
    monkeypatch.setattr(wfm.os, "_exit", exit_now)
    dirs = unit_dirs(world)
    unit_dir = dirs[0]
    fake = FakeSystemd(world, unit_dir, READY)
    inject = {"systemctl": fake, "booted": lambda: (True, None), "caller_gone": caller_gone, "unit_dirs": dirs}
    params = dict(launcher="systemd", unit_dir=unit_dir, port=free_port())
    assert role_unit_tasks(world, dict(inject, caller_gone=lambda: False), params)[0] == "ok"
    with pytest.raises(Gone) as gone:
        run(world, inject=inject, **params)
    assert gone.value.args == (0,)
    assert "start" in fake.names() and "stop" not in fake.names()  # the unit loads on
    with open(os.path.join(world.log_dir, "sglang.lock")) as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)  # free: the next run takes it at once


def test_an_attach_never_takes_an_earlier_attempts_verdict(world, stops, module_exits):  # noqa: F811
    """Same fingerprint, not answering yet: the module attaches. The status file may still hold the verdict of an
    earlier attempt (the watcher rewrites it when the new one starts); only the recorded attempt's counts."""
    from module_harness import record_self_as_server
    dirs = unit_dirs(world)
    unit_dir = dirs[0]
    fake = FakeSystemd(world, unit_dir, [])
    fake.active = "activating"
    role_unit.install(sglang_unit_facts.unit_facts("sglang", world.log_dir, unit_dir, sys.executable,
                                                   world.program_dir))  # the role's
    parts = sglang_plan.fingerprint_parts([sys.executable, "-m", "sglang.launch_server", "--config", "/etc/sglang.yaml"],
                                  {}, [], {}, None)
    parts["launcher"] = sglang_plan._h("systemd")
    record_self_as_server(world, fingerprint=sglang_plan.fingerprint_of(parts), attempt=2, launcher="systemd")
    old = {"launch": "x", "attempt": 1, "verdict": "cuda_oom", "report": {"failed": True, "crash_class": "cuda_oom"}}
    sglang_proc.write_files(world.log_dir, ((sglang_contract.STATUS % "sglang", json.dumps(old)),))
    world.t0 = world.now
    world.at(2.0, fake._writer("x", {"attempt": 2, "verdict": "ready", "phase": "ready", "report": {}}))
    world.health = lambda t: 200 if t is not None and t >= 2.0 else None  # ready, it answers this run's own request
    status, r = run(world, inject={"systemctl": fake, "booted": lambda: (True, None), "unit_dirs": dirs},
                    launcher="systemd", unit_dir=unit_dir, run_as=None)
    assert status == "ok", r
    assert r["attempt"] == 2 and "stop" not in fake.names()


def _serving_unit(world, active, status):
    """Our unit's server, recorded (this test process stands in for it), systemd showing ``active``, and the status
    file its watcher wrote (attempt 2)."""
    from module_harness import record_self_as_server
    dirs = unit_dirs(world)
    fake = FakeSystemd(world, dirs[0], [])
    fake.active = active
    with open(os.path.join(dirs[0], "sglang-sglang.service"), "w") as fh:  # our unit, as the launch wrote it
        fh.write("%s\n%s\n" % (sglang_unit_facts.UNIT_MARK, sglang_unit_facts.deployment_line("sglang", world.log_dir)))
    state = record_self_as_server(world, log_text="[2026-12-02 10:00:00] The server is fired up and ready to roll!\n",
                                  attempt=2, launcher="systemd")
    st = {"launch": "x", "attempt": 2, "log_path": state["log_path"], "server_pid": state["pid"]}
    st.update(status)
    sglang_proc.write_files(world.log_dir, ((sglang_contract.STATUS % "sglang", json.dumps(st)),))
    return fake, {"systemctl": fake, "booted": lambda: (True, None), "unit_dirs": dirs}, dirs[0], state


SERVING = {"verdict": "ready", "phase": "ready", "serving": {
    "set_aside": [], "set_aside_total": 0, "crash_pending": None, "health": {"last": 200, "failed_in_a_row": 0},
    "log_read": len("[2026-12-02 10:00:00] The server is fired up and ready to roll!\n"), "serve_health_interval": 10.0,
    "health_interval": 0.25, "health_timeout": 10.0, "unhealthy_after": 3}}


def test_watched_through_the_units_watcher(world, stops, module_exits):  # noqa: F811
    fake, inject, unit_dir, state = _serving_unit(world, "active", SERVING)
    world.health = lambda t: 200
    status, r = run(world, state="watched", watch_time=2, inject=inject, launcher="systemd", unit_dir=unit_dir)
    assert status == "ok" and r["pid"] == state["pid"] and r["log_offset"] == SERVING["serving"]["log_read"], r
    assert fake.touched() == [] and stops == []  # asked systemd, changed nothing


def test_watched_with_the_unit_not_active_fails_clearly(world, stops, module_exits):  # noqa: F811
    fake, inject, unit_dir, _state = _serving_unit(world, "failed", SERVING)
    status, r = run(world, state="watched", watch_time=2, inject=inject, launcher="systemd", unit_dir=unit_dir)
    assert status == "failed" and r["supervisor"] == "gone", r
    assert "nothing watches the server" in r["msg"] and "unit sglang-sglang.service is not active" in r["msg"]
    assert fake.touched() == [] and stops == [] and world.http_calls == 0


def test_watched_reports_the_units_failure_verdict(world, stops, module_exits):  # noqa: F811
    report = {"failed": True, "crash_class": "child_died", "evidence": "worker PID 4100 of the server died",
              "hint": "dmesg", "msg": "server crashed: child_died", "exit_status": 69, "dead_child_pid": 4100}
    fake, inject, unit_dir, _state = _serving_unit(world, "activating", {"verdict": "child_died", "report": report})
    status, r = run(world, state="watched", watch_time=2, inject=inject, launcher="systemd", unit_dir=unit_dir)
    assert status == "failed" and r["crash_class"] == "child_died" and r["dead_child_pid"] == 4100, r
    assert r["msg"] == ("server crashed: child_died (decided by unit sglang-sglang.service; journalctl -u "
                        "sglang-sglang.service)")
    assert fake.touched() == [] and stops == []


def test_a_failure_report_reaches_the_operator_with_its_control_characters_escaped(world):  # noqa: F811
    # The watcher's report quotes the log (a client's prompt in a raw request echo): every field the module returns
    # has its control characters escaped, whichever field they are in.
    hostile = "\x1b[2J\x1b]0;title\x07\rPLAY RECAP localhost ok=9 failed=0\x9b"
    report = {"failed": True, "crash_class": "cuda_oom", "hint": "lower it" + hostile, "exit_status": 78,
              "deciding_line": "[x] Scheduler hit an exception" + hostile, "crash_exception": "OOM" + hostile,
              "traceback": ["Traceback" + hostile, "torch.OutOfMemoryError" + hostile], "log_tail": [hostile],
              "evidence": "the server's leader process exited (rc=1)", "msg": "server crashed: cuda_oom" + hostile}
    status, r, fake = systemd_run(world, [(2.0, {"verdict": "cuda_oom", "report": report})])
    assert status == "failed"
    shown = "\\x1b[2J\\x1b]0;title\\x07\\x0dPLAY RECAP localhost ok=9 failed=0\\x9b"
    assert r["deciding_line"] == "[x] Scheduler hit an exception" + shown and r["log_tail"] == [shown]
    assert r["traceback"][1] == "torch.OutOfMemoryError" + shown and r["crash_exception"] == "OOM" + shown
    assert r["hint"].endswith(shown) and shown in r["msg"]
    assert not any(c in json.dumps(r, ensure_ascii=False) for c in ("\x1b", "\x07", "\x9b"))
    assert "\\r" not in json.dumps(r)  # no CR either (json.dumps would show one as \r)


def test_the_watchers_journal_lines_escape_control_characters(capsys):
    w = sglang_supervisor.Watcher("/nonexistent", "sglang")
    w.say("failed: cuda_oom: the server's leader process exited (the log: \x1b[2J\rPLAY RECAP\x07)")
    err = capsys.readouterr().err
    assert err == "sglang-watcher: failed: cuda_oom: the server's leader process exited (the log: \\x1b[2J\\x0dPLAY RECAP\\x07)\n"


def _files_holding(top, text):
    found = []
    for d, _dirs, files in os.walk(top):
        for f in files:
            with open(os.path.join(d, f), "rb") as fh:
                if text.encode() in fh.read():
                    found.append(os.path.join(d, f))
    return found


def test_the_key_lives_only_in_the_servers_config_and_a_stop_leaves_no_secret_in_the_run_dir(world):  # noqa: F811
    status, r, fake = systemd_run(world, READY, secret_environment={"HF_TOKEN": "hf_unit_token_0123"})
    assert status == "ok", r
    cfg_path = os.path.join(world.log_dir, "sglang.watcher.json")
    assert KEY not in open(cfg_path).read()  # the watcher config never holds the API key
    assert json.load(open(cfg_path))["env"]["HF_TOKEN"] == "hf_unit_token_0123"  # the server's environment does
    assert _files_holding(world.log_dir, KEY) == []
    status, r, fake = systemd_run(world, [], state="stopped")
    assert status == "ok" and r["changed"]
    assert not os.path.exists(cfg_path)
    assert _files_holding(world.log_dir, KEY) == [] and _files_holding(world.log_dir, "hf_unit_token_0123") == []
    assert _files_holding(os.path.join(os.path.dirname(world.log_dir), "etc"), KEY)  # the one copy stays


def test_a_stop_of_a_unit_already_down_still_removes_the_watcher_config(world):  # noqa: F811
    systemd_run(world, READY)
    cfg_path = os.path.join(world.log_dir, "sglang.watcher.json")
    sglang_proc.clear_state(world.log_dir, "sglang")
    os.unlink(os.path.join(world.log_dir, "units", "multi-user.target.wants", "sglang-sglang.service"))
    status, r, fake = systemd_run(world, [], state="stopped")
    assert status == "ok" and r["changed"] and not os.path.exists(cfg_path)


@pytest.mark.parametrize("argv_tail, content, why", [
    ([], None, "argv has no --config <file>"),
    (["--config", "CONFIG"], 'model-path: "/m"\n', "has no api_key/api-key line"),
    (["--config", "CONFIG"], 'api_key: "another-key-0123456789"\n', "holds another key in its api_key line"),
    (["--config=MISSING"], None, "does not exist"),
])
def test_a_systemd_launch_whose_config_file_does_not_hold_the_key_is_refused_before_anything(world, stops,  # noqa: F811
                                                                                             argv_tail, content, why):
    config = os.path.join(os.path.dirname(world.log_dir), "other.yaml")
    if content is not None:
        with open(config, "w") as fh:
            fh.write(content)
    argv = [sys.executable, "-m", "sglang.launch_server"] + [
        a.replace("CONFIG", config).replace("MISSING", config + ".missing") for a in argv_tail]
    status, r, fake = systemd_run(world, READY, argv=argv)
    assert status == "failed" and why in r["msg"] and "Nothing was stopped or launched" in r["msg"], r
    assert "start" not in fake.names() and stops == []
    assert not os.path.exists(os.path.join(world.log_dir, "sglang.watcher.json"))
    assert KEY not in json.dumps(r)


@pytest.mark.parametrize("line, value", [
    ('api-key: "k-0123456789abcdef"', "k-0123456789abcdef"),
    ("api_key: k-0123456789abcdef  # a comment", "k-0123456789abcdef"),
    ("api_key: 'k-0123456789abcdef'", "k-0123456789abcdef"),
    ('api-key: "with \\"quote\\" and \\u00e9"', 'with "quote" and \u00e9'),
])
def test_the_config_files_key_line_is_read_as_the_role_writes_it(tmp_path, line, value):
    path = tmp_path / "c.yaml"
    path.write_text("# {{ ansible_managed }}\nmodel-path: \"/m\"\n  api-key: \"indented-is-no-key\"\n%s\n" % line)
    assert sglang_contract.read_config_secret(str(path))[1] == value
    os.symlink(str(path), str(tmp_path / "link.yaml"))
    with pytest.raises(OSError):
        sglang_contract.read_config_secret(str(tmp_path / "link.yaml"))  # never through a symlink


def test_the_watcher_takes_the_key_from_the_servers_config_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text('api-key: "%s"\n' % KEY)
    cfg = {"headers": {}, "secrets": ["hf_unit_token_0123"], "api_key_file": {"path": str(path), "key": "api-key"}}
    sglang_supervisor.Watcher(str(tmp_path), "sglang").take_api_key(cfg)
    assert cfg["headers"] == {"Authorization": "Bearer %s" % KEY} and cfg["secrets"] == ["hf_unit_token_0123", KEY]
    path.write_text('port: 1\n')
    with pytest.raises(SystemExit, match="has no api-key line"):
        sglang_supervisor.Watcher(str(tmp_path), "sglang").take_api_key(dict(cfg, headers={}))

# ---------------------------------------------------------------------------------------- a unit is one deployment's
def unit_file(world):
    return os.path.join(world.log_dir, "units", "sglang-sglang.service")


def other_run_dir(world):
    path = os.path.join(world.log_dir, "run2")
    os.makedirs(path, exist_ok=True)
    return path


def test_the_unit_records_its_deployment_in_its_header(world):  # noqa: F811
    status, r, fake = systemd_run(world, READY)
    assert status == "ok", r
    text = open(unit_file(world)).read()
    deployment = sglang_proc.deployment_name("sglang", world.log_dir)
    # ansible_managed (as comment lines), the mark, the deployment line: the header before [Unit]
    assert sglang_unit_facts.unit_header(text) == ["#", "# Ansible managed", "#", sglang_unit_facts.UNIT_MARK + " Changes here are "
                                             "replaced on its next run.", "# eagle-deploy deployment: %s run_dir=%s" % (
                                                 deployment, os.path.realpath(world.log_dir))]
    assert sglang_unit_facts.unit_owner(text) == (deployment, os.path.realpath(world.log_dir))


@pytest.mark.parametrize("role", [True, False], ids=["role", "module"])
@pytest.mark.parametrize("check_mode", [False, True])
def test_a_second_deployment_of_the_name_is_refused_before_anything(world, check_mode, role):  # noqa: F811
    status, r, first = systemd_run(world, READY)
    assert status == "ok", r
    before = open(unit_file(world), "rb").read()
    run2 = other_run_dir(world)
    status, r, fake = systemd_run(world, READY, check_mode=check_mode, run_dir=run2, role=role)
    assert status == "failed"
    assert unit_file(world) in r["msg"] and os.path.realpath(world.log_dir) in r["msg"]
    assert "choose another name" in r["msg"] and "Nothing was stopped or launched." in r["msg"]
    assert fake.touched() == []  # the first one's unit is neither stopped nor reloaded
    assert open(unit_file(world), "rb").read() == before
    assert os.listdir(run2) == []  # no watcher program, no config, no run state


def foreign(world, where, text="[Service]\nExecStart=/usr/bin/someone-elses\n"):
    path = os.path.join(world.log_dir, where, "sglang-sglang.service")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        fh.write(text)
    return path


@pytest.mark.parametrize("role", [True, False], ids=["role", "module"])
@pytest.mark.parametrize("where", ["run-systemd-system", "usr-lib-systemd-system", "run-systemd-transient"])
@pytest.mark.parametrize("loaded", [True, False])
def test_a_unit_of_the_name_elsewhere_is_refused_before_anything(world, where, loaded, role):  # noqa: F811
    dirs = unit_dirs(world)
    path = foreign(world, where)
    fake = FakeSystemd(world, dirs[0], READY)
    fake.active = "active"
    if loaded:  # else systemd has not loaded it yet (LoadState=not-found): only the disk shows it
        fake.props = {"FragmentPath": path, "LoadState": "loaded", "Transient": "yes" if "transient" in where else "no"}
    else:
        fake.active = "inactive"
    status, r, fake = systemd_run(world, READY, fake=fake, role=role)
    assert status == "failed" and path in r["msg"] and "Nothing was stopped or launched." in r["msg"], r
    assert fake.touched() == []
    assert not os.path.exists(unit_file(world))
    assert open(path).read() == "[Service]\nExecStart=/usr/bin/someone-elses\n"


def test_a_transient_unit_of_the_name_is_refused_in_check_mode_too(world):  # noqa: F811
    dirs = unit_dirs(world)
    fake = FakeSystemd(world, dirs[0], READY)
    fake.active = "active"
    fake.props = {"FragmentPath": "/run/systemd/transient/sglang-sglang.service", "Transient": "yes",
                  "LoadState": "loaded"}
    for check_mode in (True, False):
        status, r, fake = systemd_run(world, READY, check_mode=check_mode, fake=fake)
        assert status == "failed" and "transient" in r["msg"], r
        assert "/run/systemd/transient/sglang-sglang.service" in r["msg"]
    assert fake.touched() == [] and not os.path.exists(unit_file(world))


@pytest.mark.parametrize("role", [True, False], ids=["role", "module"])
@pytest.mark.parametrize("seen_by", ["disk", "systemd"])
def test_a_drop_in_is_refused_naming_it_before_our_unit_is_stopped(world, seen_by, role):  # noqa: F811
    status, r, first = systemd_run(world, READY)
    assert status == "ok", r
    before = open(unit_file(world), "rb").read()
    dropin = os.path.join(world.log_dir, "units", "sglang-sglang.service.d", "override.conf")
    fake = FakeSystemd(world, first.unit_dir, READY)
    fake.active = "active"
    if seen_by == "disk":
        os.makedirs(os.path.dirname(dropin))
        with open(dropin, "w") as fh:
            fh.write("[Service]\nEnvironment=FOREIGN=1\n")
    else:  # systemd applies one from a dir of its own (e.g. /etc/systemd/system.control, systemctl set-property)
        dropin = "/etc/systemd/system.control/sglang-sglang.service.d/50-MemoryMax.conf"
        fake.props = {"DropInPaths": dropin}
    # A changed argv: the module would restart the server
    status, r, fake = systemd_run(world, READY, fake=fake, environment={"CHANGED": "1"}, role=role)
    assert status == "failed" and dropin in r["msg"] and "drop-in" in r["msg"], r
    assert fake.touched() == []
    assert open(unit_file(world), "rb").read() == before


def test_a_link_in_the_wants_dir_to_another_unit_is_refused_before_writing(world):  # noqa: F811
    dirs = unit_dirs(world)
    wants = os.path.join(dirs[0], "multi-user.target.wants")
    os.makedirs(wants)
    os.symlink("/usr/lib/systemd/system/other.service", os.path.join(wants, "sglang-sglang.service"))
    status, r, fake = systemd_run(world, READY)
    assert status == "failed" and os.path.join(wants, "sglang-sglang.service") in r["msg"], r
    assert "Nothing was stopped or launched." in r["msg"]
    assert fake.touched() == [] and not os.path.exists(unit_file(world))


def test_the_module_alone_refuses_a_launch_without_the_roles_unit(world, stops):  # noqa: F811
    status, r, fake = systemd_run(world, READY, role=False)
    assert status == "failed", r
    assert unit_file(world) in r["msg"] and "does not exist" in r["msg"] and "tasks/unit.yml" in r["msg"], r["msg"]
    assert "Nothing was stopped or launched." in r["msg"]
    assert fake.touched() == [] and stops == []
    assert not os.path.exists(os.path.join(world.log_dir, "watcher"))  # no watcher program, no config
    assert not os.path.exists(os.path.join(world.log_dir, "sglang.watcher.json"))


@pytest.mark.parametrize("props", [{"NeedDaemonReload": "yes"}, {"LoadState": "not-found", "FragmentPath": ""}],
                         ids=["changed on disk", "not loaded"])
def test_a_unit_that_systemd_has_not_loaded_as_it_is_on_disk_is_not_started(world, props):  # noqa: F811
    dirs = unit_dirs(world)
    role_unit.install(sglang_unit_facts.unit_facts("sglang", world.log_dir, dirs[0], sys.executable))
    fake = FakeSystemd(world, dirs[0], READY)
    fake.props = props
    status, r, fake = systemd_run(world, READY, fake=fake, role=False)
    assert status == "failed" and "systemctl daemon-reload" in r["msg"] and unit_file(world) in r["msg"], r
    assert fake.touched() == []
    assert not os.path.exists(os.path.join(world.log_dir, "sglang.watcher.json"))
    # The role's check says so (unit_facts.loaded: false): its template task then notifies the daemon-reload handler.
    status, r = run(world, check_mode=True, inject={"systemctl": fake, "booted": lambda: (True, None),
                                                    "unit_dirs": dirs}, launcher="systemd", unit_dir=dirs[0])
    assert status == "ok" and r["unit_facts"]["exists"] is True and r["unit_facts"]["loaded"] is False, r


def test_stopped_never_stops_another_deployments_unit(world):  # noqa: F811
    status, r, first = systemd_run(world, READY)
    assert status == "ok", r
    fake = FakeSystemd(world, first.unit_dir, [])
    fake.active = "active"
    status, r, fake = systemd_run(world, [], fake=fake, state="stopped", run_dir=other_run_dir(world))
    assert status == "failed" and unit_file(world) in r["msg"] and os.path.realpath(world.log_dir) in r["msg"], r
    assert fake.touched() == []


def test_a_stop_acts_only_on_a_unit_file_of_our_deployment(world, stops):  # noqa: F811
    """The run state says our server ran in the unit, but the file of that name is not ours (now launched detached,
    so the unit check of a systemd launch did not run): refused, naming the file, nothing stopped."""
    from module_harness import record_self_as_server
    record_self_as_server(world, launcher="systemd")
    path = foreign(world, "units")
    fake = FakeSystemd(world, os.path.dirname(path), [])
    fake.active = "active"
    status, r = run(world, inject={"systemctl": fake, "booted": lambda: (True, None), "unit_dirs": unit_dirs(world)},
                    launcher="detached", unit_dir=os.path.dirname(path), state="stopped")
    assert status == "failed" and path in r["msg"] and "refusing to stop" in r["msg"], r
    assert fake.touched() == [] and not stops


def old_module_unit_text(run_dir, deployment_line=True, python=sys.executable, stall_timeout=120):
    """The unit as wait_for_model itself wrote it before the unit became the role's template (its mark on the first
    line, then the deployment line, which still older versions did not write)."""
    program = os.path.join(run_dir, "watcher", "sglang_watcher.py")
    lines = ["# Written by eagle-deploy (wait_for_model). Changes here are replaced on its next run."]
    if deployment_line:
        lines.append(sglang_unit_facts.deployment_line("sglang", run_dir))
    lines += ["[Unit]", "Description=SGLang server sglang (eagle-deploy watcher)", "After=network-online.target",
              "Wants=network-online.target", "StartLimitIntervalSec=600", "StartLimitBurst=3", "", "[Service]",
              "Type=notify", "NotifyAccess=main",
              "ExecStart=%s" % " ".join('"%s"' % w for w in (python, "-I", program, run_dir, "sglang")),
              "Restart=on-failure", "RestartSec=10", "RestartPreventExitStatus=78",
              "TimeoutStartSec=%ds" % (stall_timeout + 60), "TimeoutStopSec=30s", "KillMode=control-group",
              "LimitMEMLOCK=infinity", "LimitNOFILE=1048576", "SyslogIdentifier=sglang-sglang", "", "[Install]",
              "WantedBy=multi-user.target", ""]
    return "\n".join(lines)


def old_module_unit(run_dir, unit_dir, deployment_line=True):
    path = os.path.join(unit_dir, "sglang-sglang.service")
    with open(path, "w") as fh:
        fh.write(old_module_unit_text(run_dir, deployment_line))
    return path


@pytest.mark.parametrize("deployment_line", [True, False], ids=["with the deployment line", "older, without"])
def test_a_unit_the_module_wrote_is_taken_over_by_the_roles_template(world, deployment_line):  # noqa: F811
    """Upgrade: the unit an earlier eagle-deploy's module wrote is this deployment's (its deployment line, or the run
    dir and name of its ExecStart): the role's check lets it be, the template replaces it, the launch starts it."""
    dirs = unit_dirs(world)
    path = old_module_unit(world.log_dir, dirs[0], deployment_line)
    assert sglang_unit_facts.unit_owner(open(path).read()) == (sglang_proc.deployment_name("sglang", world.log_dir),
                                                         os.path.realpath(world.log_dir))
    status, r, fake = systemd_run(world, READY)
    assert status == "ok", r
    text = open(path).read()
    assert sglang_unit_facts.UNIT_MARK in sglang_unit_facts.unit_header(text)[3] and "wait_for_model" not in text
    assert sglang_unit_facts.unit_owner(text) == (sglang_proc.deployment_name("sglang", world.log_dir),
                                            os.path.realpath(world.log_dir))
    # Below the header the template writes the unit the module wrote (same settings); its ExecStart runs the supervisor
    # program the role installed (program_dir), no longer the copy the module wrote into <run_dir>/watcher.
    new, old = (t.split("[Unit]", 1)[1].splitlines() for t in (text, old_module_unit_text(world.log_dir)))
    assert [w for w in new if not w.startswith("ExecStart=")] == [w for w in old if not w.startswith("ExecStart=")]
    assert 'ExecStart="%s" "-I" "-B" "%s" "%s" "sglang"' % (sys.executable, world.program_dir, world.log_dir) in new


@pytest.mark.parametrize("role", [True, False], ids=["role", "module"])
def test_a_unit_the_module_wrote_for_another_run_dir_is_refused(world, role):  # noqa: F811
    dirs = unit_dirs(world)
    path = old_module_unit(world.log_dir, dirs[0], deployment_line=False)
    before = open(path).read()
    status, r, fake = systemd_run(world, READY, run_dir=other_run_dir(world), role=role)
    assert status == "failed" and path in r["msg"] and os.path.realpath(world.log_dir) in r["msg"], r
    assert fake.touched() == [] and open(path).read() == before


def test_a_stop_between_two_steps_is_reported_by_the_next_step_not_undone(world):  # noqa: F811
    # The launch task waits in steps (step_time); `systemctl stop` lands between two of them. The next step
    # (resume_attempt) finds no server: it reports the attempt's own verdict instead of starting it again.
    status, r, fake = systemd_run(world, READY, _step_time=1.0)
    assert status == "ok" and r["pending"] is True and r["attempt"] == 3
    st = sglang_proc.read_json(world.log_dir, sglang_contract.STATUS % "sglang")
    st.update(verdict="stopped", status="stopped", phase="loading_weights")
    sglang_proc.write_files(world.log_dir, ((sglang_contract.STATUS % "sglang", json.dumps(st)),))
    fake.active = "inactive"
    starts = fake.started
    status, r, fake = systemd_run(world, [], _resume_attempt=3, fake=fake)
    assert status == "failed" and r["crash_class"] == "stopped", r
    assert "stopped while loading (phase 'loading_weights')" in r["msg"]
    assert fake.started == starts  # nothing was started again


# ---------------------------------------------------------------------------------------- the role's unit template
def test_the_roles_check_returns_what_the_template_needs_and_writes_nothing(world):  # noqa: F811
    dirs = unit_dirs(world)
    fake = FakeSystemd(world, dirs[0], READY)
    inject = {"systemctl": fake, "booted": lambda: (True, None), "unit_dirs": dirs}
    status, r = run(world, check_mode=True, inject=inject, launcher="auto", unit_dir=dirs[0], prove_launch=True)
    assert status == "ok" and r["launcher"] == "systemd" and r["unit"] == "sglang-sglang.service", r
    facts = r["unit_facts"]
    assert facts == dict(sglang_unit_facts.unit_facts("sglang", world.log_dir, dirs[0], sys.executable, world.program_dir),
                         exists=False, loaded=False)
    assert facts["path"] == unit_file(world)
    assert facts["deployment_line"] == "# eagle-deploy deployment: %s run_dir=%s" % (
        sglang_proc.deployment_name("sglang", world.log_dir), os.path.realpath(world.log_dir))
    assert facts["exec_start"] == [sys.executable, "-I", "-B", world.program_dir, world.log_dir, "sglang"]
    assert fake.touched() == [] and os.listdir(dirs[0]) == []
    assert not os.path.exists(os.path.join(world.log_dir, "watcher"))


def test_auto_resolves_to_detached_without_systemd_and_returns_no_unit(world):  # noqa: F811
    status, r = run(world, check_mode=True, launcher="auto",
                    inject={"booted": lambda: (False, "no /run/systemd/system")})
    assert status == "ok" and r["launcher"] == "detached" and "unit_facts" not in r, r  # the role's unit tasks skip


EXPECTED_UNIT = """#
# Ansible managed
#
# Written by eagle-deploy (role sglang_server, tasks/unit.yml). Changes here are replaced on its next run.
# eagle-deploy deployment: m-0123456789ab run_dir=/srv/run
[Unit]
Description=SGLang server m (eagle-deploy watcher)
After=network-online.target
Wants=network-online.target
StartLimitIntervalSec=600
StartLimitBurst=3

[Service]
Type=notify
NotifyAccess=main
ExecStart="/usr/bin/python3" "-I" "/srv/run/watcher/sglang_watcher.py" "/srv/run" "m"
Restart=on-failure
RestartSec=10
RestartPreventExitStatus=78
TimeoutStartSec=960s
TimeoutStopSec=30s
KillMode=control-group
LimitMEMLOCK=infinity
LimitNOFILE=1048576
SyslogIdentifier=sglang-m

[Install]
WantedBy=multi-user.target
"""


def facts_for(words, name="m", run_dir="/srv/run"):
    return {"name": "sglang-%s.service" % name, "path": "/etc/systemd/system/sglang-%s.service" % name,
            "deployment_line": "# eagle-deploy deployment: m-0123456789ab run_dir=/srv/run", "python": words[0],
            "program": words[2], "run_dir": run_dir, "exec_start": words, "exists": False, "loaded": False}


def test_the_template_renders_the_unit():
    words = ["/usr/bin/python3", "-I", "/srv/run/watcher/sglang_watcher.py", "/srv/run", "m"]
    text = role_unit.render(facts_for(words), name="m")
    assert text == EXPECTED_UNIT
    assert sglang_unit_facts.unit_owner(text) == ("m-0123456789ab", "/srv/run")
    assert "RestartPreventExitStatus=%d" % sglang_contract.EXIT_PERMANENT in text.splitlines()


@pytest.mark.parametrize("stall, stop, start_line, stop_line", [
    (0, 30, "TimeoutStartSec=infinity", "TimeoutStopSec=30s"),
    (120, 0, "TimeoutStartSec=180s", "TimeoutStopSec=1s"),
    ("900", "10", "TimeoutStartSec=960s", "TimeoutStopSec=10s"),  # (-e gives strings)
])
def test_the_templates_timeouts_follow_stall_and_stop_timeout(stall, stop, start_line, stop_line):
    words = ["/usr/bin/python3", "-I", "/srv/run/watcher/sglang_watcher.py", "/srv/run", "m"]
    lines = role_unit.render(facts_for(words), name="m", stall_timeout=stall, stop_timeout=stop).splitlines()
    assert start_line in lines and stop_line in lines


def test_the_templates_exec_start_quotes_every_word_for_systemd():
    # Backslashes and quotes escaped, % doubled (a specifier otherwise), spaces kept inside the quotes.
    words = ['/opt/py thon/bin/python3', "-I", '/srv/r"u%n\\x/watcher/sglang_watcher.py', '/srv/r"u%n\\x', "m"]
    line = next(l for l in role_unit.render(facts_for(words), name="m").splitlines() if l.startswith("ExecStart="))
    assert line == ('ExecStart="/opt/py thon/bin/python3" "-I" "/srv/r\\"u%%n\\\\x/watcher/sglang_watcher.py" '
                    '"/srv/r\\"u%%n\\\\x" "m"')
    assert sglang_unit_facts.exec_words(line[len("ExecStart="):]) == words


@pytest.mark.parametrize("managed", ["Ansible managed", "Managed by Ansible: {file} on {host}\nDo not edit"])
def test_a_unit_from_the_template_is_recognised_as_ours_whatever_ansible_managed_says(managed):
    words = ["/usr/bin/python3", "-I", "/srv/run/watcher/sglang_watcher.py", "/srv/run", "m"]
    text = role_unit.render(facts_for(words), name="m", managed=managed)
    assert sglang_unit_facts.unit_owner(text) == ("m-0123456789ab", "/srv/run")
    assert text.split("\n[Unit]\n", 1)[1] == EXPECTED_UNIT.split("\n[Unit]\n", 1)[1]


def test_a_routine_rerun_through_the_role_changes_nothing(world):  # noqa: F811
    status, r, fake = systemd_run(world, READY)
    assert status == "ok", r
    before = os.stat(unit_file(world)).st_mtime_ns, open(unit_file(world)).read()
    dirs = unit_dirs(world)
    inject = {"systemctl": fake, "booted": lambda: (True, None), "unit_dirs": dirs}
    status, r = run(world, check_mode=True, inject=inject, launcher="systemd", unit_dir=dirs[0])
    assert status == "ok" and r["unit_facts"]["exists"] and r["unit_facts"]["loaded"], r
    assert role_unit.install(r["unit_facts"], stall_timeout=120) is False  # the template task: unchanged
    assert (os.stat(unit_file(world)).st_mtime_ns, open(unit_file(world)).read()) == before

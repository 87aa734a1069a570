"""What every module unit test needs: exit_json / fail_json that raise instead of exiting (the
``module_exits`` fixture), and for wait_for_model a fake world: a fake clock with a timeline of events,
a fake launcher, fake HTTP and a fake /proc view, so that no test spawns a process or sleeps."""
from __future__ import annotations

import os
import sys

import pytest

from ansible.module_utils import basic
from ansible.module_utils import sglang_proc, sglang_result_schema, sglang_supervisor
from ansible.module_utils.testing import patch_module_args

import wait_for_model as wfm
from ansible_run import free_port
from installed_programs import install_supervisor


class ExitJson(Exception):
    pass


class FailJson(Exception):
    pass


def is_wait_for_model(module):
    """Whether ``module`` (an AnsibleModule) is wait_for_model's: its options are."""
    return set(getattr(module, "argument_spec", None) or ()) == set(wfm.argument_spec())


def result_problems(module, result, failed):
    """A wait_for_model result held against its schema (module_utils/sglang_result_schema.py): every test that makes the
    module exit checks that the module writes only keys of the schema, of the schema's types, where the schema says
    they are present. AssertionError naming the problems."""
    if is_wait_for_model(module):
        found = sglang_result_schema.problems(result, failed=failed)
        assert not found, "wait_for_model's result disagrees with module_utils/sglang_result_schema.py: %s" % "; ".join(found)


def exit_json(self, **kwargs):
    kwargs.setdefault("changed", False)
    result_problems(self, kwargs, failed=False)
    raise ExitJson(kwargs)


def fail_json(self, msg, **kwargs):
    kwargs["failed"] = True
    kwargs["msg"] = msg
    result_problems(self, kwargs, failed=True)
    raise FailJson(kwargs)


@pytest.fixture
def module_exits(monkeypatch):
    """AnsibleModule.exit_json / fail_json raise ExitJson / FailJson with the result."""
    monkeypatch.setattr(basic.AnsibleModule, "exit_json", exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", fail_json)


def module_result(main, args):
    """The result of one call of a module's ``main`` with ``args``: what exit_json or fail_json was given (the
    ``module_exits`` fixture, or a test's own raising pair, in place)."""
    with patch_module_args(args):
        try:
            main()
        except (ExitJson, FailJson) as e:
            return e.args[0]
    raise AssertionError("the module neither exited nor failed")


# ------------------------------------------------------------------ wait_for_model's fake world
SCHED_CRASH = (
    "[2026-12-02 10:00:05 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
    '  File "/opt/sglang/srt/managers/scheduler.py", line 2753, in run_scheduler_process\n'
    "    scheduler.event_loop_overlap()\n"
    "RuntimeError: NCCL error: unhandled system error\n"
)


class World(object):
    """A fake clock with a timeline of events (log writes, exits, child deaths, health)."""

    def __init__(self, log_dir):
        self.now = 1000.0
        self.t0 = None
        self.events = []  # (t_after_launch, fn)
        self.log_dir = log_dir
        # the role's part (tasks/program.yml), next to the run dir (its listing stays the module's): it runs it only
        self.program_dir = install_supervisor(None, os.path.join(
            os.path.dirname(log_dir), "%s.supervisor" % os.path.basename(log_dir)))
        self.health = lambda t: None  # t -> status or None
        self.rc = None
        self.children = {}
        self.spawned = []
        self.reaped = []
        self.killed = []
        self.cmdlines = {}
        self.http_calls = 0
        self.start_times = {}  # pid -> start time the fake /proc reports (default: the real one)
        self.probed = []  # interpreter checks run before a launch (Prober)
        self.probe_rc, self.probe_output = 0, ""
        self.tickers = []  # called after every move of the clock (the fake supervisors' steps)
        self.supervisors = []  # FakeSupervisor per launch
        self.supervisor_joins = True  # a fake supervisor asked to join a cgroup is in it
        self.supervisor_serves = False  # True: a fake supervisor goes on past ready, watching the serving server
        self.supervisor_cgroup_procs = None

    # clock & sleep
    def clock(self):
        return self.now

    def sleep(self, dt):
        self.now += dt
        self._fire()
        for tick in list(self.tickers):
            tick()

    def _fire(self):
        if self.t0 is None:
            return
        due = [e for e in self.events if self.t0 + e[0] <= self.now]
        self.events = [e for e in self.events if self.t0 + e[0] > self.now]
        for _, fn in sorted(due, key=lambda e: e[0]):
            fn()

    def at(self, t, fn):
        self.events.append((t, fn))

    def write(self, t, text):
        def fn():
            with open(os.path.join(self.log_dir, "sglang.log"), "a") as fh:
                fh.write(text)
        self.at(t, fn)

    # launcher
    def spawn(self, argv, env, cwd, log_fd, user, cgroup_procs=None):
        self.spawned.append({"argv": argv, "env": env, "cgroup_procs": cgroup_procs, "log_fd": log_fd})
        self.t0 = self.now
        world = self

        class Handle(object):
            pid = 4000000 + len(world.spawned)  # above pid_max: never a real process

            def poll(self):
                return world.rc

            def wait(self, timeout=None):
                if world.rc is None:
                    world.rc = -15  # the supervisor's stop (killpg of a PID above pid_max reaches nothing)
                return world.rc
        self._fire()
        return Handle()

    # http
    def http(self, url, headers, timeout):
        self.http_calls += 1
        if self.t0 is None:
            return self.health(None)
        return self.health(self.now - self.t0)

    # /proc view
    def kids(self, pid):
        return dict(self.children)

    def alive(self, pid):
        return self.rc is None


class Procs(object):
    def __init__(self, world):
        self.w = world

    def children(self, pid):
        return self.w.kids(pid)

    def alive(self, pid):
        return self.w.alive(pid)

    def start_time(self, pid):
        return self.w.start_times.get(pid, sglang_proc.proc_start_time(pid))

    def cmdline(self, pid):
        if pid in self.w.cmdlines:
            return self.w.cmdlines[pid]
        if self.w.spawned and pid == 4000000 + len(self.w.spawned):  # the leader launched last: its argv
            return self.w.spawned[-1]["argv"]
        return ["nvidia-smi"]


class NoCgroups(object):
    """A host without a writable cgroup v2: unit tests never create real cgroups."""

    def create(self, name):
        raise OSError(30, "Read-only file system")

    def of(self, pid):
        return None

    def remove(self, mount, path):
        return True


class FakeSupervisor(object):
    """The real supervisor program (``sglang_supervisor.Watcher``) run in this process on the world's fake clock: its
    server is the world's fake one, its /proc and HTTP the world's. It takes a step (a look) whenever the clock
    passed the pause it asked for, so the module's wait and the supervisor go on side by side, as two processes
    would. It stops at the verdict (no serving loop), unless ``world.supervisor_serves``: then it serves on, as the
    real one does, until its server fails or it is stopped."""

    def __init__(self, world, run_dir, name, number, cgroup=None, adopt=False):
        self.world = world
        self.cgroup = cgroup  # the deployment cgroup it was started in (its path), or None
        self.pid = 4200000 + number  # above pid_max: never a real process
        self.done = False
        self.busy = False
        self.terminated = False
        sup = self

        class Watcher(sglang_supervisor.Watcher):
            def signals(self):
                pass  # the test process's signals are not the fake's

            def own_cgroup(self):
                # where the fake supervisor "is": the cgroup it was asked to join, when the world lets it join
                return ("/sys/fs/cgroup", sup.cgroup) if sup.cgroup and world.supervisor_joins else (None, None)

            def me(self):
                return {"pid": sup.pid, "start_time": 1, "cmdline": ["fake-supervisor"]}

        self.watcher = Watcher(run_dir, name, clock=world.clock, wall=lambda: 0.0, sleep=world.sleep,
                               spawner=self.spawn, procs=Procs(world), http=world.http,
                               serving=world.supervisor_serves, adopt=adopt)
        self.steps = self.watcher.steps()
        self.wake = world.now
        world.tickers.append(self.tick)
        self.tick()

    def spawn(self, cfg, user, out_w, token):
        env = dict(cfg["env"], **{sglang_proc.RUN_TOKEN_VAR: token})
        return self.world.spawn(cfg["argv"], env, cfg.get("chdir"), out_w, user)

    def tick(self):
        if self.done or self.busy:
            return
        self.busy = True
        try:
            while not self.done and self.world.now >= self.wake:
                try:
                    self.wake = self.world.now + next(self.steps)
                except StopIteration:
                    self.done = True
        finally:
            self.busy = False

    def poll(self):
        """The supervisor's exit status, None while it runs (a ready one serves on)."""
        return self.watcher.code if self.done else None


class Popener(object):
    """The module's detached launcher: its supervisor is a FakeSupervisor; also the run state's supervisor view."""

    def __init__(self, world):
        self.w = world

    def spawn_supervisor(self, argv, err_fd, cgroup_procs=None):
        adopt = argv[-1] == "--adopt"
        run_dir, name = (argv[-3], argv[-2]) if adopt else (argv[-2], argv[-1])
        self.w.supervisor_cgroup_procs = cgroup_procs
        cgroup = None
        if cgroup_procs is not None:
            cgroup = "/" + os.path.relpath(os.path.dirname(cgroup_procs), "/sys/fs/cgroup")
        sup = FakeSupervisor(self.w, run_dir, name, len(self.w.supervisors) + 1, cgroup, adopt=adopt)
        self.w.supervisors.append(sup)
        return sup

    def _of(self, state):
        pid = ((state or {}).get("watcher") or {}).get("pid")
        return [sup for sup in self.w.supervisors if sup.pid == pid]

    def alive(self, state):
        return any(sup.poll() is None and not sup.terminated for sup in self._of(state))

    def terminate(self, state):
        for sup in self._of(state):
            sup.terminated = True
            sup.watcher.stopping = True
            sup.tick()

    def wait_gone(self, state, grace, clock, sleep):
        """A terminated fake supervisor is gone at once (its stop ran in terminate)."""
        assert not self.alive(state)
        return None


class Prober(object):
    """prove_it_runs() without a process: records the command and answers ``world.probe_rc``."""

    def __init__(self, world):
        self.w = world

    def run(self, argv, env, cwd, user, timeout):
        self.w.probed.append(argv)
        return self.w.probe_rc, self.w.probe_output


def world_tools(world):
    """ModelWaiter's injectable tools (clock, launcher, HTTP, /proc, ...) in the fake world."""
    popener = Popener(world)
    return dict(clock=world.clock, sleep=world.sleep, popener=popener, supervisors=popener, http=world.http,
                procs=Procs(world), wall=lambda: 0.0, cgroups=NoCgroups(), prober=Prober(world),
                background_health=False, booted=lambda: (False, "no /run/systemd/system (unit test)"),
                caller_gone=lambda: False)


def run(world, check_mode=False, inject=None, **args):
    params = {
        "argv": [sys.executable, "-m", "sglang.launch_server", "--config", "/etc/sglang.yaml"],
        "log_dir": world.log_dir,
        "timeout": 600,
        "stall_timeout": 120,
        "port": free_port(),  # the real port check runs: never depend on what else listens here
        "program_dir": world.program_dir,
    }
    params.update(args)
    if params.get("api_key") and "argv" not in args:
        # The role's 0600 --config file holds the key (its one copy on disk): the supervisor reads it from there.
        config = os.path.join(os.path.dirname(world.log_dir), "sglang-%s.yaml" % os.path.basename(world.log_dir))
        with open(os.open(config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as fh:
            fh.write('model-path: "/models/m"\napi-key: "%s"\n' % params["api_key"])
        params["argv"] = [sys.executable, "-m", "sglang.launch_server", "--config", config]
    if check_mode:
        params["_ansible_check_mode"] = True
    with patch_module_args(params):
        kw = world_tools(world)
        kw.update(inject or {})
        try:
            wfm.main(**kw)
        except FailJson as e:
            return "failed", e.args[0]
        except ExitJson as e:
            return "ok", e.args[0]
    raise AssertionError("module did not exit")


@pytest.fixture
def world(tmp_path):
    return World(str(tmp_path))


@pytest.fixture
def stops(monkeypatch):
    """stop_tree replaced by a recorder: a test can prove that nothing would have been signalled."""
    calls = []

    def fake_stop_tree(state, grace=30.0, clock=None, sleep=None, poll=0.1):
        calls.append(state.get("pid"))
        return {"signalled": [state.get("pid")], "killed": [], "remaining": [], "seconds": 0.0}
    monkeypatch.setattr(sglang_proc, "stop_tree", fake_stop_tree)
    return calls


def record_self_as_server(world, fingerprint="old", log_text="", **extra):
    """A trusted run state whose leader is this (live) test process: use it with ``stops``."""
    log_path = os.path.join(world.log_dir, "sglang_r1.log")
    with open(log_path, "w") as fh:
        fh.write(log_text)
    state = dict(sglang_proc.identity(os.getpid()), fingerprint=fingerprint, fingerprint_parts={}, attempt=1,
                 log_path=log_path, user="root")
    state.update(extra)
    sglang_proc.write_state(world.log_dir, "sglang", state)
    return state


def serve(world, **args):
    """Our server started through the module (detached) with a fake supervisor that serves on after ready, as the real
    one does (``world.supervisor_serves``): what ``state: watched`` waits on. Health answers 200 unless the test set
    it. Returns the start's result."""
    world.supervisor_serves = True
    if world.health(0.0) is None:
        world.health = lambda t: 200
    status, r = run(world, **args)
    assert status == "ok", r
    return r


def later(world, seconds, fn):
    """Run ``fn`` ``seconds`` from now on the fake clock (``World.at`` counts from the launch)."""
    world.at(world.now - world.t0 + seconds, fn)


def append(path, text):
    """A function that appends ``text`` to the file at ``path`` (a log line written on the fake clock)."""
    def fn():
        with open(path, "a") as fh:
            fh.write(text)
    return fn

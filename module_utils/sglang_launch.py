# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""wait_for_model asks the supervisor program to start: the detached launcher's supervisor (``setsid``, the
deployment's cgroup), its config (``sglang_contract.supervisor_config``), the program the role sglang_server installed
(``program_dir``, checked before it runs: sglang_program), and a supervisor put back (``--adopt``) next to a serving
server whose own is gone.

Module side only. Process launch, cgroups and the recorded supervisor's checks are injectable (the Host's).
:class:`Supervision` takes the Settings and the Host; its launches return their report, the verdict's included.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import signal
import subprocess
import sys

from ansible.module_utils import (
    sglang_contract, sglang_log, sglang_probe, sglang_proc, sglang_program, sglang_progress, sglang_redact,
    sglang_verdict, sglang_supervisor,
)
from ansible.module_utils.sglang_unit_facts import supervisor_dir, unit_name
from ansible.module_utils.sglang_input_checks import WaitError
from ansible.module_utils import sglang_settings, sglang_unit_guard
from ansible.module_utils.sglang_reports import findings
from ansible.module_utils.sglang_status_file import StatusWait

# The supervisor program's files this module ships (sglang_program.SUPERVISOR): what an installed one is compared with.
SUPERVISOR_MODULES = (sglang_supervisor, sglang_contract, sglang_verdict, sglang_log, sglang_proc, sglang_redact,
                      sglang_progress, sglang_probe)
INSTALLER = "the role sglang_server (tasks/program.yml)"


class Popener(object):
    """Starts the supervisor program detached (``launcher: detached``). Injectable so unit tests need no processes."""

    def spawn_supervisor(self, argv, err_fd, cgroup_procs=None):
        """``argv`` (the supervisor program) in a session of its own, stdin and stdout /dev/null, stderr (its own
        lines) into ``err_fd``; joined to the deployment's cgroup (``cgroup_procs``) before exec, so that every
        process it starts, the server included, is born in it."""
        kwargs = {}
        cg_fd = None
        if cgroup_procs is not None:
            cg_fd = os.open(cgroup_procs, os.O_WRONLY | os.O_CLOEXEC)

            def join():
                try:
                    os.write(cg_fd, b"0\n")
                except OSError:
                    pass  # the supervisor records what it finds: tree tracking by session then
            kwargs["preexec_fn"] = join
        try:
            return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err_fd, cwd="/",
                                    env=supervisor_env(), close_fds=True, start_new_session=True, **kwargs)
        finally:
            if cg_fd is not None:
                os.close(cg_fd)


class Supervisors(object):
    """The detached supervisor recorded in a run state (``state["watcher"]``): alive (same PID, start time and
    command line) and, for a stop, SIGTERM (it ends its server's session and writes ``stopped``). Injectable."""

    def alive(self, state):
        return sglang_proc.recorded_process(state, "watcher") is not None

    def terminate(self, state):
        pid = sglang_proc.recorded_process(state, "watcher")
        if pid is not None:  # through a pidfd opened before the identity check: never a reused PID
            sglang_proc.signal_verified(pid, state["watcher"]["start_time"], signal.SIGTERM)

    def wait_gone(self, state, grace, clock, sleep, poll=0.05):
        """After its SIGTERM and the tree's stop: until the supervisor has ended (the server's last lines copied,
        ``stopped`` written), so that a stop leaves nothing of the deployment running; SIGKILL (verified identity)
        after ``grace`` s. Returns its PID when it had to be killed, else None."""
        deadline = clock() + grace
        while self.alive(state) and clock() < deadline:
            sleep(poll)
        if not self.alive(state):
            return None
        sup = state["watcher"]
        sglang_proc.signal_verified(sup["pid"], sup["start_time"], signal.SIGKILL)
        deadline = clock() + 10.0
        while self.alive(state) and clock() < deadline:
            sleep(poll)
        return sup["pid"]


def supervisor_env():
    """The supervisor's own environment: nothing of the module's (the server's comes from its config file)."""
    return {"PATH": os.environ.get("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
            "LANG": os.environ.get("LANG", "C.UTF-8"), "PYTHONUNBUFFERED": "1"}


class Cgroups(object):
    """The server's own cgroup v2 (where the host allows one). Injectable for tests."""

    def create(self, name):
        """(mount, path) of a fresh, empty cgroup for the server; OSError when not possible."""
        if os.geteuid() != 0:
            raise OSError(errno.EPERM, "the module does not run as root")
        mount = sglang_proc.cgroup2_mount()
        return mount, sglang_proc.create_cgroup(name, mount=mount)

    def of(self, pid):
        return sglang_proc.proc_cgroup(pid)

    def remove(self, mount, path):
        return sglang_proc.remove_cgroup(mount, path)


# Seconds a supervisor put back (--adopt) has to record itself before the run that started it lets the lock go.
ADOPT_RECORD_WAIT = 10


class Supervision(object):
    def __init__(self, s, host):
        self.s = s  # the Settings
        self.host = host  # the Host: process launch, cgroups, clock, sleep, systemctl, warnings

    def _own_cgroup(self, report):
        """(mount, path) of a fresh cgroup for the server, or None (with the reason in ``report``)."""
        if not self.s.p["cgroup"]:
            report["tree_tracking_note"] = "cgroup: false"
            return None
        try:
            return self.host.cgroups.create(sglang_proc.deployment_name(self.s.p["name"], self.s.run_dir))
        except (OSError, IOError) as e:
            report["tree_tracking_note"] = "no cgroup of its own (%s): process tree by session" % (e.strerror or e)
            return None

    def supervisor_config(self, parts, fp, cgroup=None):
        """The supervisor program's config (``<name>.watcher.json``, 0600: the server's environment may hold secrets):
        what it starts, as whom, where it logs, how it asks health, and the wait's numbers. Written at each (re)start;
        returns its launch token."""
        p, s = self.s.p, self.s
        name = p["name"]
        token = secrets.token_hex(8)
        config = sglang_contract.supervisor_config(
            p, token, sglang_settings.child_env(s),
            # never the API key: the supervisor reads it from the server's --config file (api_key_file)
            [v for v in sglang_settings.secret_values(s, self.host.warn) if v != p["api_key"]], s.key_source, fp,
            parts, s.port, unit_name(name) if s.launcher == "systemd" else None, cgroup, events=self.host.events)
        try:
            sglang_proc.write_files(self.s.run_dir, ((sglang_contract.CONFIG % name, json.dumps(config)),), mode=0o600)
            sglang_proc.remove_file(self.s.run_dir, sglang_contract.STATUS % name)
        except sglang_proc.UntrustedState as e:
            raise WaitError(str(e))
        return token

    def launch(self, parts, fp):
        """``launcher: detached``: the supervisor program (the one the systemd unit runs) in a session and, as root,
        the deployment's cgroup of its own; it starts the server, logs, records and decides. Then wait on its status
        file as for a unit. Returns the report, the verdict's included."""
        with findings() as report:
            return self._launch(parts, fp, report)

    def _launch(self, parts, fp, report):
        p = self.s.p
        program = self.installed_program()
        cgroup = self._own_cgroup(report)
        token = self.supervisor_config(parts, fp, cgroup)
        cgroup_procs = os.path.join(cgroup[0], cgroup[1].lstrip("/"), "cgroup.procs") if cgroup else None
        err_fd = self.open_supervisor_log()
        try:
            handle = self.host.popener.spawn_supervisor(
                sglang_program.argv(sys.executable, program, self.s.run_dir, p["name"]), err_fd,
                cgroup_procs=cgroup_procs)
        except OSError as e:
            if cgroup:
                self.host.cgroups.remove(*cgroup)
            raise WaitError("could not start the supervisor program %s: %s" % (program, e))
        finally:
            os.close(err_fd)
        tracking = "session"
        if cgroup is not None:
            if self.host.cgroups.of(handle.pid) == cgroup[1]:
                tracking = "cgroup"
            else:
                report["tree_tracking_note"] = "the supervisor did not join %s: process tree by session" % cgroup[1]
                self.host.cgroups.remove(*cgroup)  # empty: nothing of ours is in it (the supervisor records none)
        report.update(changed=True, tree_tracking=tracking, supervisor_pid=handle.pid)
        report.update(StatusWait(self.s, self.host).wait_service(token, attached=False, supervisor=handle))
        return report

    def launch_unit(self, parts, fp):
        """Check the installed supervisor program (the unit's ExecStart), write its config (0600: it holds the
        secret_environment values, never the API key, which the watcher reads from the server's own --config file) and start our unit
        without blocking (a Type=notify start blocks until READY=1); then wait on the watcher's status file. The
        unit is the role's (check_unit made sure it is there, ours and loaded); the module writes, reloads and
        enables none. Returns the report, the verdict's included."""
        # (another deployment may have taken the name since check_unit)
        sglang_unit_guard.check_unit_still_ours(self.s.p, self.s.run_dir, "start")
        self.installed_program()
        token = self.supervisor_config(parts, fp)
        unit = unit_name(self.s.p["name"])
        self.host.systemctl("reset-failed", unit)  # a unit that hit its start limit refuses a start until reset
        sglang_unit_guard.must(self.host.systemctl, "start", "--no-block", unit)
        with findings() as report:
            report.update(changed=True, unit=unit)
            report.update(StatusWait(self.s, self.host).wait_service(token, attached=False))
            return report

    def open_supervisor_log(self):
        """The detached supervisor's stderr: ``<run_dir>/<name>.supervisor.log`` (0600, appended), opened in the
        trusted run dir without following a symlink."""
        try:
            dir_fd = sglang_proc.open_run_dir(self.s.run_dir)
        except sglang_proc.UntrustedState as e:
            raise WaitError(str(e))
        try:
            return os.open(sglang_contract.SUPERVISOR_LOG % self.s.p["name"], os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW |
                           os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
        finally:
            os.close(dir_fd)

    def supervisor_gone(self, state, healthy):
        """Our detached server runs, but its supervisor program is gone (killed, or a server of an older eagle-deploy
        that had none): say so, and put one back without a restart when the server answers (``--adopt``: it takes
        over the recorded tree and watches it serving). Its output went to the old supervisor: what it printed since
        is lost, and the next (re)start logs again. Returns the report (``supervisor``, ...)."""
        with findings() as report:
            self._supervisor_gone(state, healthy, report)
            return report

    def _supervisor_gone(self, state, healthy, report):
        p = self.s.p
        report["supervisor"] = "gone"
        words = ("the server of %s (PID %s) was running without its supervisor program (nothing followed its "
                 "processes, and its output since the supervisor went is lost)" % (p["name"], state.get("pid")))
        if not healthy or self.s.check or not state.get("watcher"):
            then = ("it would be put back (check mode)" if healthy and state.get("watcher")
                    else "force_restart starts it again under one")
            self.host.say(words + "; %s" % then)
            return
        program = self.installed_program()
        cg = sglang_proc.dedicated_cgroup(state)
        cgroup_procs = os.path.join(cg[0], cg[1].lstrip("/"), "cgroup.procs") if cg else None
        err_fd = self.open_supervisor_log()
        try:
            handle = self.host.popener.spawn_supervisor(
                sglang_program.argv(sys.executable, program, self.s.run_dir, p["name"], "--adopt"), err_fd,
                cgroup_procs=cgroup_procs)
        except OSError as e:
            raise WaitError("%s; a supervisor could not be put back: %s" % (words, e))
        finally:
            os.close(err_fd)
        # Under the lock until it has recorded itself: a run right after ours must find it, not start a second one.
        deadline = self.host.clock() + ADOPT_RECORD_WAIT
        while handle.poll() is None and self.host.clock() < deadline:
            now = sglang_proc.read_state(self.s.run_dir, p["name"]) or {}
            if (now.get("watcher") or {}).get("pid") == handle.pid:
                break
            self.host.sleep(0.02)
        else:
            raise WaitError("%s; the supervisor put back (PID %d) did not take over within %d s (exit status %s): read "
                            "%s" % (words, handle.pid, ADOPT_RECORD_WAIT, handle.poll(),
                                    os.path.join(self.s.run_dir, sglang_contract.SUPERVISOR_LOG % p["name"])))
        report.update(changed=True, supervisor="restored", supervisor_pid=handle.pid)
        self.host.say(words + "; a supervisor was put back (PID %d), without a restart" % handle.pid)

    def supervisor_alive(self, state):
        """Whether the supervisor program recorded in ``state`` (detached) still runs."""
        return self.host.supervisors.alive(state)

    def program_dir(self):
        """Where the role installed the supervisor program (``program_dir``, default ``<run_dir>/supervisor``)."""
        return supervisor_dir(self.s.run_dir, self.s.p.get("program_dir"))

    def installed_program(self):
        """The supervisor program's directory, once checked: installed, and nothing in it or above it writable by
        anyone less privileged than this module (sglang_program.check). The module runs it; it never writes it."""
        directory = self.program_dir()
        try:
            sglang_program.check(directory, "the supervisor program", INSTALLER)
        except (sglang_program.ProgramError, OSError) as e:
            raise WaitError(str(e))
        return directory

    def program_problem(self):
        """What is wrong with the installed supervisor program, in words, or None when it is this eagle-deploy's (its
        files the copies in this module's payload) and trusted. Its next start would run (or refuse) the installed
        one."""
        directory = self.program_dir()
        try:  # trusted first: nothing of it is read before (a file someone else could write, or grow)
            sglang_program.check(directory, "the supervisor program", INSTALLER)
        except (sglang_program.ProgramError, OSError) as e:
            return "%s; its next start is refused" % e
        drift = sglang_program.drift(directory, sglang_program.sources(SUPERVISOR_MODULES))
        if drift:
            return ("the supervisor program in %s is not this eagle-deploy's (%s differ): its next start runs it as it "
                    "is; %s installs this one" % (directory, ", ".join(drift), INSTALLER))
        return None

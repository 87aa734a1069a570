# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host watcher program: what ``sglang-<name>.service`` runs (``Type=notify``).

    python3 -I -B <program_dir> RUN_DIR NAME

Standard library only, plus the module_utils it is installed with: the role sglang_server installs this file and the
ones it imports (sglang_program.SUPERVISOR) as the package ``eagle_deploy`` in ``<program_dir>`` (default
``<run_dir>/supervisor``, root-owned), with a launcher that calls :func:`main`; ``wait_for_model`` runs it and never
writes it (sglang_program). It:

* reads its configuration from ``<run_dir>/<name>.watcher.json`` (written by ``wait_for_model``, 0600, trusted only
  through the root-owned run dir): the server's argv, environment (the secret environment included), user, working
  directory, log dir, health URL and the wait's numbers; never the API key, which it reads from the server's own 0600
  ``--config`` file (``api_key_file``: its path and the key line's name) for its health header and redaction list;
* starts SGLang as its child, as the service user, in a session of its own, its output through a pipe;
* writes that output into the attempt's log ``<log_dir>/<name>_r<N>.log`` with every secret replaced by ``***``
  (``sglang_redact.Redactor``), and the same redacted lines to its own stdout (the journal);
* records the run state ``<run_dir>/<name>.json`` (what ``wait_for_model`` and ``gpu_facts`` call ours);
* follows the log and the processes with ``sglang_verdict.Watch`` (the same watchers and ``decide()`` as
  ``wait_for_model``: text never acts alone) and tells systemd: ``STATUS=`` at every phase and shard,
  ``EXTEND_TIMEOUT_USEC`` only while the log moves (a slow load that moves never times out; a stuck one fails by
  ``TimeoutStartSec``), ``READY=1`` only once the health URL (``/health_generate``: a real generation) answered 200;
* keeps its state in ``<run_dir>/<name>.status.json`` (phase, shards, phases, verdict and the verdict's report;
  while serving, what a watch of the serving server reads: ``serving``, see ServingView) and the load's phase
  durations in ``<run_dir>/<name>.loads.json`` once it is ready (the next load's ETA);
* on a failure, prints the class and the evidence, and exits ``EXIT_PERMANENT`` (78) when a restart cannot fix it
  (any failure before ready except a hang: bad config, OOM at load, the early-init AttributeError on the readiness
  decode) or ``EXIT_RESTARTABLE`` (69) otherwise (the unit has ``RestartPreventExitStatus=78``);
* on SIGTERM (``systemctl stop``; systemd signals the whole cgroup) writes the server's last lines and exits 0.

Without ``NOTIFY_SOCKET`` (not started by systemd) the notifications are skipped and everything else is the same.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time

# Relative imports only: the modules import this file as ansible.module_utils.sglang_supervisor, the installed program
# as eagle_deploy.sglang_supervisor (sglang_program), the same files either way.
from . import sglang_probe, sglang_proc, sglang_progress, sglang_redact, sglang_verdict
from .sglang_contract import (
    API_KEY_NAMES, CONFIG, EXIT_PERMANENT, EXIT_SETUP, EXIT_STOPPED, STATUS, exit_status,
    read_config_secret,
)
from .sglang_log import LogClassifier, LogFollower

# The contract with wait_for_model (file names, exit statuses, the config's API key source): sglang_contract.
SERVE_POLL = 0.5  # s between looks at a serving server's processes
SERVE_HEALTH_INTERVAL = 10.0  # s between health requests to a serving server (each /health_generate is a generation);
# never shorter than the server's health window plus sglang_probe.MARGIN (serve_numbers)
EXTEND_EVERY = 5.0  # s at least between two EXTEND_TIMEOUT_USEC (each one counts from when it is received)
READ_EVERY = 1.0  # s at least between two status writes that only move ``serving.log_read`` (a log that grows)


# ------------------------------------------------------------------------------ systemd
class Notifier(object):
    """sd_notify(3) over ``NOTIFY_SOCKET`` (a datagram socket; ``@`` = the abstract namespace). No socket: no-op."""

    def __init__(self, address=None):
        address = os.environ.get("NOTIFY_SOCKET") if address is None else address
        self.sock = None
        self.sent = []  # the last messages, for the status file and tests
        if address:
            if address.startswith("@"):
                address = "\0" + address[1:]
            self.address = address
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)

    def send(self, **fields):
        text = "\n".join("%s=%s" % (k, v) for k, v in fields.items())
        self.sent = (self.sent + [text])[-20:]
        if self.sock is None:
            return
        try:
            self.sock.sendto(text.encode("utf-8", "replace"), self.address)
        except OSError:
            pass  # systemd went away (shutdown): the server is not the notifier's to stop


# ------------------------------------------------------------------------------ the log copy thread
class LogCopy(threading.Thread):
    """Copies the server's pipe into the log file and to ``echo`` (the journal), secrets replaced, until end of file
    (the last server process closed its end)."""

    def __init__(self, pipe_fd, log_fd, secrets_, echo_fd=None):
        super(LogCopy, self).__init__(name="log-copy", daemon=True)
        self.pipe_fd, self.log_fd, self.echo_fd = pipe_fd, log_fd, echo_fd
        self.redactor = sglang_redact.Redactor(secrets_)
        self.lost = 0

    def _out(self, data):
        if not data:
            return
        if not sglang_redact.write_all(self.log_fd, data, os.write):
            self.lost += len(data)
        if self.echo_fd is not None:
            sglang_redact.write_all(self.echo_fd, data, os.write)  # the journal may drop it

    def run(self):
        while True:
            try:
                data = os.read(self.pipe_fd, sglang_redact.READ_SIZE)
            except InterruptedError:
                continue
            if not data:
                break
            self._out(self.redactor.feed(data))
        self._out(self.redactor.flush())
        os.close(self.pipe_fd)


# ------------------------------------------------------------------------------ what a watch of a serving server reads
OUTLIVED = ("every server process stayed alive and the health URL answered 200 to a request sent after this line was "
            "read")
SUPERSEDED = ("a later crash line after a raw request echo took its place (a client's prompt can write any line "
              "there)")


class ServingView(object):
    """``status["serving"]``: what a watch of the serving server (``wait_for_model state=watched``) reads, kept by the
    supervisor while it serves. ``set_aside``: the crash lines it set aside (the server outlived them, or a later one
    after a raw request echo took their place), the last ``KEEP``, each with its class, line (control characters
    escaped), line number, byte ``offset`` of its line in the attempt log, hint, exception and why
    (``set_aside_total`` counts them all); ``crash_pending``: the crash line that stands (not proven, not cleared
    yet) or None; ``health``: the last answer and failures in a row; ``log_read``: the byte offset of the attempt log
    it has read up to (None: it does not follow the log, an adopted server); and the numbers of its health watch.
    ``update()`` says when the status must be written: when any of these changes, ``log_read`` alone at most every
    ``READ_EVERY`` s (never on every look)."""

    KEEP = 20
    LINE_MAX = 500

    def __init__(self, log_fd, settings, interval):
        self.fd = log_fd  # the attempt log, read by position (pread), or None
        self.numbers = {"serve_health_interval": interval, "health_interval": settings.get("health_interval"),
                        "health_timeout": settings.get("health_timeout"),
                        "unhealthy_after": settings.get("unhealthy_after"),
                        "health_window": settings.get("health_window"),
                        "serve_stuck_seconds": settings.get("serve_stuck_seconds"),
                        "serve_stuck_action": settings.get("serve_stuck_action")}
        self.known = (1, 0)  # (line number, byte offset) of a line start found last
        self.offsets = {}  # line number -> byte offset, of the lines asked for
        self.set_aside = []
        self.total = 0
        self.taken = {"dismissed": 0, "superseded": 0}
        self.view = None  # what was written last, without log_read
        self.read = None
        self.written_at = None

    def offset_of(self, lineno):
        """Byte offset of the start of line ``lineno`` (1: the first) of the attempt log, or None."""
        if self.fd is None or not lineno or lineno < 1:
            return None
        if lineno in self.offsets:
            return self.offsets[lineno]
        line, pos = self.known if lineno >= self.known[0] else (1, 0)
        while line < lineno:
            chunk = os.pread(self.fd, 1 << 20, pos)
            if not chunk:
                return None
            need = lineno - line
            if chunk.count(b"\n") < need:
                line += chunk.count(b"\n")
                pos += len(chunk)
                continue
            at = -1
            for _line in range(need):
                at = chunk.find(b"\n", at + 1)
            line, pos = lineno, pos + at + 1
        self.known = (line, pos)
        if len(self.offsets) >= 4 * self.KEEP:
            self.offsets.clear()
        self.offsets[lineno] = pos
        return pos

    def entry(self, crash, why=None, clf=None):
        """A crash line as a watch reads it; ``class_uncertain`` when it comes at or after a raw request echo of
        ``clf`` (a client's prompt can have written it: its class is shown flagged)."""
        text = sglang_progress.operator_text
        out = {"class": crash["class"], "line": text(crash["line"])[:self.LINE_MAX], "lineno": crash["lineno"],
               "offset": self.offset_of(crash["lineno"]), "hint": crash.get("hint"),
               "exception": text(crash.get("exception") or "")[:self.LINE_MAX] or None}
        if crash.get("cause"):
            out["cause"] = crash["cause"]
        if why is not None:
            out["why"] = why
        if clf is not None and getattr(clf, "crash_after_raw_echo", lambda c: None)(crash) is not None:
            out["class_uncertain"] = True
        return out

    def update(self, w, now):
        """The ``serving`` fields to write now, or None when nothing a watch reads has changed."""
        clf = w.log.clf
        for kind, why in (("dismissed", OUTLIVED), ("superseded", SUPERSEDED)):
            found = getattr(clf, kind, None) or []
            for crash in found[self.taken[kind]:]:
                self.set_aside = (self.set_aside + [self.entry(crash, why, clf)])[-self.KEEP:]
                self.total += 1
            self.taken[kind] = len(found)
        pending = clf.crash
        view = {"set_aside": self.set_aside, "set_aside_total": self.total,
                "crash_pending": self.entry(pending, clf=clf) if pending is not None else None,
                "health": {"last": w.health.last, "failed_in_a_row": w.health.fails},
                "activity": activity_view(w)}
        view.update(self.numbers)
        read = w.log.follower.offset if self.fd is not None else None
        if view == self.view and (read == self.read or now - self.written_at < READ_EVERY):
            return None
        self.view, self.read, self.written_at = view, read, now
        return dict(view, log_read=read)


def activity_view(w):
    """``serving.activity``: ``state`` None (health answers), ``busy`` (health fails, something moves: kept serving)
    or ``stuck`` (nothing moved for ``serve_stuck_seconds``), with the last ``/v1/loads`` figures."""
    act = w.activity
    if act is None:
        return None
    return {"state": w.serve_state, "running": act.loads[0] if act.loads else None,
            "waiting": act.loads[1] if act.loads else None, "health_kept_back": w.health.kept_back}


def serve_numbers(cfg):
    """The settings with the serving health numbers made safe for the server: the health window (the server's
    ``SGLANG_HEALTH_CHECK_TIMEOUT`` as configured, default 20 s), a client timeout and an interval no shorter than it
    plus the margin, ``serve_stuck_seconds`` and ``serve_stuck_action``."""
    settings = dict(cfg["settings"])
    window = sglang_probe.health_window(cfg.get("env"))
    settings["health_window"] = window
    settings["health_timeout"] = sglang_probe.probe_timeout(settings.get("health_timeout"), window)
    settings["serve_health_interval"] = sglang_probe.serve_interval(
        settings.get("serve_health_interval", SERVE_HEALTH_INTERVAL), window)
    settings["serve_stuck_seconds"] = float(settings.get("serve_stuck_seconds") or sglang_probe.STUCK_DEFAULT)
    if settings.get("serve_stuck_action") not in sglang_probe.STUCK_ACTIONS:
        settings["serve_stuck_action"] = "report"
    return settings


def serving_text(w, settings, ready_text):
    """The unit's STATUS= while serving."""
    act = w.activity
    if w.serve_state == "busy":
        running, waiting = act.loads if act.loads else ("?", "?")
        return ("serving, busy: health did not answer in its %.0f s window; %s running, %s waiting (requests and the "
                "log are followed; nothing is stopped)" % (settings["health_window"], running, waiting))
    if w.serve_state == "stuck":
        return ("serving, stuck: health fails and nothing moved for %.0f s (%s)" % (
            settings["serve_stuck_seconds"], "restarting" if settings["serve_stuck_action"] == "restart" else
            "reported, not restarted: serve_stuck_action is report"))
    return ready_text


# ------------------------------------------------------------------------------ the program
class ServerStart(object):
    """The supervisor's launch of the server, a part of :class:`Watcher`: its config and API key, the service user,
    the attempt's log, the server's process and its run state."""

    # ---------------------------------------------------------------- set-up
    def load_config(self):
        if not sglang_proc.safe_name(self.name):
            raise SystemExit("sglang-watcher: name %r is not allowed" % self.name)
        cfg = sglang_proc.read_json(self.run_dir, CONFIG % self.name)
        if cfg is None:
            raise SystemExit("sglang-watcher: %s/%s is missing or not JSON: run the playbook (wait_for_model writes "
                             "it)" % (self.run_dir, CONFIG % self.name))
        self.cfg = cfg
        self.take_api_key(cfg)
        return cfg

    def take_api_key(self, cfg):
        """The API key from the server's own 0600 ``--config`` file (``api_key_file``: its path and the key's
        name; wait_for_model never writes the key into this program's config): the health request's bearer header
        and one more secret the log never shows."""
        source = cfg.get("api_key_file")
        if not source:
            return
        try:
            found = read_config_secret(source["path"], (source.get("key"),) if source.get("key") else API_KEY_NAMES)
        except (OSError, ValueError) as e:
            raise SystemExit("sglang-watcher: cannot read the API key from %s: %s" % (source.get("path"), e))
        if found is None or not found[1]:
            raise SystemExit("sglang-watcher: %s has no %s line: run the playbook (the role writes the key there)"
                             % (source.get("path"), source.get("key") or "api_key"))
        key = found[1]
        cfg["headers"] = dict(cfg.get("headers") or {}, Authorization="Bearer %s" % key)
        if key not in (cfg.get("secrets") or []):
            cfg["secrets"] = list(cfg.get("secrets") or []) + [key]

    def user(self):
        name = self.cfg.get("user")
        if not name:
            return None
        pw = pwd.getpwnam(name)
        return pw.pw_uid, pw.pw_gid, os.getgrouplist(pw.pw_name, pw.pw_gid)

    def open_attempt_log(self, user):
        log_dir, name = self.cfg["log_dir"], self.name
        attempt = sglang_verdict.next_attempt(log_dir, name)
        for _try in range(100):  # the service user may create the next name first: take the next free one
            path = os.path.join(log_dir, "%s_r%d.log" % (name, attempt))
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o640)
                break
            except FileExistsError:
                attempt += 1
        else:
            raise SystemExit("sglang-watcher: no free attempt log name in %s" % log_dir)
        if user is not None:
            os.fchown(fd, user[0], user[1])
        sglang_verdict.point_link(os.path.join(log_dir, "%s.log" % name), os.path.basename(path))
        return fd, path, attempt

    @staticmethod
    def spawn(cfg, user, out_w, token):
        """The server: as the service user, in a session of its own, stdin /dev/null, stdout+stderr into our pipe."""
        env = dict(cfg["env"], **{sglang_proc.RUN_TOKEN_VAR: token})
        kwargs = dict(user=user[0], group=user[1], extra_groups=user[2]) if user is not None else {}
        return subprocess.Popen(cfg["argv"], stdin=subprocess.DEVNULL, stdout=out_w, stderr=subprocess.STDOUT,
                                cwd=cfg.get("chdir") or None, env=env, close_fds=True, start_new_session=True,
                                **kwargs)

    def record(self, proc, attempt, log_path, token):
        """The run state (``<name>.json``): the leader, as wait_for_model records a detached launch, plus the unit's
        cgroup (ours) and this watcher."""
        cfg = self.cfg
        mine = sglang_proc.proc_cmdline(os.getpid())
        cmdline = sglang_proc.proc_cmdline(proc.pid)
        end = self.clock() + 2.0
        while cmdline is not None and (not cmdline or cmdline == mine) and self.clock() < end:
            self.sleep(0.005)  # until exec: the child still shows our command line
            cmdline = sglang_proc.proc_cmdline(proc.pid)
        if not cmdline or cmdline == mine:
            cmdline = list(cfg["argv"]) if cmdline is not None else None
        cgroup = None
        unit = cfg.get("unit")
        mount, rel = self.own_cgroup()
        if unit and rel and mount and os.path.basename(rel.rstrip("/")) == unit:
            cgroup = {"mount": mount, "path": rel, "dedicated": True, "unit": unit}
        elif not unit and rel and mount and rel == cfg.get("cgroup"):
            # detached: the deployment's own cgroup, which wait_for_model created and started this program in
            cgroup = {"mount": mount, "path": rel, "dedicated": True}
        state = {
            "pid": proc.pid, "start_time": sglang_proc.proc_start_time(proc.pid), "boot_id": sglang_proc.boot_id(),
            "cmdline": cmdline, "fingerprint": cfg.get("fingerprint"), "fingerprint_parts": cfg.get("fingerprint_parts"),
            "attempt": attempt, "log_path": log_path, "started_at": self.wall(), "user": cfg.get("user") or
            pwd.getpwuid(os.geteuid()).pw_name, "port": cfg.get("port"),
            "tree_tracking": "cgroup" if cgroup else "session", "run_token": token, "cgroup": cgroup,
            "launcher": "systemd" if unit else "detached", "unit": unit,
            "watcher": self.me(),
        }
        sglang_proc.write_state(self.run_dir, self.name, state)
        self.state = state
        return state

    @staticmethod
    def me():
        """This program's identity in the run state (``watcher``): what a run checks before it signals it."""
        return {"pid": os.getpid(), "start_time": sglang_proc.proc_start_time(os.getpid()),
                "cmdline": sglang_proc.proc_cmdline(os.getpid())}

    @staticmethod
    def own_cgroup():
        """(cgroup v2 mount, this process's cgroup path in it): the unit's, or the deployment's (detached)."""
        return sglang_proc.cgroup2_mount(), sglang_proc.proc_cgroup(os.getpid())

    def start_server(self, cfg, user):
        """Start the server, its output copied into a new attempt's log, and record it: (the log's fd, the run state,
        the start's clock), or None when it could not start or be recorded (``self.code`` says which)."""
        self.signals()
        log_fd, log_path, attempt = self.open_attempt_log(user)
        token = "%s:%s" % (self.name, secrets.token_hex(16))
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        try:
            self.proc = self.spawner(cfg, user, out_w, token)
        except OSError as e:
            os.close(out_r)
            os.close(log_fd)
            self.write_status(launch=cfg.get("launch"), attempt=attempt, log_path=log_path, verdict="exited",
                              report={"crash_class": "exited", "exit_status": EXIT_PERMANENT, "after_ready": False,
                                      "msg": "could not start %s: %s" % (cfg["argv"][0], e)})
            self.say("failed: could not start %s: %s" % (cfg["argv"][0], e))
            self.code = EXIT_PERMANENT
            return None
        finally:
            os.close(out_w)
        self.copy = LogCopy(out_r, log_fd, cfg.get("secrets") or [], echo_fd=1 if cfg.get("journal", True) else None)
        self.copy.start()
        t0 = self.clock()
        self.status = self.launch_status(cfg, attempt, log_path)
        self.write_status()  # before the run state names the new leader: no attach may read the old verdict
        try:
            state = self.record(self.proc, attempt, log_path, token)
        except (OSError, sglang_proc.UntrustedState) as e:
            # A server nobody recorded could never be stopped by a later run: take it down at once.
            self.say("failed: cannot record the run state (%s): the server just started was stopped" % e)
            self.end_tree(grace=0.0)
            self.write_status(verdict="setup_failed", report={
                "exit_status": EXIT_SETUP, "after_ready": False, "msg": "could not record the run state in %s (%s): "
                "the server just started was killed so that nothing runs unrecorded. Fix %s and run again." % (
                    self.run_dir, getattr(e, "strerror", None) or e, self.run_dir)})
            self.code = EXIT_SETUP
            return None
        sglang_verdict.prune_attempts(cfg["log_dir"], self.name, cfg.get("keep_attempts", 20))
        self.notifier.send(STATUS=self.status["status"], MAINPID=os.getpid())
        self.say("started %s (PID %d), attempt %d, log %s" % (cfg["argv"][0], self.proc.pid, attempt, log_path))
        return log_fd, state, t0

    def launch_status(self, cfg, attempt, log_path):
        """The status of a launch just made (``launching``, no verdict)."""
        return {"launch": cfg.get("launch"), "attempt": attempt, "log_path": log_path, "server_pid": self.proc.pid,
                "watcher_pid": os.getpid(), "started_at": self.wall(), "phase": "launching",
                "status": sglang_progress.status_text("launching", None), "shards": None, "phases": [],
                "verdict": None, "report": None, "fingerprint": cfg.get("fingerprint"),
                "invocation": os.environ.get("INVOCATION_ID"), "launcher": "systemd" if cfg.get("unit") else
                "detached"}


class Endings(object):
    """How the supervisor ends a watch, a part of :class:`Watcher`: ready, failed or stopped, and the tree stopped."""

    def ready(self, w, state, elapsed):
        """The verdict ``ready``: the status file, the load's phase durations (the next load's ETA), READY=1. Then
        the serving server is watched with the same watchers and ``decide()`` (``Watch.serve``): a leader that
        exits, any child that was part of the server when it became ready dying, or health failing
        ``unhealthy_after`` requests in a row is a failure (exit 69: a restart may help); a crash line the server
        outlives is set aside."""
        clf = w.log.clf
        fields, note = sglang_verdict.explain("ready", clf, state, elapsed, None, None, False)
        phases = [{"phase": ph["phase"], "at": round(ph["at"], 3)} for ph in clf.phases]
        total = round(elapsed, 3)
        text = self.ready_text = sglang_progress.status_text("ready", None, "ready", total)
        self.write_status(verdict="ready", phase="ready", status=text, phases=phases, ready_after=total, report=fields)
        try:
            sglang_progress.record_load(self.run_dir, self.name, {
                "attempt": state["attempt"], "finished_at": self.wall(), "total": total, "phases": phases,
                "shards": clf.shards[1] if clf.shards else None})
        except (OSError, ValueError, sglang_proc.UntrustedState) as e:
            self.say("cannot record the load's durations: %s" % e)
        self.notifier.send(READY=1, STATUS=text)
        self.say("ready after %.1f s%s" % (elapsed, "; " + note if note else ""))

    def failed(self, w, follower, state, verdict, elapsed, ready):
        if self.stopping:  # systemd signals the whole cgroup at once: the server may end before we hear of it
            return self.stopped(follower, w)
        settings = self.cfg["settings"]
        w.drain(verdict, settings["settle_time"], settings["poll_interval"], self.sleep)
        fields, _note = sglang_verdict.explain(verdict, w.log.clf, state, elapsed, w.leader.rc, w.children.died, False,
                                               False, w.health, w.candidates, timeout=self.cfg.get("timeout") or 0,
                                               stall_timeout=settings["stall_timeout"],
                                               tail_lines=self.cfg.get("tail_lines", 40))
        code = exit_status(verdict, ready)
        cls = fields.get("crash_class", verdict)
        shown = sglang_progress.class_words({"class": cls, "class_uncertain": fields.get("class_uncertain")})
        text = "%s: %s" % (sglang_progress.status_text(None, None, shown), fields.get("evidence", ""))
        fields["exit_status"] = code
        fields["after_ready"] = ready
        self.write_status(verdict=cls, status=text, report=fields)
        self.notifier.send(STATUS=text)
        self.say("%s (%s)%s" % (text, fields.get("hint", ""), "; not restarted: a restart would repeat it"
                                if code == EXIT_PERMANENT else ""))
        self.end_tree(grace=min(10.0, float(self.cfg.get("stop_timeout", 30))))  # after the verdict: nobody waits
        follower.close()
        return code

    def stopped(self, follower, w):
        self.notifier.send(STOPPING=1, STATUS="stopping")
        # systemd SIGKILLs what is left after TimeoutStopSec (stop_timeout): end before it, with the last lines
        self.end_tree(grace=max(1.0, float(self.cfg.get("stop_timeout", 30)) - 2.0))
        self.write_status(verdict="stopped", status=sglang_progress.status_text(None, None, "stopped"))
        follower.close()
        return EXIT_STOPPED

    def end_tree(self, grace=10.0):
        """Stop the server's session (systemd also stops the unit's cgroup once we exit) and let the log copy
        write its last lines."""
        proc = self.proc
        if proc is None and self.adopt and self.state is not None:
            # an adopted server is no child of ours: its verified tree (cgroup, session, run token), as a run would
            sglang_proc.stop_tree(self.state, grace=grace, clock=self.clock, sleep=self.sleep)
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except OSError:
                pass
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except OSError:
                    pass
                proc.wait()
        if self.copy is not None:
            self.copy.join(timeout=5.0)


class Watcher(ServerStart, Endings):
    def __init__(self, run_dir, name, notifier=None, clock=time.monotonic, wall=time.time, sleep=None, spawner=None,
                 procs=None, http=None, serving=True, adopt=False, fetch=None):
        """Everything but ``run_dir`` and ``name`` is injectable for unit tests (a fake clock, a fake server, a fake
        /proc and HTTP): ``serving=False`` ends ``steps()`` at the verdict ``ready``."""
        self.run_dir, self.name = run_dir, name
        self.notifier = notifier or Notifier()
        self.clock, self.wall = clock, wall
        self.real = sleep is None  # the real clock: health answers may end a pause early
        self.sleep = time.sleep if sleep is None else sleep
        self.spawner = spawner or self.spawn
        self.procs = procs or sglang_verdict.ProcView()
        self.http = http or sglang_verdict.http_status
        # /v1/loads and /metrics while serving (no generation): an injected HTTP comes with its own fetch, or none
        self.fetch = fetch if fetch is not None or http is not None else sglang_probe.http_get
        self.serving = serving
        self.adopt = adopt  # watch the recorded, serving server whose supervisor is gone (no new launch)
        self.w = None
        self.code = None
        self.cfg = None
        self.stopping = False
        self.status = {}
        self.proc = None
        self.state = None
        self.copy = None
        self.gate = None
        self.serve_shown = None  # the serving state last told (None: health answers)
        self.ready_text = sglang_progress.status_text("ready", None, "ready")

    # ---------------------------------------------------------------- status
    def write_status(self, **fields):
        self.status.update(fields, updated=self.wall())
        try:
            sglang_proc.write_files(self.run_dir, ((STATUS % self.name, json.dumps(self.status, sort_keys=True)),))
        except (OSError, sglang_proc.UntrustedState) as e:
            sys.stderr.write("sglang-watcher: cannot write the status file: %s\n" % e)

    def say(self, text):
        """A line of the watcher's own into the journal; it may quote the server's log (a client's prompt): its
        control characters escaped (sglang_progress.operator_text)."""
        sys.stderr.write("sglang-watcher: %s\n" % sglang_progress.operator_text(text))
        sys.stderr.flush()

    # ---------------------------------------------------------------- run
    def run(self):
        """The program: start the server, wait for its verdict, serve until it ends or is stopped. The exit status."""
        for pause in self.steps():
            self.w.pause(pause, self.sleep, self.real)
        return self.code

    def adopt_steps(self):
        """``--adopt``: the recorded server serves, but its supervisor is gone (killed, say). Take it over without a
        restart: verify it is ours, record this program as its supervisor, and watch it as a serving server (the same
        watchers and ``decide()``). Its output went to the old supervisor's pipe, so its log cannot be followed: the
        status says so, and a failure is explained by the processes and health alone."""
        cfg = self.load_config()
        self.signals()
        state = sglang_proc.read_state(self.run_dir, self.name)
        why = "no run state" if not state else (state.get("untrusted") or sglang_proc.why_not_ours(state))
        if why:
            self.say("failed: cannot adopt the recorded server: %s" % why)
            self.code = EXIT_SETUP
            return
        state["watcher"] = self.me()
        sglang_proc.write_state(self.run_dir, self.name, state)
        self.state = state
        settings = cfg["settings"]
        headers = cfg.get("headers") or {}
        t0 = self.clock()
        follower = LogFollower(os.devnull)
        settings = serve_numbers(cfg)
        self.w = w = sglang_verdict.Watch(follower, LogClassifier(clock=lambda: self.clock() - t0), t0, t0 + 10 ** 9,
                                          self.clock, None, state["pid"], self.procs, state.get("start_time"),
                                          self.health_ask(cfg, headers, settings), self.real,
                                          settings, events=settings.get("events", True))
        self.serve(w, cfg, headers, settings, t0)
        view = ServingView(None, settings, w.health.interval)  # its log is not followed: log_read stays None
        w.children.poll(t0)
        w.children.serving()  # every child alive now is part of the serving server
        self.status = {"launch": cfg.get("launch"), "attempt": state.get("attempt"), "log_path": state.get("log_path"),
                       "server_pid": state["pid"], "watcher_pid": os.getpid(), "started_at": state.get("started_at"),
                       "phase": "ready", "verdict": "ready", "adopted": True, "launcher": "detached",
                       "status": "serving (its supervisor was put back; the output since it was lost is not logged)",
                       "report": None, "fingerprint": cfg.get("fingerprint")}
        self.write_status()
        self.say("adopted the serving server (PID %d): its supervisor had gone" % state["pid"])
        while not self.stopping:
            verdict = w.look(self.clock())
            if verdict is not None and verdict != "ready":
                self.code = self.failed(w, follower, state, verdict, self.clock() - t0, ready=True)
                return
            self.note_serving(view, w, settings)
            yield SERVE_POLL
        self.code = self.stopped(follower, w)

    def health_ask(self, cfg, headers, settings):
        """One health request, through the deployment's probe gate (sglang_probe.ProbeGate): never two of ours or the
        module's in the server at once, none while an earlier unanswered one may still be resident."""
        self.gate = sglang_probe.ProbeGate(self.run_dir, self.name, settings["health_window"], clock=self.clock,
                                           idle=sglang_probe.idle_check(self.fetch, cfg["health_url"], headers))

        def ask(timeout):
            return self.http(cfg["health_url"], headers, timeout)
        return sglang_probe.gated(ask, self.gate, clock=self.clock)

    def serve(self, w, cfg, headers, settings, t0):
        """Watch the serving server (Watch.serve) with the questions that cost it nothing (sglang_probe.Activity)."""
        activity = sglang_probe.Activity(self.fetch, cfg["health_url"], headers, settings["serve_stuck_seconds"], t0)
        w.serve(settings["serve_health_interval"], activity, settings["serve_stuck_action"])

    def steps(self):
        """The work as a generator: it yields the seconds to wait before its next look (``run`` waits them; a unit
        test's fake clock steps it) and leaves the exit status in ``self.code``."""
        if self.adopt:
            yield from self.adopt_steps()
            return
        cfg = self.load_config()
        settings = serve_numbers(cfg)
        started = self.start_server(cfg, self.user())
        if started is None:
            return
        log_fd, state, t0 = started
        headers = cfg.get("headers") or {}
        ask = self.health_ask(cfg, headers, settings)
        self.gate.forget()  # a new server process holds no request of ours
        deadline = t0 + (cfg.get("timeout") or 10 ** 9)
        # The file we created, through our own descriptor: never a path the service user could swap meanwhile.
        log_read_fd = os.open("/proc/self/fd/%d" % log_fd, os.O_RDONLY | os.O_CLOEXEC)
        follower = LogFollower("/proc/self/fd/%d" % log_read_fd)
        self.w = w = sglang_verdict.Watch(follower, LogClassifier(clock=lambda: self.clock() - t0), t0, deadline,
                                          self.clock, self.proc, self.proc.pid, self.procs, state.get("start_time"), ask,
                                          self.real, settings,
                                          events=settings.get("events", True))
        verdict = yield from self.load_steps(w, settings)
        if self.stopping:
            self.code = self.stopped(follower, w)
            return
        elapsed = self.clock() - t0
        if verdict != "ready":
            self.code = self.failed(w, follower, state, verdict, elapsed, ready=False)
            return
        self.ready(w, state, elapsed)
        if not self.serving:
            self.code = None  # a unit test's fake stops at the verdict
            return
        self.serve(w, cfg, headers, settings, self.clock())
        view = ServingView(log_read_fd, settings, w.health.interval)
        while not self.stopping:
            verdict = w.look(self.clock())
            if verdict is not None and verdict != "ready":
                self.code = self.failed(w, follower, state, verdict, self.clock() - w.log.t0, ready=True)
                return
            self.note_serving(view, w, settings)
            yield SERVE_POLL
        self.code = self.stopped(follower, w)

    def load_steps(self, w, settings):
        """The load, step by step (a generator: it yields the seconds to the next look): the phase in the status and
        the unit's STATUS=, the start's timeout extended while the log moves. Returns the verdict (None: stopping)."""
        extend_usec = int(settings.get("extend_timeout", 0) * 1e6)
        last_extend = moved = None
        shown = None
        while not self.stopping:
            now = self.clock()
            verdict = w.look(now)
            clf = w.log.clf
            view = (clf.phase, tuple(clf.shards) if clf.shards else None)
            if view != shown:
                shown = view
                # the log's ready line is "up, waiting for a generation to answer": READY=1 waits for the verdict
                text = sglang_progress.status_text(clf.phase, list(clf.shards) if clf.shards else None)
                self.write_status(phase=clf.phase, shards=list(clf.shards) if clf.shards else None, status=text,
                                  phases=[{"phase": ph["phase"], "at": round(ph["at"], 3)} for ph in clf.phases])
                self.notifier.send(STATUS=text)
            if extend_usec and w.log.last_growth != moved and (last_extend is None or now - last_extend >= EXTEND_EVERY):
                # The log moved: the start may take another extend_timeout from now (a stuck load gets no more).
                moved, last_extend = w.log.last_growth, now
                self.notifier.send(EXTEND_TIMEOUT_USEC=extend_usec)
            if verdict is not None:
                return verdict
            yield settings["poll_interval"]
        return None

    def note_serving(self, view, w, settings):
        """The status's ``serving`` fields (ServingView), written when what a watch reads has changed; the status text
        and the unit's STATUS= when the server turns busy or stuck, or answers again."""
        fields = view.update(w, self.clock())
        shown = (w.serve_state, w.activity.loads if w.activity is not None else None)
        text = None
        if shown != self.serve_shown:
            if (self.serve_shown or (None,))[0] is not None or w.serve_state is not None:
                text = serving_text(w, settings, self.ready_text)
                self.status["status"] = text
                if fields is None:
                    fields = dict(view.view, log_read=view.read)
            self.serve_shown = shown
        if fields is not None:
            self.write_status(serving=fields)
        if text is not None:  # after the status file says it: what reads STATUS= then finds it there too
            self.say(text)
            self.notifier.send(STATUS=text)

    def signals(self):
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGINT, self._on_term)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    def _on_term(self, signum, frame):
        self.stopping = True  # the next look sees it (a pause is at most poll_interval, SERVE_POLL while serving)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    adopt = argv[2:] == ["--adopt"]
    if len(argv) != 2 and not adopt:
        sys.stderr.write("usage: python -I -B <program_dir> RUN_DIR NAME [--adopt]\n")
        return 64
    try:
        return Watcher(argv[0], argv[1], adopt=adopt).run()
    except sglang_proc.UntrustedState as e:
        sys.stderr.write("sglang-watcher: %s\n" % e)
        return EXIT_PERMANENT


if __name__ == "__main__":
    sys.exit(main())

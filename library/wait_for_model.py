#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: wait_for_model
short_description: Launch an SGLang server detached and block until it is healthy or has crashed
description:
  - Starts an SGLang server (or anything shaped like one) as a detached process tree, with its
    output in a per-attempt log file, and blocks until the health URL answers 200, a crash is
    seen, or the deadline passes.
  - A crash is any of a crash signature in the log (decided by C(module_utils/sglang_log.py),
    built against real SGLang logs), the launched process exiting, a long-lived child of it (a
    scheduler, the detokenizer) dying while the parent lives on, or neither log growth nor any
    health answer for O(stall_timeout) seconds (a hang). A crash is reported within about a
    second, with its class, a hint, the deciding line and the log tail.
  - Idempotent. When our server is running and healthy and its fingerprint (argv, environment,
    the hashes of O(fingerprint_files) and O(fingerprint_data)) is unchanged, nothing is touched
    and C(changed=false). When it is running with the same fingerprint but not healthy yet (a
    previous run was interrupted while it loaded), the module attaches to it and waits instead of
    restarting a 10-minute load.
  - Our previous server is stopped (its whole process tree, found from the run-state file and
    verified by start time, boot id and command line, so that a reused PID is never signalled;
    SIGTERM, then SIGKILL after O(stop_timeout)). A process that is not ours is never signalled.
version_added: "1.0.0"
author:
  - eagle-deploy contributors
options:
  name:
    description: Base name of the log files (C(<name>_r<N>.log), C(<name>.log)) and run-state files (C(<name>.pid), C(<name>.json)).
    type: str
    default: sglang
  state:
    description:
      - C(started) launches (or keeps) the server and waits for it.
      - C(stopped) stops our server's process tree, only ours, and removes the run state.
      - C(watched) launches nothing; it reads our server's whole log so far and keeps watching the log,
        the process tree and the health URL for O(watch_time) seconds. It fails with the crash class if
        the server crashed at any time during its life (a first decode request that killed it, say) or
        is not healthy at the end. Use it after smoke requests.
    type: str
    choices: [started, stopped, watched]
    default: started
  argv:
    description:
      - The command to launch, as a list (never a shell string). Required with O(state=started).
      - Do not put secrets here, they would be visible in C(ps); use a config file (SGLang's C(--config)).
    type: list
    elements: str
  environment:
    description:
      - Variables added to a minimal environment (C(PATH), C(LANG), C(HOME), C(USER), C(LOGNAME)).
        Part of the fingerprint.
    type: dict
    default: {}
  secret_environment:
    description:
      - Variables for the server that are secrets (C(HF_TOKEN), say). Like O(environment), but masked in
        Ansible's output and only their hash enters the fingerprint.
    type: dict
    default: {}
  chdir:
    description: Working directory of the server.
    type: path
  log_dir:
    description: Directory of the per-attempt log files. Must exist and be writable.
    type: path
    required: true
  run_dir:
    description: Directory of the run-state files. Defaults to O(log_dir).
    type: path
  run_as:
    description:
      - User to run the server as (the module must run as root to switch). Its primary group and
        supplementary groups are applied. Defaults to the user running the module.
    type: str
  fingerprint_files:
    description:
      - Files the server depends on (its config file, patched sources). Their SHA-256 hashes are
        part of the fingerprint, so a change in any of them restarts the server.
    type: list
    elements: path
    default: []
  fingerprint_data:
    description: Other values the server depends on (the SGLang version, say); part of the fingerprint.
    type: dict
    default: {}
  health_url:
    description: URL that answers 200 when the server can serve. Must be http or https.
    type: str
    default: http://127.0.0.1:30000/health_generate
  api_key:
    description: API key sent as C(Authorization Bearer) to the health URL. Never logged.
    type: str
  port:
    description:
      - TCP port the server will listen on. Before a launch, a port held by a process that is not
        ours fails the task (nothing stopped, nothing launched). Defaults to the port of O(health_url).
    type: int
  timeout:
    description: Seconds to wait for health after the launch.
    type: int
    default: 1800
  stall_timeout:
    description:
      - Seconds without log growth and without any HTTP answer after which the server is declared
        hung. C(0) disables the check. CUDA-graph capture can be silent for 6+ minutes.
    type: int
    default: 900
  settle_time:
    description:
      - After a crash line, seconds to keep reading so that the traceback's last line (the exception)
        is in the report. The wait ends sooner once that line is seen.
    type: float
    default: 0.3
  poll_interval:
    description: Seconds between two looks at the log, the process tree and the health URL.
    type: float
    default: 0.1
  health_interval:
    description: Seconds between two health requests (each one may cost the server a 1-token generation).
    type: float
    default: 0.25
  child_grace:
    description:
      - A child of the server counts as a long-lived worker (whose death is a crash) once it has been
        seen alive for this many seconds; short-lived helpers (compilers, nvidia-smi) are ignored.
    type: float
    default: 2.0
  stop_timeout:
    description: Seconds between SIGTERM and SIGKILL when stopping our server.
    type: int
    default: 30
  stop_on_failure:
    description: Stop our server's tree when the wait fails (it holds GPU memory and cannot serve).
    type: bool
    default: true
  force_restart:
    description: Restart even when the server is healthy and its fingerprint is unchanged.
    type: bool
    default: false
  on_foreign_pid:
    description:
      - What to do when the pidfile points at a live process that is provably not the one we
        launched (a reused PID). C(fail) stops with an error naming the pidfile; C(ignore) discards
        the stale run state. The process is never signalled either way.
    type: str
    choices: [fail, ignore]
    default: fail
  watch_time:
    description: Seconds to watch with O(state=watched).
    type: float
    default: 3.0
  log_tail_lines:
    description: Lines of log returned in RV(log_tail).
    type: int
    default: 40
  keep_attempts:
    description: Per-attempt log files to keep; older ones are removed. C(0) keeps all.
    type: int
    default: 20
attributes:
  check_mode:
    support: full
    details: Reports whether the server would be (re)started or stopped; spawns and signals nothing.
  diff_mode:
    support: none
  platform:
    platforms: [linux]
    details: Reads C(/proc).
notes:
  - The server is started with C(start_new_session), stdin from C(/dev/null), stdout and stderr into
    the log file and no inherited descriptors, so it outlives the module and Ansible's pipes.
  - Use it without C(async); the module itself is the wait.
seealso:
  - module: ansible.builtin.wait_for
  - module: ansible.builtin.uri
"""

EXAMPLES = r"""
- name: Launch SGLang and wait until it can generate
  ansible.legacy.wait_for_model:
    name: sglang
    argv: [/opt/sglang/venv/bin/python, -m, sglang.launch_server, --config, /etc/sglang/server.yaml]
    environment:
      SGLANG_ENABLE_SPEC_V2: "1"
    log_dir: /var/log/sglang
    run_dir: /run/sglang
    run_as: sglang
    fingerprint_files: [/etc/sglang/server.yaml]
    fingerprint_data:
      sglang_version: 0.5.23
    health_url: http://127.0.0.1:30000/health_generate
    api_key: "{{ sglang_api_key }}"
    timeout: 1800
  register: server

- name: Show the load timeline
  ansible.builtin.debug:
    var: server.phases

- name: Stop our server (only ours)
  ansible.legacy.wait_for_model:
    name: sglang
    state: stopped
    log_dir: /var/log/sglang
    run_dir: /run/sglang
"""

RETURN = r"""
pid:
  description: PID of the server's leader process.
  returned: when a server runs
  type: int
  sample: 41235
log_path:
  description: Log file of this attempt.
  returned: always, with O(state=started)
  type: str
  sample: /var/log/sglang/sglang_r3.log
attempt:
  description: Attempt number N of C(<name>_r<N>.log).
  returned: with O(state=started)
  type: int
  sample: 3
elapsed:
  description: Seconds from the launch (or attach) to the verdict.
  returned: with O(state=started)
  type: float
  sample: 612.4
phases:
  description: Timeline of the load, each phase with the seconds after launch at which it began and its log line number.
  returned: with O(state=started)
  type: list
  elements: dict
  sample: [{"phase": "launching", "elapsed": 0.0, "lineno": 0}, {"phase": "loading_weights", "elapsed": 12.1, "lineno": 40}]
phase:
  description: Last phase reached.
  returned: with O(state=started)
  type: str
  sample: cuda_graph
shards:
  description: Weight shards loaded and total, where the log shows them.
  returned: with O(state=started)
  type: list
  elements: int
  sample: [64, 64]
fingerprint:
  description: SHA-256 of argv, environment, file hashes and fingerprint data.
  returned: with O(state=started)
  type: str
  sample: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
restart_reason:
  description: Why the server was (or would be) started; null when nothing changed.
  returned: with O(state=started)
  type: str
  sample: "fingerprint changed: argv, file /etc/sglang/server.yaml"
crash_class:
  description:
    - Class of the failure. From the log - python_exception, bad_config, warmup_failed,
      first_request_crash, cuda_graph_capture, cuda_oom, kv_pool_oom, cuda_error, nccl,
      compile_error, child_sigquit, killed, port_in_use. From the process or the clock - exited,
      child_died, stalled, timeout, unhealthy (O(state=watched) only).
  returned: on failure
  type: str
  sample: cuda_oom
hint:
  description: One line for the operator, saying what to do.
  returned: on failure
  type: str
  sample: "CUDA out of memory: lower --mem-fraction-static or --cuda-graph-max-bs"
deciding_line:
  description: The log line that proved the crash, and its number in RV(deciding_lineno).
  returned: on failure
  type: str
  sample: "[2026-02-26 16:41:24 TP6] Scheduler hit an exception: Traceback (most recent call last):"
deciding_lineno:
  description: Line number of RV(deciding_line) in the log file.
  returned: on failure
  type: int
  sample: 539
crash_exception:
  description: Last line of the crash's traceback.
  returned: on failure, when the log has one
  type: str
  sample: "AttributeError: 'EAGLEWorkerV2' object has no attribute 'spec_disable_batch_threshold'"
traceback:
  description: The crash's traceback lines.
  returned: on failure, when the log has one
  type: list
  elements: str
log_tail:
  description: Last O(log_tail_lines) lines of the log.
  returned: with O(state=started)
  type: list
  elements: str
rc:
  description: Exit status of the leader (negative for a signal), if it exited.
  returned: on failure
  type: int
  sample: -9
emulator:
  description: True when the log's first line says the server is the SGLang emulator.
  returned: with O(state=started)
  type: bool
  sample: false
stopped:
  description: What stopping our previous server did (PIDs sent SIGTERM, SIGKILL, left over).
  returned: when a server was stopped
  type: dict
  sample: {"signalled": [41235, 41240], "killed": [], "remaining": [], "seconds": 1.2}
stale_state:
  description: Why a pidfile / run-state record was discarded without signalling anything.
  returned: when one was found
  type: str
  sample: "PID 812 was reused by another process (start time differs)"
"""

import hashlib
import json
import os
import pwd
import re
import ssl
import subprocess
import sys
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.six.moves.urllib.parse import urlparse
from ansible.module_utils.six.moves import http_client
from ansible.module_utils.sglang_log import LogClassifier, LogFollower, tail_lines
from ansible.module_utils import sglang_proc


class WaitError(Exception):
    """Bad input or an unsafe situation: fail before anything is stopped or launched."""


# ------------------------------------------------------------------------------ helpers
def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _h(value):
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode("utf-8")).hexdigest()


def fingerprint_parts(argv, environment, files, data, run_as, secret_environment=None):
    parts = {"argv": _h(argv), "environment": _h(environment), "run_as": _h(run_as or "")}
    if secret_environment:
        parts["secret_environment"] = _h(secret_environment)
    for path in files:
        parts["file " + path] = sha256_file(path)
    for key in sorted(data):
        parts["data " + key] = _h(data[key])
    return parts


def fingerprint_of(parts):
    return _h(parts)


def describe_change(old_parts, new_parts):
    if not old_parts:
        return "fingerprint changed"
    keys = sorted(set(old_parts) | set(new_parts))
    changed = [k for k in keys if old_parts.get(k) != new_parts.get(k)]
    return "fingerprint changed: " + ", ".join(changed)


def next_attempt(log_dir, name):
    rx = re.compile(r"^%s_r(\d+)\.log$" % re.escape(name))
    best = 0
    for entry in os.listdir(log_dir):
        m = rx.match(entry)
        if m:
            best = max(best, int(m.group(1)))
    return best + 1


def prune_attempts(log_dir, name, keep):
    if keep <= 0:
        return []
    rx = re.compile(r"^%s_r(\d+)\.log$" % re.escape(name))
    found = sorted((int(m.group(1)), e) for e in os.listdir(log_dir) for m in [rx.match(e)] if m)
    removed = []
    for _, entry in found[:-keep]:
        os.unlink(os.path.join(log_dir, entry))
        removed.append(entry)
    return removed


_TLS = []


def http_status(url, headers, timeout):
    """Status code of a GET, or None when nothing answered (refused, reset, timed out).

    Plain http.client: one cheap connection per poll. (open_url builds an SSL context per call, ~50 ms
    of CPU, which made a 10-minute wait cost a tenth of a core.)"""
    u = urlparse(url)
    path = (u.path or "/") + ("?" + u.query if u.query else "")
    try:
        if u.scheme == "https":
            if not _TLS:
                _TLS.append(ssl._create_unverified_context())  # health checks of our own server on loopback
            conn = http_client.HTTPSConnection(u.hostname, u.port or 443, timeout=timeout, context=_TLS[0])
        else:
            conn = http_client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)
        try:
            conn.request("GET", path, headers=headers)
            resp = conn.getresponse()
            resp.read()
            return resp.status
        finally:
            conn.close()
    except (OSError, http_client.HTTPException, ValueError):
        return None


class Popener(object):
    """Starts the server detached. Injectable so unit tests need no real processes."""

    def spawn(self, argv, env, cwd, log_fd, user):
        kwargs = {}
        if user is not None:
            uid, gid, groups = user
            if sys.version_info >= (3, 9):
                kwargs.update(user=uid, group=gid, extra_groups=groups)
            else:
                def drop_privileges():
                    os.setgroups(groups)
                    os.setgid(gid)
                    os.setuid(uid)
                kwargs["preexec_fn"] = drop_privileges
        return subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log_fd, stderr=subprocess.STDOUT, cwd=cwd, env=env,
            close_fds=True, start_new_session=True, **kwargs
        )


class ProcView(object):
    """What the waiter needs to know about processes. Injectable for tests."""

    def children(self, pid):
        """{child_pid: start_time} of direct children, zombies excluded."""
        out = {}
        data = None
        try:
            with open("/proc/%d/task/%d/children" % (pid, pid)) as fh:
                data = fh.read()
        except (IOError, OSError):
            data = None
        if data is None:
            pids = [p for p, info in sglang_proc.process_table().items() if info["ppid"] == pid]
        else:
            pids = [int(x) for x in data.split()]
        for c in pids:
            st = sglang_proc.proc_state(c)
            if st is not None and st not in ("Z", "X"):
                out[c] = sglang_proc.proc_start_time(c)
        return out

    def alive(self, pid):
        return sglang_proc.pid_alive(pid)

    def cmdline(self, pid):
        return sglang_proc.proc_cmdline(pid)


# ------------------------------------------------------------------------------ the work
class ModelWaiter(object):
    """Launch / attach / wait / stop. Clock, sleep, process launch, HTTP and /proc are injectable."""

    def __init__(self, module, clock=time.monotonic, sleep=time.sleep, popener=None, http=http_status,
                 procs=None, wall=time.time):
        self.module = module
        self.p = module.params
        self.clock = clock
        self.sleep = sleep
        self.popener = popener or Popener()
        self.http = http
        self.procs = procs or ProcView()
        self.wall = wall
        self.result = {"changed": False}

    # ---------------------------------------------------------------- validation
    def validate(self):
        p = self.p
        log_dir = p["log_dir"]
        self.run_dir = p["run_dir"] or log_dir
        # Nothing can be recorded where there is no directory: a fresh host. Stopping is then a no-op,
        # and in check mode (the tasks that create the directories did not run) a start is reported.
        self.fresh = not os.path.isdir(log_dir) or not os.path.isdir(self.run_dir)
        if self.fresh and (p["state"] == "stopped" or self.module.check_mode):
            self.missing_files = [f for f in p["fingerprint_files"] if not os.path.isfile(f)]
            return
        if not os.path.isdir(log_dir):
            raise WaitError("log_dir %s does not exist (or is not a directory): create it first" % log_dir)
        if not os.access(log_dir, os.W_OK | os.X_OK | os.R_OK):
            raise WaitError("log_dir %s is not readable and writable by %s" % (log_dir, pwd.getpwuid(os.getuid()).pw_name))
        if not os.path.isdir(self.run_dir):
            raise WaitError("run_dir %s does not exist: create it first" % self.run_dir)
        url = urlparse(p["health_url"])
        if url.scheme not in ("http", "https") or not url.hostname:
            raise WaitError("health_url %r is not an http(s) URL" % p["health_url"])
        if p["state"] != "started":
            return
        if not p["argv"] or not p["argv"][0]:
            raise WaitError("argv is empty: give the server's command as a list, e.g. [python, -m, sglang.launch_server, ...]")
        if p["timeout"] <= 0:
            raise WaitError("timeout must be > 0 seconds (got %s)" % p["timeout"])
        if p["stall_timeout"] < 0:
            raise WaitError("stall_timeout must be >= 0 (0 disables it)")
        if p["poll_interval"] <= 0 or p["health_interval"] <= 0:
            raise WaitError("poll_interval and health_interval must be > 0")
        self.port = p["port"] or url.port or (443 if url.scheme == "https" else 80)
        self.missing_files = []
        for path in p["fingerprint_files"]:
            if not os.path.isfile(path) or not os.access(path, os.R_OK):
                if self.module.check_mode and not os.path.exists(path):
                    self.missing_files.append(path)  # a template that check mode did not write
                    continue
                raise WaitError("fingerprint_files: %s does not exist or is not readable" % path)
        for source in ("environment", "secret_environment"):
            for key in p[source]:
                if not isinstance(key, str) or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
                    raise WaitError("%s: %r is not a valid variable name" % (source, key))
        self.user = None
        if p["run_as"]:
            try:
                pw = pwd.getpwnam(p["run_as"])
            except KeyError:
                raise WaitError("run_as: no user named %s on this host" % p["run_as"])
            if os.getuid() != 0 and pw.pw_uid != os.getuid():
                raise WaitError("run_as: switching to %s needs root (use become: true)" % p["run_as"])
            groups = os.getgrouplist(pw.pw_name, pw.pw_gid)
            self.user = (pw.pw_uid, pw.pw_gid, groups)
            self.user_pw = pw
        else:
            self.user_pw = pwd.getpwuid(os.getuid())

    def child_env(self):
        pw = self.user_pw
        env = {
            "PATH": os.environ.get("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            "HOME": pw.pw_dir,
            "USER": pw.pw_name,
            "LOGNAME": pw.pw_name,
            "PYTHONUNBUFFERED": "1",
        }
        for source in ("environment", "secret_environment"):
            for key, value in self.p[source].items():
                env[key] = "" if value is None else str(value)
        return env

    def headers(self):
        h = {}
        if self.p["api_key"]:
            h["Authorization"] = "Bearer %s" % self.p["api_key"]
        return h

    # ---------------------------------------------------------------- run
    def run(self):
        self.validate()
        if self.fresh and self.p["state"] == "stopped":
            self.result["msg"] = "nothing to stop: %s does not exist" % self.run_dir
            return self.result
        if self.module.check_mode and self.p["state"] == "started" and (self.fresh or self.missing_files):
            self.result.update(changed=True, restart_reason="not running", msg="would start the server (%s)" % (
                "fresh host: %s does not exist yet" % self.p["log_dir"] if self.fresh
                else "fingerprint files not written yet: %s" % ", ".join(self.missing_files)))
            return self.result
        if self.p["state"] == "stopped":
            return self.stop_only()
        if self.p["state"] == "watched":
            return self.watch()
        return self.start()

    def watch(self):
        state, ours = self._existing()
        if state is None or state.get("unverified") or not state.get("log_path"):
            raise WaitError("no server of ours is recorded in %s (name %s): nothing to watch"
                            % (self.run_dir, self.p["name"]))
        return self.wait(state, handle=None, attached=True, watch=self.p["watch_time"])

    def _existing(self):
        """(state, ours?) of the recorded server; applies on_foreign_pid for a reused PID."""
        state = sglang_proc.read_state(self.run_dir, self.p["name"])
        if state is None:
            return None, False
        reason = sglang_proc.why_not_ours(state)
        if reason is None:
            return state, True
        pid = state.get("pid")
        foreign_alive = pid is not None and sglang_proc.pid_alive(pid) and (
            state.get("unverified") or state.get("boot_id") in (None, sglang_proc.boot_id()))
        pidfile = sglang_proc.state_paths(self.run_dir, self.p["name"])[0]
        if foreign_alive and self.p["on_foreign_pid"] == "fail":
            cmd = " ".join(sglang_proc.proc_cmdline(pid) or [])[:200]
            raise WaitError(
                "pidfile %s points at PID %d (%s), which is not the server we launched: %s. Nothing was "
                "signalled or launched. Remove the stale pidfile (or set on_foreign_pid: ignore)."
                % (pidfile, pid, cmd or "?", reason))
        self.result["stale_state"] = reason
        return state, False

    def start(self):
        p = self.p
        parts = fingerprint_parts(p["argv"], p["environment"], p["fingerprint_files"], p["fingerprint_data"], p["run_as"],
                                  p["secret_environment"])
        fp = fingerprint_of(parts)
        self.result["fingerprint"] = fp
        state, ours = self._existing()
        if ours and state.get("fingerprint") == fp and not p["force_restart"]:
            code = self.http(p["health_url"], self.headers(), 2.0)
            self.result.update(pid=state["pid"], log_path=state.get("log_path"), attempt=state.get("attempt"),
                               restart_reason=None)
            if code == 200:
                self.result.update(elapsed=0.0, phases=[], phase="ready", log_tail=self._tail_of(state.get("log_path")))
                return self.result
            if self.module.check_mode:
                self.result["msg"] = "server with the same fingerprint is running but not healthy yet; would wait for it"
                return self.result
            return self.wait(state, handle=None, attached=True)
        if not ours:
            reason = "not running"
        elif state.get("fingerprint") == fp:
            reason = "force_restart"
        else:
            reason = describe_change(state.get("fingerprint_parts"), parts)
        self.result["restart_reason"] = reason

        # A foreign process on our port: refuse before touching anything.
        # Our old server's processes may hold the port (an orphaned child that inherited the socket).
        ours_pids = set(sglang_proc.our_tree(state)) if ours else set(sglang_proc.orphans_of(state))
        holders = sglang_proc.pids_holding_sockets(sglang_proc.listeners(self.port)) - ours_pids
        if holders:
            desc = ", ".join("PID %d (user %s: %s)" % (h, self._owner(h), " ".join(sglang_proc.proc_cmdline(h) or [])[:120])
                             for h in sorted(holders))
            raise WaitError("port %d is held by a process that is not ours: %s. Nothing was stopped or "
                            "launched; stop it or choose another port." % (self.port, desc))

        self.result["changed"] = True
        if self.module.check_mode:
            self.result["msg"] = "would %s the server (%s)" % ("restart" if ours else "start", reason)
            return self.result
        if state is not None:
            self._stop(state)
        return self.launch(parts, fp)

    def _stop(self, state):
        """Stop our recorded server (its tree, or what is left of it) and forget it. A bare pidfile
        proves nothing and is only removed."""
        if not state.get("unverified"):
            stopped = sglang_proc.stop_tree(state, grace=self.p["stop_timeout"], clock=self.clock, sleep=self.sleep)
            if stopped["signalled"] or stopped["killed"]:
                self.result["stopped"] = stopped
            if stopped["remaining"]:
                raise WaitError("could not stop our server: PIDs %s survived SIGKILL" % stopped["remaining"])
        sglang_proc.clear_state(self.run_dir, self.p["name"])

    def _owner(self, pid):
        uid = sglang_proc.proc_uid(pid)
        try:
            return pwd.getpwuid(uid).pw_name
        except (KeyError, TypeError):
            return str(uid)

    def launch(self, parts, fp):
        p = self.p
        log_dir = p["log_dir"]
        attempt = next_attempt(log_dir, p["name"])
        log_path = os.path.join(log_dir, "%s_r%d.log" % (p["name"], attempt))
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_EXCL, 0o640)
        try:
            if self.user is not None:
                os.fchown(fd, self.user[0], self.user[1])
            link = os.path.join(log_dir, "%s.log" % p["name"])
            tmp = link + ".tmp"
            if os.path.lexists(tmp):
                os.unlink(tmp)
            os.symlink(os.path.basename(log_path), tmp)
            os.rename(tmp, link)
            try:
                handle = self.popener.spawn(p["argv"], self.child_env(), p["chdir"], fd, self.user)
            except OSError as e:
                raise WaitError("could not start %s: %s" % (p["argv"][0], e))
        finally:
            os.close(fd)
        self.result["pruned_logs"] = prune_attempts(log_dir, p["name"], p["keep_attempts"])
        # Record the command line after exec (a script with a shebang shows its interpreter there):
        # until exec, the child still shows our own command line.
        mine = sglang_proc.proc_cmdline(os.getpid())
        exec_deadline = self.clock() + 2.0
        cmdline = sglang_proc.proc_cmdline(handle.pid)
        # (While exec is under way /proc/PID/cmdline can also read empty.)
        while cmdline is not None and (not cmdline or cmdline == mine) and self.clock() < exec_deadline:
            self.sleep(0.005)
            cmdline = sglang_proc.proc_cmdline(handle.pid)
        if not cmdline or cmdline == mine:
            cmdline = list(p["argv"]) if cmdline is not None else None
        ident = {"pid": handle.pid, "start_time": sglang_proc.proc_start_time(handle.pid),
                 "boot_id": sglang_proc.boot_id(), "cmdline": cmdline}
        state = dict(ident, fingerprint=fp, fingerprint_parts=parts, attempt=attempt, log_path=log_path,
                     started_at=self.wall(), user=self.user_pw.pw_name, port=self.port)
        sglang_proc.write_state(self.run_dir, p["name"], state)
        self.result.update(pid=handle.pid, attempt=attempt, log_path=log_path)
        return self.wait(state, handle=handle, attached=False)

    # ---------------------------------------------------------------- the wait loop
    def wait(self, state, handle, attached, watch=None):
        p = self.p
        t0 = self.clock()
        deadline = t0 + (watch if watch is not None else p["timeout"])
        clf = LogClassifier(clock=lambda: self.clock() - t0)
        follower = LogFollower(state["log_path"])
        pid = state["pid"]
        last_activity = t0
        next_health = t0
        workers = {}  # child pid -> (start_time, first_seen)
        died = None
        rc = None
        verdict = None
        try:
            while True:
                now = self.clock()
                data = follower.read()
                if data:
                    before = (clf.phase, clf.ready is None)
                    clf.feed(data)
                    last_activity = now
                    if (clf.phase, clf.ready is None) != before and clf.phase in ("warmup", "ready"):
                        next_health = now  # the log says it may be up: ask now, not at the next tick
                # 1. the log says it crashed. Keep reading while the traceback is still being
                #    written (up to a few settle times) so the report has its exception line.
                if clf.crash is not None:
                    since = now - (clf.crash["at"] + t0)
                    quiet = now - last_activity
                    if clf.settled or (since >= p["settle_time"] and quiet >= p["settle_time"]) \
                            or since >= 5 * p["settle_time"]:
                        verdict = "crashed"
                        break
                else:
                    # 2. the leader exited
                    if handle is not None:
                        rc = handle.poll()
                        exited = rc is not None
                    else:
                        exited = not self.procs.alive(pid)
                    if exited:
                        verdict = "exited"
                        break
                    # 3. a long-lived worker died while the leader lives
                    kids = self.procs.children(pid)
                    for c, st in kids.items():
                        if c not in workers or workers[c][0] != st:
                            workers[c] = (st, now)
                    for c, (st, seen) in list(workers.items()):
                        if c not in kids:
                            if now - seen >= p["child_grace"]:
                                died = (c, now - seen)
                                break
                            del workers[c]
                    if died is not None:
                        verdict = "child_died"
                        break
                    # 4. health
                    if now >= next_health:
                        code = self.http(p["health_url"], self.headers(), max(0.5, min(2.0, deadline - now)))
                        next_health = self.clock() + p["health_interval"]
                        if code is not None:
                            last_activity = self.clock()
                        if code == 200 and watch is None:
                            # one last look at the log: a crash written just before the 200 wins
                            clf.feed(follower.read())
                            if clf.crash is None:
                                verdict = "ready"
                                break
                            continue
                    now = self.clock()
                    if watch is None and p["stall_timeout"] and now - last_activity >= p["stall_timeout"]:
                        verdict = "stalled"
                        break
                    if now >= deadline:
                        if watch is not None:
                            code = self.http(p["health_url"], self.headers(), 2.0)
                            clf.feed(follower.read())
                            if clf.crash is not None:
                                continue
                            verdict = "ready" if code == 200 else "unhealthy"
                            break
                        verdict = "timeout"
                        break
                self.sleep(p["poll_interval"])
        finally:
            elapsed = self.clock() - t0
        # drain what is left of the log, then report
        clf.feed(follower.read())
        if verdict in ("exited", "child_died"):
            # The process side spoke first; give the log the settle time to say why.
            end = self.clock() + p["settle_time"]
            while not (clf.crash is not None and clf.settled) and self.clock() < end:
                self.sleep(p["poll_interval"])
                clf.feed(follower.read())
            clf.finalize()
        follower.close()
        return self.report(verdict, clf, state, elapsed, rc, died, attached, watch is not None)

    def _tail_of(self, path):
        if not path or not os.path.exists(path):
            return []
        with open(path, "rb") as fh:
            fh.seek(max(0, os.fstat(fh.fileno()).st_size - 65536))
            return tail_lines(fh.read(), self.p["log_tail_lines"])

    def report(self, verdict, clf, state, elapsed, rc, died, attached, watch_mode=False):
        p = self.p
        r = self.result
        s = clf.summary()
        r.update(
            pid=state["pid"], log_path=state["log_path"], attempt=state.get("attempt"),
            elapsed=round(elapsed, 3), phase=s["phase"], shards=s["shards"], emulator=s["emulator"],
            phases=[{"phase": ph["phase"], "elapsed": round(ph["at"], 3), "lineno": ph["lineno"]} for ph in clf.phases],
            log_tail=clf.tail(p["log_tail_lines"]),
        )
        if verdict == "ready":
            if watch_mode:
                r["msg"] = "watched %.1f s: no crash, healthy" % elapsed
                return r
            if attached:
                r["msg"] = "attached to our server (same fingerprint) and it became healthy"
            return r
        crash = clf.crash
        if crash is not None:
            cls, hint = crash["class"], crash["hint"]
            r.update(deciding_line=crash["line"], deciding_lineno=crash["lineno"], crash_exception=crash.get("exception"),
                     traceback=crash.get("traceback"))
        elif verdict == "exited":
            cls = "killed" if rc is not None and rc < 0 else "exited"
            hint = ("the server exited (rc=%s) before it was healthy and its log names no known cause: "
                    "read log_tail" % rc)
        elif verdict == "child_died":
            cls = "child_died"
            hint = ("a long-lived child of the server (PID %d) died while the parent lives on: the server "
                    "cannot serve and would hang (the kernel OOM killer is a common cause: dmesg -T | grep -i oom)" % died[0])
            r["dead_child_pid"] = died[0]
        elif verdict == "unhealthy":
            cls = "unhealthy"
            hint = "the server is running but its health URL does not answer 200: read log_tail"
        elif verdict == "stalled":
            cls = "stalled"
            hint = ("no log output and no HTTP answer for %d s in phase '%s': the server looks hung"
                    % (p["stall_timeout"], s["phase"]))
        else:
            cls = "timeout"
            hint = ("not healthy after %d s (phase '%s'); raise timeout if the load is just slow"
                    % (p["timeout"], s["phase"]))
        r.update(crash_class=cls, hint=hint, rc=rc)
        if verdict == "timeout":
            lead = "timed out after %d s in phase '%s'" % (p["timeout"], s["phase"])
        else:
            detail = r.get("crash_exception")
            lead = "%s: %s%s" % ({"unhealthy": "server unhealthy", "stalled": "server hung"}.get(verdict, "server crashed"),
                                 cls, " (%s)" % detail[:200] if detail else "")
        r["msg"] = "%s — %s (see log_tail, %s)" % (lead, hint, state["log_path"])
        if p["stop_on_failure"]:
            stopped = sglang_proc.stop_tree(state, grace=min(p["stop_timeout"], 10), clock=self.clock, sleep=self.sleep)
            if stopped["signalled"] or stopped["killed"]:
                r["stopped_after_failure"] = stopped
        r["failed"] = True
        return r

    # ---------------------------------------------------------------- stop
    def stop_only(self):
        state, ours = self._existing()
        if state is None:
            return self.result
        if self.module.check_mode:
            self.result["changed"] = True
            self.result["msg"] = "would stop PID %s" % state.get("pid") if ours else "would remove stale run state"
            return self.result
        self._stop(state)
        self.result["changed"] = True
        self.result["pid"] = state.get("pid")
        return self.result


def argument_spec():
    return dict(
        name=dict(type="str", default="sglang"),
        state=dict(type="str", default="started", choices=["started", "stopped", "watched"]),
        watch_time=dict(type="float", default=3.0),
        argv=dict(type="list", elements="str"),
        environment=dict(type="dict", default={}),
        secret_environment=dict(type="dict", default={}, no_log=True),
        chdir=dict(type="path"),
        log_dir=dict(type="path", required=True),
        run_dir=dict(type="path"),
        run_as=dict(type="str"),
        fingerprint_files=dict(type="list", elements="path", default=[]),
        fingerprint_data=dict(type="dict", default={}),
        health_url=dict(type="str", default="http://127.0.0.1:30000/health_generate"),
        api_key=dict(type="str", no_log=True),
        port=dict(type="int"),
        timeout=dict(type="int", default=1800),
        stall_timeout=dict(type="int", default=900),
        settle_time=dict(type="float", default=0.3),
        poll_interval=dict(type="float", default=0.1),
        health_interval=dict(type="float", default=0.25),
        child_grace=dict(type="float", default=2.0),
        stop_timeout=dict(type="int", default=30),
        stop_on_failure=dict(type="bool", default=True),
        force_restart=dict(type="bool", default=False),
        on_foreign_pid=dict(type="str", default="fail", choices=["fail", "ignore"]),
        log_tail_lines=dict(type="int", default=40),
        keep_attempts=dict(type="int", default=20),
    )


def main(**inject):
    module = AnsibleModule(
        argument_spec=argument_spec(),
        required_if=[("state", "started", ("argv",))],
        supports_check_mode=True,
    )
    waiter = ModelWaiter(module, **inject)
    try:
        result = waiter.run()
    except WaitError as e:
        module.fail_json(msg=str(e), **waiter.result)
    except (IOError, OSError) as e:
        module.fail_json(msg="%s: %s" % (type(e).__name__, e), **waiter.result)
    if result.pop("failed", False):
        msg = result.pop("msg")
        module.fail_json(msg=msg, **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()

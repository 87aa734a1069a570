# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""wait_for_model's input checks: every option, before anything is stopped or launched (and before the lock).

Module side only (standard library and Ansible's module_utils). :class:`Inputs` checks the options of one call
and resolves what the rest of the run reads from the ModelWaiter: the launcher, the port, the run dir, the service
user, the program that runs in the end, where the API key lives. Each refusal is a :class:`WaitError` that says
what to fix and that nothing was stopped or launched.
"""

from __future__ import annotations

import math
import os
import pwd
import re
import stat
import subprocess
import tempfile
from urllib.parse import urlparse

from ansible.module_utils import sglang_contract
from ansible.module_utils import sglang_proc
from ansible.module_utils import sglang_redact
from ansible.module_utils.sglang_exec import (
    INTERPRETER_RX, PROBE_TIMEOUT, exec_problem, may_access, resolve_exec, walk_as, which_as,
)
from ansible.module_utils.sglang_unit import unit_name


class WaitError(Exception):
    """Bad input or an unsafe situation: fail before anything is stopped or launched."""


class Orphaned(Exception):
    """The caller is gone (the SSH connection dropped mid-wait): nobody can read a result any more."""


class Prober(object):
    """Runs a short command as the service user and returns (rc, output); rc None when it could not run.
    Injectable so unit tests need no real processes."""

    def run(self, argv, env, cwd, user, timeout):
        kwargs = dict(user=user[0], group=user[1], extra_groups=user[2]) if user is not None else {}
        try:
            proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  env=env, cwd=cwd, timeout=timeout, close_fds=True, check=False, **kwargs)
        except subprocess.TimeoutExpired:
            return None, "did not finish within %d s" % timeout
        except (OSError, subprocess.SubprocessError) as e:
            return None, str(e)
        return proc.returncode, proc.stdout[-4000:].decode("utf-8", "replace")


# ------------------------------------------------------------------------------ input checks
# option: (lowest, highest, lowest excluded?). Checked for every state, before anything is touched.
RANGES = {
    "timeout": (0, 7 * 86400, True),
    "stall_timeout": (0, 7 * 86400, False),
    "settle_time": (0, 60, False),
    "poll_interval": (0, 10, True),
    "health_interval": (0, 600, True),
    "health_timeout": (0, 600, True),
    "unhealthy_after": (1, 1000, False),
    "serve_health_interval": (0, 86400, True),
    "serve_stuck_seconds": (0, 7 * 86400, True),
    "child_grace": (0, 3600, False),
    "stop_timeout": (0, 3600, False),
    "gpu_release_below_mib": (0, 1 << 30, True),
    "gpu_release_timeout": (0, 86400, False),
    "lock_timeout": (0, 86400, False),
    "watch_time": (0, 86400, False),
    "log_tail_lines": (0, 10000, False),
    "keep_attempts": (0, 100000, False),
    "min_free_space_mib": (0, 1 << 30, False),
    "log_offset": (-1, None, False),
    "step_time": (0, 86400, False),
}


def check_ranges(p):
    for key, (lo, hi, open_lo) in sorted(RANGES.items()):
        value = p.get(key)
        if value is None:
            continue
        if isinstance(value, float) and not math.isfinite(value):
            raise WaitError("%s must be a finite number (got %s)" % (key, value))
        if (value <= lo if open_lo else value < lo) or (hi is not None and value > hi):
            raise WaitError("%s must be %s %s%s (got %s)" % (
                key, ">" if open_lo else ">=", lo, " and <= %s" % hi if hi is not None else "", value))


MIN_API_KEY_LENGTH = 16  # a key this long cannot be guessed, and SGLang masks it (it masks 4 characters and more)
MAKE_A_KEY = "openssl rand -hex 24"


def check_secret_lengths(p):
    """A secret too short to be one is refused before anything is stopped or launched: an ``api_key`` under
    MIN_API_KEY_LENGTH characters (a short key is guessed; one under 4 SGLang itself logs unmasked), a
    ``secret_environment`` value of 1 to 3 characters (sglang_redact.MIN_SECRET_LENGTH: the supervisor cannot mask
    it without masking every such string of the log; a value that short is no secret and belongs in
    ``environment``). The messages name the option, never the value. ``state: stopped`` uses neither and never
    refuses: a deployment with an old short key can always be stopped. ``redact`` strings are not secrets of the
    server's own: a short one is only warned about (see ModelWaiter.secrets)."""
    if p["state"] == "stopped":
        return
    key = p["api_key"]
    if key and len(key) < MIN_API_KEY_LENGTH:
        raise WaitError("api_key is %d characters long, shorter than %d: refused (SGLang logs a key under %d characters "
                        "unmasked, and a short key can be guessed). Make one with `%s` (48 hex characters) and put "
                        "it in the vault. Nothing was stopped or launched."
                        % (len(key), MIN_API_KEY_LENGTH, sglang_redact.MIN_SECRET_LENGTH, MAKE_A_KEY))


def check_secret_environment_lengths(p):
    """See check_secret_lengths: a secret_environment value of 1 to 3 characters (its name already checked)."""
    for name, value in sorted(p["secret_environment"].items()):
        value = "" if value is None else str(value)
        if 0 < len(value) < sglang_redact.MIN_SECRET_LENGTH:
            raise WaitError("secret_environment %s is %d characters long, shorter than %d: refused, since the "
                            "supervisor cannot mask it (it would mask every such string of the log). A value this short "
                            "is no secret: put it in environment; a real token is longer (e.g. `%s`). Nothing was "
                            "stopped or launched." % (name, len(value), sglang_redact.MIN_SECRET_LENGTH, MAKE_A_KEY))


def check_environment_names(p):
    """Every environment and secret_environment name is a variable name, and none is the run token's."""
    for source in ("environment", "secret_environment"):
        for key in p[source]:
            if not isinstance(key, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                raise WaitError("%s: %r is not a valid variable name" % (source, key))
            if key == sglang_proc.RUN_TOKEN_VAR:
                raise WaitError("%s: %s is set by wait_for_model itself (the run token): remove it" % (source, key))


def health_port(url):
    """(scheme, host, port) of the health URL; WaitError naming the problem (never ValueError)."""
    try:
        u = urlparse(url)
        port = u.port
    except ValueError as e:
        raise WaitError("health_url %r has an invalid port (%s): use a port 1-65535" % (url, e))
    if u.scheme not in ("http", "https") or not u.hostname:
        raise WaitError("health_url %r is not an http(s) URL" % url)
    if port is not None and not 1 <= port <= 65535:
        raise WaitError("health_url %r has port %d: use a port 1-65535" % (url, port))
    return u.scheme, u.hostname, port or (443 if u.scheme == "https" else 80)


def check_dir_writable(what, path, check_mode):
    if not os.path.isdir(path):
        raise WaitError("%s %s does not exist (or is not a directory): create it first" % (what, path))
    if check_mode:
        ok = os.access(path, os.W_OK | os.X_OK | os.R_OK)
    else:
        try:
            fd, tmp = tempfile.mkstemp(prefix=".wait_for_model-", dir=path)
            os.close(fd)
            os.unlink(tmp)
            ok = True
        except OSError as e:
            raise WaitError("%s %s is not writable (%s): nothing was stopped or launched" % (what, path, e.strerror or e))
    if not ok:
        raise WaitError("%s %s is not readable and writable by %s" % (what, path, pwd.getpwuid(os.geteuid()).pw_name))


def open_log(path, log_dir, reader):
    """A read descriptor of a server log: only a regular file inside ``log_dir`` (after resolving
    symlinks), opened without following a symlink, that ``reader`` ((uid, gids), the service user)
    could read itself. WaitError otherwise: the module never prints another file."""
    real, top = os.path.realpath(path), os.path.realpath(log_dir)
    if os.path.dirname(real) != top and not real.startswith(top + os.sep):
        raise WaitError("log_path %s is not under log_dir %s (it resolves to %s): not read" % (path, log_dir, real))
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise WaitError("log %s cannot be opened safely (%s): not read" % (path, e.strerror or e))
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or not may_access(st, reader[0], reader[1], 4):
        os.close(fd)
        raise WaitError("log %s is not a regular file that the service user can read: not read" % path)
    return fd


def runnable_program(argv0, chdir, env_path, ids, who):
    """What runs in the end (argv[0], or its last ``#!`` interpreter), resolved the way exec resolves it (the server's
    PATH, its working directory) and proven runnable by the service user (``ids``: (uid, gids); ``who``: its name),
    before any log file is created. WaitError naming what to fix otherwise."""
    exe = resolve_exec(argv0, env_path, chdir)
    if exe is None:
        raise WaitError("argv[0] %s was not found or is not executable (PATH=%s): install it or fix argv. "
                        "Nothing was stopped or launched." % (argv0, env_path))
    if chdir:
        _real, why = walk_as(os.path.join(chdir, "."), ids)
        if why:
            raise WaitError("chdir %s cannot be entered by %s: %s. Fix its permissions or choose another "
                            "chdir. Nothing was stopped or launched." % (chdir, who, why))
    cwd = chdir or os.getcwd()
    named = argv0 if "/" in argv0 else which_as(argv0, env_path, cwd, ids)
    if named is None:
        raise WaitError("argv[0] %s is not executable by %s on PATH=%s: fix the permissions or argv. "
                        "Nothing was stopped or launched." % (argv0, who, env_path))
    why, program = exec_problem(os.path.join(cwd, named), ids, env_path, cwd)
    if why:
        raise WaitError("argv[0] %s cannot be run by %s: %s. Fix it (reinstall the venv, fix the #! line or "
                        "the permissions). Nothing was stopped or launched." % (argv0, who, why))
    return program


class Inputs(object):
    def __init__(self, w):
        self.w = w  # the ModelWaiter: options, result, injected clock and tools
        self._secrets = None  # the values the log never shows, made once (secrets())

    def validate(self):
        """Every input, before anything is stopped or launched (and before the lock is taken)."""
        p = self.w.p
        check = self.w.module.check_mode
        self.check_options(p)
        self.resolve_places(p)
        if self.w.fresh and (p["state"] == "stopped" or check):
            self.w.missing_files = [f for f in p["fingerprint_files"] if not os.path.isfile(f)]
            return
        self.check_run_dir(p, check)
        if p["state"] != "started":
            if not os.access(p["log_dir"], os.R_OK | os.X_OK):
                raise WaitError("log_dir %s is not readable" % p["log_dir"])
            return
        self.check_log_dir(p, check)
        self.check_launch(p, check)

    def check_options(self, p):
        """The options alone, for every state: the name, the ranges, the GPU indices, the secrets' lengths."""
        if not sglang_proc.safe_name(p["name"]):
            raise WaitError("name %r is not allowed: letters, digits, '.', '_', '-' (no '/', no '..'), at most 64" % p["name"])
        check_ranges(p)
        if any(i < 0 for i in p.get("gpu_release_indices") or ()):
            raise WaitError("gpu_release_indices must be GPU indices >= 0 (got %s)" % p["gpu_release_indices"])
        check_secret_lengths(p)

    def resolve_places(self, p):
        """The launcher, the port, the run dir, whether the host is fresh; a systemd unit of our name is ours."""
        self.w.launcher = self.pick_launcher()
        self.w.result["launcher"] = self.w.launcher
        if p["port"] is not None and not 1 <= p["port"] <= 65535:
            raise WaitError("port %d is out of range: use a port 1-65535. Nothing was stopped or launched." % p["port"])
        _scheme, _host, url_port = health_port(p["health_url"])
        self.w.port = p["port"] or url_port
        log_dir = p["log_dir"]
        self.w.run_dir = p["run_dir"] or log_dir
        # Nothing can be recorded where there is no directory: a fresh host. Stopping is then a no-op,
        # and in check mode (the tasks that create the directories did not run) a start is reported.
        self.w.fresh = not os.path.isdir(log_dir) or not os.path.isdir(self.w.run_dir)
        if self.w.launcher == "systemd" and not (self.w.fresh and p["state"] == "stopped"):
            self.w.unit.check_unit()  # check mode and a fresh host too: a unit of our name that is not ours is refused

    def check_run_dir(self, p, check):
        """log_dir and run_dir exist, run_dir is one we trust and can write."""
        if not os.path.isdir(p["log_dir"]):
            raise WaitError("log_dir %s does not exist (or is not a directory): create it first" % p["log_dir"])
        if not os.path.isdir(self.w.run_dir):
            raise WaitError("run_dir %s does not exist: create it first" % self.w.run_dir)
        try:
            os.close(sglang_proc.open_run_dir(self.w.run_dir))
        except sglang_proc.UntrustedState as e:
            raise WaitError(str(e))
        check_dir_writable("run_dir", self.w.run_dir, check)

    def check_log_dir(self, p, check):
        """state started: log_dir is writable, its latest-log link is a link, log_dir and run_dir have room."""
        log_dir = p["log_dir"]
        check_dir_writable("log_dir", log_dir, check)
        link = os.path.join(log_dir, "%s.log" % p["name"])
        if os.path.lexists(link) and not os.path.islink(link):
            raise WaitError("%s is not the symlink to the latest attempt's log (something else is there): remove it. "
                            "Nothing was stopped or launched." % link)
        # statvfs only reads: check mode (the role's plan before a stop) checks the space too
        for what, path in (("log_dir", log_dir), ("run_dir", self.w.run_dir)):
            sv = os.statvfs(path)
            free_mib = sv.f_bavail * sv.f_frsize // (1 << 20)
            if free_mib < p["min_free_space_mib"]:
                raise WaitError("%s %s has %d MiB free, less than min_free_space_mib (%d): free some space. "
                                "Nothing was stopped or launched." % (what, path, free_mib, p["min_free_space_mib"]))

    def check_launch(self, p, check):
        """state started: what the launch needs (argv, chdir, fingerprint files, the API key's file, the
        environment, the service user) and that the program runs."""
        if not p["argv"] or not p["argv"][0]:
            raise WaitError("argv is empty: give the server's command as a list, e.g. [python, -m, sglang.launch_server, ...]")
        if p["chdir"] and not os.path.isdir(p["chdir"]):
            raise WaitError("chdir %s does not exist (or is not a directory)" % p["chdir"])
        for path in p["fingerprint_files"]:
            if not os.path.isfile(path) or not os.access(path, os.R_OK):
                if check and not os.path.exists(path):
                    self.w.missing_files.append(path)  # a template that check mode did not write
                    continue
                raise WaitError("fingerprint_files: %s does not exist or is not readable" % path)
        if p["api_key"]:
            self.w.key_source = self.api_key_source(check)
        check_environment_names(p)
        check_secret_environment_lengths(p)
        if p["run_as"]:
            self.resolve_run_as(p["run_as"])
        if not check or p["prove_launch"]:
            ids, who = self.runner_ids()
            self.w.exec_program = runnable_program(p["argv"][0], p["chdir"], self.child_env()["PATH"], ids, who)

    def resolve_run_as(self, name):
        """The service user run_as (self.w.user, self.w.user_pw); switching to another needs root."""
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            raise WaitError("run_as: no user named %s on this host" % name)
        if os.geteuid() != 0 and pw.pw_uid != os.geteuid():
            raise WaitError("run_as: switching to %s needs root (use become: true)" % name)
        groups = os.getgrouplist(pw.pw_name, pw.pw_gid)
        self.w.user = (pw.pw_uid, pw.pw_gid, groups)
        self.w.user_pw = pw

    def pick_launcher(self):
        """``systemd`` where systemd runs the host and the module runs as root (auto), else ``detached``."""
        wanted = self.w.p["launcher"]
        booted, why = self.w.booted()
        if wanted == "auto":
            return "systemd" if booted and os.geteuid() == 0 else "detached"
        if wanted == "systemd":
            if not booted:
                raise WaitError("launcher: systemd, but %s: use launcher: detached (or auto). Nothing was stopped or "
                                "launched." % why)
            if os.geteuid() != 0:
                raise WaitError("launcher: systemd needs root to write and start %s (use become: true). Nothing was "
                                "stopped or launched." % unit_name(self.w.p["name"]))
        return wanted

    def runner_ids(self):
        """((uid, gids), name) of the user the server runs as."""
        if self.w.user is not None:
            return (self.w.user[0], self.w.user[2]), self.w.user_pw.pw_name
        return (os.geteuid(), set(os.getgroups()) | {os.getegid()}), self.w.user_pw.pw_name

    def prove_it_runs(self):
        """Run the server's interpreter (a Python or a POSIX shell, argv[0] itself or the last ``#!`` interpreter)
        once as the service user with ``-c ''``: a venv whose Python cannot start fails here, before our old
        server is stopped. Other programs are proven by the file checks of validate() alone."""
        program = self.w.exec_program
        if program is None or not INTERPRETER_RX.search(os.path.basename(program)):
            return
        argv = [program, "-c", ""]
        rc, out = self.w.prober.run(argv, self.child_env(), self.w.p["chdir"], self.w.user, PROBE_TIMEOUT)
        if rc != 0:
            raise WaitError("the server's interpreter %s does not run as %s (%s: %s): fix the venv or argv. Nothing was "
                            "stopped or launched." % (program, self.runner_ids()[1], "rc=%s" % rc if rc is not None else "error",
                                                      (out or "").strip()[-300:] or "no output"))

    def reader(self, state=None):
        """(uid, gids) of the user whose view of the log files counts: the service user."""
        if self.w.user is not None:
            return self.w.user[0], set(self.w.user[2])
        name = (state or {}).get("user")
        if name:
            try:
                pw = pwd.getpwnam(name)
                return pw.pw_uid, set(os.getgrouplist(pw.pw_name, pw.pw_gid))
            except KeyError:
                pass
        return os.geteuid(), set(os.getgroups())

    def child_env(self):
        pw = self.w.user_pw
        env = {
            "PATH": os.environ.get("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            "HOME": pw.pw_dir,
            "USER": pw.pw_name,
            "LOGNAME": pw.pw_name,
            "PYTHONUNBUFFERED": "1",
        }
        for source in ("environment", "secret_environment"):
            for key, value in self.w.p[source].items():
                env[key] = "" if value is None else str(value)
        return env

    def secrets(self):
        """Values the log must never show: the API key, every secret_environment value, every ``redact`` string.
        A short api_key or secret_environment value was refused by check_secret_lengths; a ``redact`` string
        shorter than sglang_redact.MIN_SECRET_LENGTH is not redacted (masking every "1" of a log would destroy it):
        warned about by name, once."""
        if self._secrets is not None:
            return self._secrets
        p = self.w.p
        named = [("api_key", p["api_key"])] + [("secret_environment %s" % k, v) for k, v in
                                               sorted(p["secret_environment"].items())]
        named += [("redact[%d]" % i, v) for i, v in enumerate(p["redact"])]
        out = []
        for what, value in named:
            value = "" if value is None else str(value)
            if len(value) >= sglang_redact.MIN_SECRET_LENGTH:
                if value not in out:
                    out.append(value)
            elif value:
                self.w.module.warn("%s is shorter than %d characters: it is not redacted from the server's log"
                                   % (what, sglang_redact.MIN_SECRET_LENGTH))
        self._secrets = out
        return out

    def api_key_source(self, check):
        """The API key lives on disk in one file only, the server's 0600 ``--config`` file: ``{"path", "key"}`` for
        the supervisor program, which reads the key from there itself. Refused (before
        anything is stopped) when argv has no ``--config`` file whose ``api_key``/``api-key`` line is this key; in
        check mode a config file not written yet is taken on trust."""
        path = sglang_contract.config_file_of(self.w.p["argv"])
        if path is None:
            raise WaitError("api_key needs the key in the server's --config file (argv has no --config <file>): the "
                            "key's one copy on disk is that 0600 file, which the supervisor program reads. Put an api-key "
                            "line there (the sglang_server role does). Nothing was stopped or launched.")
        path = os.path.join(self.w.p["chdir"] or os.getcwd(), path)
        try:
            found = sglang_contract.read_config_secret(path)
        except FileNotFoundError:
            if check:
                return {"path": path, "key": "api-key"}
            raise WaitError("the --config file %s does not exist: the supervisor reads api_key from it. "
                            "Nothing was stopped or launched." % path)
        except (OSError, ValueError) as e:
            raise WaitError("cannot read the --config file %s (%s): the supervisor reads api_key from it. "
                            "Nothing was stopped or launched." % (path, getattr(e, "strerror", None) or e))
        if found is None or found[1] != self.w.p["api_key"]:
            raise WaitError("the --config file %s %s: the supervisor program reads the key from there (its one "
                            "copy on disk), so it must hold exactly api_key. Nothing was stopped or "
                            "launched." % (path, "has no api_key/api-key line" if found is None
                                           else "holds another key in its %s line than api_key" % found[0]))
        return {"path": path, "key": found[0]}

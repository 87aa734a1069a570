# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""wait_for_model's input checks: every option, before anything is stopped or launched (and before the lock).

Module side only (standard library and Ansible's module_utils). The checks of one option or one place, each a
function; sglang_settings.validate() runs them in order and returns the run's frozen Settings. Each refusal is a
:class:`WaitError` that says what to fix and that nothing was stopped or launched.
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

from ansible.module_utils import sglang_proc
from ansible.module_utils import sglang_redact
from ansible.module_utils.sglang_exec import exec_problem, may_access, resolve_exec, walk_as, which_as


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
    server's own: a short one is only warned about (see sglang_settings.secret_values)."""
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

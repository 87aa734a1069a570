# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""wait_for_model's settings: :func:`validate` checks every option (sglang_input_checks' checks, in order) before
anything is stopped or launched (and before the lock), and returns the run's frozen :class:`Settings`: the
options, the launcher, the port, the run dir, the service user, the program that runs in the end, where the API
key lives, our unit's facts. Nothing else resolves them and nothing changes them afterwards. Also what follows from
the settings alone: the server's environment, the values its log never shows, whose view of the log counts.

Module side only (standard library and Ansible's module_utils).
"""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

from ansible.module_utils import sglang_contract
from ansible.module_utils import sglang_proc
from ansible.module_utils import sglang_redact
from ansible.module_utils import sglang_unit_guard
from ansible.module_utils.sglang_exec import INTERPRETER_RX, PROBE_TIMEOUT
from ansible.module_utils.sglang_input_checks import (
    WaitError, check_dir_writable, check_environment_names, check_ranges, check_secret_environment_lengths,
    check_secret_lengths, health_port, runnable_program,
)
from ansible.module_utils.sglang_reports import findings
from ansible.module_utils.sglang_unit_facts import unit_name


@dataclass(frozen=True)
class Settings(object):
    """One run's settings, checked. ``p``: the options, with the action plugin's step protocol under the names the
    run reads (step_time, resume_attempt); ``check``: check mode; ``fresh``: log_dir or run_dir does not exist yet;
    ``missing_files``: fingerprint files check mode did not find; ``user``: (uid, gid, groups) of run_as or None,
    ``user_pw`` its (or our) passwd entry; ``exec_program``: what runs in the end (argv[0] or its last #!
    interpreter), None when not proven; ``key_source``: {"path", "key"} of the --config file that holds api_key;
    ``unit``, ``unit_facts``, ``unit_before``: launcher systemd, our unit's name, facts and text (None: none)."""
    p: Dict[str, Any]
    check: bool
    launcher: str
    port: int
    run_dir: str
    fresh: bool
    missing_files: Tuple[str, ...] = ()
    user: Optional[tuple] = None
    user_pw: Any = None
    exec_program: Optional[str] = None
    key_source: Optional[Dict[str, str]] = None
    unit: Optional[str] = None
    unit_facts: Optional[Dict[str, Any]] = field(default=None, compare=False)
    unit_before: Optional[str] = None

    def found(self):
        """What validation reports in the result: the launcher, and our unit's facts (launcher systemd)."""
        out = {"launcher": self.launcher}
        if self.unit is not None:
            out.update(unit=self.unit, unit_facts=self.unit_facts)
        return out


def run_params(params):
    """The options under the names the run reads: the action plugin's step protocol (_step_time,
    _resume_attempt) as step_time and resume_attempt."""
    return dict(params, step_time=params.get("_step_time") or 0.0, resume_attempt=params.get("_resume_attempt"))


def validate(params, host, check):
    """Every input, before anything is stopped or launched (and before the lock is taken): the run's Settings.
    ``params``: run_params(module.params); ``host``: the Host (booted, systemctl, warnings)."""
    p = params
    with findings() as report:
        check_options(p)
        launcher = pick_launcher(p, host.booted)
        report["launcher"] = launcher
        port, run_dir, fresh = places(p)
        got = dict(p=p, check=check, launcher=launcher, port=port, run_dir=run_dir, fresh=fresh,
                   user_pw=pwd.getpwuid(os.geteuid()))
        if launcher == "systemd" and not (fresh and p["state"] == "stopped"):
            # check mode and a fresh host too: a unit of our name that is not ours is refused
            facts, got["unit_before"] = sglang_unit_guard.check_unit(p, run_dir, host, check)
            got.update(unit=facts["unit"], unit_facts=facts["unit_facts"])
            report.update(facts)
        if fresh and (p["state"] == "stopped" or check):
            got["missing_files"] = tuple(f for f in p["fingerprint_files"] if not os.path.isfile(f))
            return Settings(**got)
        check_run_dir(p, run_dir, check)
        if p["state"] != "started":
            if not os.access(p["log_dir"], os.R_OK | os.X_OK):
                raise WaitError("log_dir %s is not readable" % p["log_dir"])
            return Settings(**got)
        check_log_dir(p, run_dir, check)
        got.update(check_launch(p, check, got["user_pw"]))
        return Settings(**got)


def check_options(p):
    """The options alone, for every state: the name, the ranges, the GPU indices, the secrets' lengths."""
    if not sglang_proc.safe_name(p["name"]):
        raise WaitError("name %r is not allowed: letters, digits, '.', '_', '-' (no '/', no '..'), at most 64" % p["name"])
    check_ranges(p)
    if any(i < 0 for i in p.get("gpu_release_indices") or ()):
        raise WaitError("gpu_release_indices must be GPU indices >= 0 (got %s)" % p["gpu_release_indices"])
    check_secret_lengths(p)


def places(p):
    """(port, run dir, fresh?): whether the host is fresh. Nothing can be recorded where there is no directory:
    a fresh host. Stopping is then a no-op, and in check mode (the tasks that create the directories did not run)
    a start is reported."""
    if p["port"] is not None and not 1 <= p["port"] <= 65535:
        raise WaitError("port %d is out of range: use a port 1-65535. Nothing was stopped or launched." % p["port"])
    _scheme, _host, url_port = health_port(p["health_url"])
    run_dir = p["run_dir"] or p["log_dir"]
    return p["port"] or url_port, run_dir, not os.path.isdir(p["log_dir"]) or not os.path.isdir(run_dir)


def pick_launcher(p, booted):
    """``systemd`` where systemd runs the host and the module runs as root (auto), else ``detached``."""
    wanted = p["launcher"]
    is_booted, why = booted()
    if wanted == "auto":
        return "systemd" if is_booted and os.geteuid() == 0 else "detached"
    if wanted == "systemd":
        if not is_booted:
            raise WaitError("launcher: systemd, but %s: use launcher: detached (or auto). Nothing was stopped or "
                            "launched." % why)
        if os.geteuid() != 0:
            raise WaitError("launcher: systemd needs root to write and start %s (use become: true). Nothing was "
                            "stopped or launched." % unit_name(p["name"]))
    return wanted


def check_run_dir(p, run_dir, check):
    """log_dir and run_dir exist, run_dir is one we trust and can write."""
    if not os.path.isdir(p["log_dir"]):
        raise WaitError("log_dir %s does not exist (or is not a directory): create it first" % p["log_dir"])
    if not os.path.isdir(run_dir):
        raise WaitError("run_dir %s does not exist: create it first" % run_dir)
    try:
        os.close(sglang_proc.open_run_dir(run_dir))
    except sglang_proc.UntrustedState as e:
        raise WaitError(str(e))
    check_dir_writable("run_dir", run_dir, check)


def check_log_dir(p, run_dir, check):
    """state started: log_dir is writable, its latest-log link is a link, log_dir and run_dir have room."""
    log_dir = p["log_dir"]
    check_dir_writable("log_dir", log_dir, check)
    link = os.path.join(log_dir, "%s.log" % p["name"])
    if os.path.lexists(link) and not os.path.islink(link):
        raise WaitError("%s is not the symlink to the latest attempt's log (something else is there): remove it. "
                        "Nothing was stopped or launched." % link)
    # statvfs only reads: check mode (the role's plan before a stop) checks the space too
    for what, path in (("log_dir", log_dir), ("run_dir", run_dir)):
        sv = os.statvfs(path)
        free_mib = sv.f_bavail * sv.f_frsize // (1 << 20)
        if free_mib < p["min_free_space_mib"]:
            raise WaitError("%s %s has %d MiB free, less than min_free_space_mib (%d): free some space. "
                            "Nothing was stopped or launched." % (what, path, free_mib, p["min_free_space_mib"]))


def check_launch(p, check, user_pw):
    """state started: what the launch needs (argv, chdir, fingerprint files, the API key's file, the
    environment, the service user) and that the program runs. Returns the settings it resolves."""
    if not p["argv"] or not p["argv"][0]:
        raise WaitError("argv is empty: give the server's command as a list, e.g. [python, -m, sglang.launch_server, ...]")
    if p["chdir"] and not os.path.isdir(p["chdir"]):
        raise WaitError("chdir %s does not exist (or is not a directory)" % p["chdir"])
    got = {"user": None, "user_pw": user_pw}
    missing = []
    for path in p["fingerprint_files"]:
        if not os.path.isfile(path) or not os.access(path, os.R_OK):
            if check and not os.path.exists(path):
                missing.append(path)  # a template that check mode did not write
                continue
            raise WaitError("fingerprint_files: %s does not exist or is not readable" % path)
    got["missing_files"] = tuple(missing)
    if p["api_key"]:
        got["key_source"] = api_key_source(p, check)
    check_environment_names(p)
    check_secret_environment_lengths(p)
    if p["run_as"]:
        got["user"], got["user_pw"] = resolve_run_as(p["run_as"])
    if not check or p["prove_launch"]:
        ids, who = runner_ids(got["user"], got["user_pw"])
        got["exec_program"] = runnable_program(p["argv"][0], p["chdir"], environment(p, got["user_pw"])["PATH"],
                                               ids, who)
    return got


def resolve_run_as(name):
    """(user, passwd entry) of the service user run_as; switching to another needs root."""
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        raise WaitError("run_as: no user named %s on this host" % name)
    if os.geteuid() != 0 and pw.pw_uid != os.geteuid():
        raise WaitError("run_as: switching to %s needs root (use become: true)" % name)
    return (pw.pw_uid, pw.pw_gid, os.getgrouplist(pw.pw_name, pw.pw_gid)), pw


def runner_ids(user, user_pw):
    """((uid, gids), name) of the user the server runs as."""
    if user is not None:
        return (user[0], user[2]), user_pw.pw_name
    return (os.geteuid(), set(os.getgroups()) | {os.getegid()}), user_pw.pw_name


def api_key_source(p, check):
    """The API key lives on disk in one file only, the server's 0600 ``--config`` file: ``{"path", "key"}`` for
    the supervisor program, which reads the key from there itself. Refused (before
    anything is stopped) when argv has no ``--config`` file whose ``api_key``/``api-key`` line is this key; in
    check mode a config file not written yet is taken on trust."""
    path = sglang_contract.config_file_of(p["argv"])
    if path is None:
        raise WaitError("api_key needs the key in the server's --config file (argv has no --config <file>): the "
                        "key's one copy on disk is that 0600 file, which the supervisor program reads. Put an api-key "
                        "line there (the sglang_server role does). Nothing was stopped or launched.")
    path = os.path.join(p["chdir"] or os.getcwd(), path)
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
    if found is None or found[1] != p["api_key"]:
        raise WaitError("the --config file %s %s: the supervisor program reads the key from there (its one "
                        "copy on disk), so it must hold exactly api_key. Nothing was stopped or "
                        "launched." % (path, "has no api_key/api-key line" if found is None
                                       else "holds another key in its %s line than api_key" % found[0]))
    return {"path": path, "key": found[0]}


# ------------------------------------------------------------------------------ what follows from the settings
def environment(p, user_pw):
    """The server's environment: a few of ours, the service user's, then environment and secret_environment."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "HOME": user_pw.pw_dir,
        "USER": user_pw.pw_name,
        "LOGNAME": user_pw.pw_name,
        "PYTHONUNBUFFERED": "1",
    }
    for source in ("environment", "secret_environment"):
        for key, value in p[source].items():
            env[key] = "" if value is None else str(value)
    return env


def child_env(s):
    """The server's environment under the settings ``s``."""
    return environment(s.p, s.user_pw)


def secret_values(s, warn):
    """Values the log must never show: the API key, every secret_environment value, every ``redact`` string.
    A short api_key or secret_environment value was refused by check_secret_lengths; a ``redact`` string
    shorter than sglang_redact.MIN_SECRET_LENGTH is not redacted (masking every "1" of a log would destroy it):
    warned about by name (``warn``)."""
    p = s.p
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
            warn("%s is shorter than %d characters: it is not redacted from the server's log"
                 % (what, sglang_redact.MIN_SECRET_LENGTH))
    return out


def reader(s, state=None):
    """(uid, gids) of the user whose view of the log files counts: the service user."""
    if s.user is not None:
        return s.user[0], set(s.user[2])
    name = (state or {}).get("user")
    if name:
        try:
            pw = pwd.getpwnam(name)
            return pw.pw_uid, set(os.getgrouplist(pw.pw_name, pw.pw_gid))
        except KeyError:
            pass
    return os.geteuid(), set(os.getgroups())


def prove_it_runs(s, prober):
    """Run the server's interpreter (a Python or a POSIX shell, argv[0] itself or the last ``#!`` interpreter)
    once as the service user with ``-c ''`` (``prober``: the Host's): a venv whose Python cannot start fails here,
    before our old server is stopped. Other programs are proven by the file checks of validate() alone."""
    program = s.exec_program
    if program is None or not INTERPRETER_RX.search(os.path.basename(program)):
        return
    rc, out = prober.run([program, "-c", ""], child_env(s), s.p["chdir"], s.user, PROBE_TIMEOUT)
    if rc != 0:
        raise WaitError("the server's interpreter %s does not run as %s (%s: %s): fix the venv or argv. Nothing was "
                        "stopped or launched." % (program, runner_ids(s.user, s.user_pw)[1],
                                                  "rc=%s" % rc if rc is not None else "error",
                                                  (out or "").strip()[-300:] or "no output"))

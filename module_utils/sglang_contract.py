# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The contract between ``wait_for_model`` (the module) and the supervisor program (``sglang_supervisor``).

Standard library only; shipped with the module and installed with the supervisor program. Both sides read
these names and nothing else of each other:

* the files of a deployment in its run dir: the supervisor's config (:data:`CONFIG`, written by the module,
  0600), its status (:data:`STATUS`, written by the supervisor), its own lines (:data:`SUPERVISOR_LOG`,
  detached) and the run's lock (:data:`LOCK`);
* :func:`supervisor_config`: the config the module writes, and :func:`config_file_of` /
  :func:`read_config_secret`: where the supervisor reads the API key (the server's own 0600 ``--config``);
* :func:`status_of`: the status of one launch (its token) or attempt, never an earlier one's verdict;
* the exit statuses (:func:`exit_status`), the phase names (:data:`PHASES`) and the verdicts.
"""

from __future__ import annotations

import json
import os
import stat

# Exit statuses of the supervisor program (the unit's RestartPreventExitStatus is EXIT_PERMANENT).
EXIT_STOPPED = 0
EXIT_RESTARTABLE = 69  # EX_UNAVAILABLE: a serving server died, or a load hung; Restart=on-failure may help
EXIT_PERMANENT = 78  # EX_CONFIG: a start that failed; restarting repeats it (RestartPreventExitStatus=78)
EXIT_SETUP = 71  # EX_OSERR: the supervisor could not set up (config, log file, spawn); the message says why

# The phases, in the order a healthy start goes through them (sglang_log reads them from the log).
PHASES = ("launching", "loading_weights", "kv_cache", "cuda_graph", "warmup", "ready")
# Verdicts besides a failure's class: a generation answered, or the supervisor was stopped before a verdict.
READY = "ready"
STOPPED = "stopped"

# A deployment's files in its run dir ("%s": the deployment's name).
CONFIG = "%s.watcher.json"
STATUS = "%s.status.json"
SUPERVISOR_LOG = "%s.supervisor.log"
LOCK = "%s.lock"

# The wait's numbers the supervisor takes from the module's options.
SETTINGS = ("health_interval", "health_timeout", "unhealthy_after", "child_grace", "settle_time", "stall_timeout",
            "poll_interval", "serve_health_interval", "serve_stuck_seconds", "serve_stuck_action")

API_KEY_NAMES = ("api_key", "api-key")  # how SGLang's --config file may name the key (the role writes api-key)
CONFIG_FILE_MAX = 1 << 20


def exit_status(verdict, ready):
    """The exit status for a failure: a start that failed is not retried (except a hang); a serving server is."""
    if not ready and verdict != "stalled":
        return EXIT_PERMANENT
    return EXIT_RESTARTABLE


def supervisor_config(p, token, env, secrets, key_source, fingerprint, parts, port, unit, cgroup, events=True):
    """The supervisor's config (``CONFIG``): what it starts (argv, env, chdir, user), where it logs, how it asks
    health, and the wait's numbers. ``p``: the module's options. Never the API key: the supervisor reads it from
    the server's ``--config`` file (``key_source``, see read_config_secret). ``events=False``: the supervisor's
    waits poll (the benches' baseline)."""
    settings = dict((k, p[k]) for k in SETTINGS)
    settings["extend_timeout"] = p["stall_timeout"] + 60 if p["stall_timeout"] else 0
    if not events:
        settings["events"] = False
    return {
        "launch": token, "argv": list(p["argv"]), "env": env, "chdir": p["chdir"], "user": p["run_as"],
        "log_dir": p["log_dir"], "health_url": p["health_url"], "headers": {}, "secrets": list(secrets),
        "api_key_file": key_source, "fingerprint": fingerprint, "fingerprint_parts": parts, "port": port,
        "keep_attempts": p["keep_attempts"], "unit": unit, "timeout": p["timeout"], "stop_timeout": p["stop_timeout"],
        "tail_lines": p["log_tail_lines"], "settings": settings, "journal": unit is not None,
        "cgroup": cgroup[1] if cgroup else None,
    }


def status_of(st, token=None, attempt=None):
    """``st`` (the parsed STATUS) when it is about this launch (``token``) or, attaching, this ``attempt``; else
    None: an earlier attempt's verdict is never this one's."""
    if not isinstance(st, dict):
        return None
    if token is not None:
        return st if st.get("launch") == token else None
    return st if st.get("attempt") == attempt else None


def config_file_of(argv):
    """The server's ``--config <file>`` (or ``--config=<file>``) in argv, the last one; None without one."""
    path = None
    for i, arg in enumerate(argv or ()):
        if arg == "--config" and i + 1 < len(argv):
            path = argv[i + 1]
        elif arg.startswith("--config="):
            path = arg[len("--config="):]
    return path


def read_config_secret(path, names=API_KEY_NAMES):
    """(name, value) of the first ``<name>: <JSON value>`` line of SGLang's ``--config`` file whose name is one of
    ``names`` (the role's 0600 file of ``key: <JSON value>`` lines; a plain YAML scalar is taken as it is, without
    a trailing comment), or None when no such line is there. The file is opened without following a symlink
    (O_NOFOLLOW) and must be a regular file of at most 1 MiB. Raises OSError (ValueError for a file that is not one).
    The API key's one copy on disk lives there: the supervisor program reads it from there at every start."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | getattr(os, "O_NONBLOCK", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > CONFIG_FILE_MAX:
            raise ValueError("%s is not a regular file of at most 1 MiB" % path)
        data = os.read(fd, CONFIG_FILE_MAX + 1).decode("utf-8", "replace")
    finally:
        os.close(fd)
    for line in data.splitlines():
        name, sep, rest = line.partition(":")
        if not sep or name.strip() != name or name not in names:
            continue
        rest = rest.strip()
        try:
            value = json.loads(rest)
        except ValueError:
            value = rest.split(" #", 1)[0].strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
        if value is None:
            continue
        return name, value if isinstance(value, str) else json.dumps(value)
    return None

# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The systemd launcher's pieces that need no module: the unit's text, ``systemctl`` (injectable), whether systemd runs
this host, whether the caller is still there, and the watcher program's files taken from the module's own payload.

Standard library only (``wait_for_model`` is their one user).
"""

from __future__ import annotations

import os
import select
import sys

from ansible.module_utils import sglang_log, sglang_proc, sglang_progress, sglang_redact, sglang_watch, sglang_watcher

UNIT_MARK = "# Written by eagle-deploy (wait_for_model)."
WATCHER_DIR = "watcher"
SHOW_EVERY = 1.0  # s between two looks at the unit (systemctl show) while waiting on the watcher's status file
# The watcher ends a start at `timeout` after its launch; the module stops waiting this much later (its backstop).
SERVICE_TIMEOUT_MARGIN = 30.0
UNIT_PROPS = ("ActiveState", "SubState", "Result", "MainPID", "NRestarts", "ExecMainStatus", "StatusText",
              "InvocationID", "UnitFileState")


def module_source(mod):
    """Source of a module_utils module (bytes), also from inside an AnsiballZ zip."""
    loader = getattr(mod, "__loader__", None)
    source = loader.get_source(mod.__name__) if loader is not None else None
    if source is None:
        with open(mod.__file__, "rb") as fh:
            return fh.read()
    return source.encode("utf-8") if isinstance(source, str) else source


def watcher_files():
    """{file name: source} of the host watcher program and the module_utils it imports."""
    return dict(("%s.py" % m.__name__.rsplit(".", 1)[-1], module_source(m))
                for m in (sglang_watcher, sglang_watch, sglang_log, sglang_proc, sglang_redact, sglang_progress))


def systemd_quote(arg):
    """One ExecStart= word: double-quoted, with systemd's escapes (backslash, quote) and specifiers (%)."""
    return '"%s"' % arg.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")


def unit_name(name):
    return "sglang-%s.service" % name


def unit_text(name, python, program, run_dir, stall_timeout, stop_timeout):
    """The unit that runs the watcher program (which runs the server): ``Type=notify``, READY=1 once a generation
    answered, the start extended while the log moves, no restart of a start that failed (exit 78)."""
    start = "infinity" if not stall_timeout else "%ds" % (stall_timeout + 60)
    return "\n".join([
        UNIT_MARK + " Changes here are replaced on its next run.",
        "[Unit]",
        "Description=SGLang server %s (eagle-deploy watcher)" % name,
        "After=network-online.target",
        "Wants=network-online.target",
        "StartLimitIntervalSec=600",
        "StartLimitBurst=3",
        "",
        "[Service]",
        "Type=notify",
        "NotifyAccess=main",
        "ExecStart=%s" % " ".join(systemd_quote(a) for a in (python, "-I", program, run_dir, name)),
        "Restart=on-failure",
        "RestartSec=10",
        "RestartPreventExitStatus=%d" % sglang_watcher.EXIT_PERMANENT,
        "TimeoutStartSec=%s" % start,
        "TimeoutStopSec=%ds" % max(1, stop_timeout),
        "KillMode=control-group",
        "LimitMEMLOCK=infinity",
        "LimitNOFILE=1048576",
        "SyslogIdentifier=sglang-%s" % name,
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
    ])


def parse_show(text):
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key] = value
    return out


class Systemctl(object):
    """systemctl, injectable so unit tests run no process."""

    def __init__(self, module):
        self.module = module
        self.path = None

    def __call__(self, *args):
        if self.path is None:
            self.path = self.module.get_bin_path("systemctl", required=True)
        return self.module.run_command([self.path] + list(args))

    def show(self, unit):
        rc, out, _err = self("show", unit, "-p", ",".join(UNIT_PROPS))
        return parse_show(out) if rc == 0 else {}


class CallerWatch(object):
    """Whether whoever reads this module's result is gone: the read end of our stdout (a pipe to sshd, or to
    Ansible's worker on a local connection) closed, or our parent changed (the connection's shell died)."""

    def __init__(self):
        self.parent = os.getppid()

    def __call__(self):
        if os.getppid() != self.parent:
            return True
        try:
            poller = select.poll()
            poller.register(sys.stdout.fileno(), 0)  # no events asked: only POLLERR/POLLHUP come back
            return any(ev & (select.POLLERR | select.POLLHUP) for _fd, ev in poller.poll(0))
        except (OSError, ValueError, AttributeError):
            return False


def systemd_here():
    """Whether systemd is the init system running this host (sd_booted(3)), and why not."""
    if not os.path.isdir("/run/systemd/system"):
        return False, "no /run/systemd/system: systemd is not PID 1 here"
    return True, None

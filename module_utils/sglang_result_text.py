# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the operator reads of a ``wait_for_model`` result (``sglang_result_schema``), composed once: the summary line of
what the server did (``summary``) and the message of a failure (``failure_message``: the module's message, the
crash class, the hint, the deciding line, the log, the crash's traceback or the log's tail; or, for a module whose
output could not be read, the last lines it wrote). The action plugin puts both into the task's result (after the
steps are merged: the step that stopped the old server is not the last one); the role prints them.

Standard library and the project's sglang_progress (itself standard library only), Python 3.8 syntax.
"""

from __future__ import annotations

import re

from .sglang_progress import operator_text

# A second guard behind the supervisor's log copy (sglang_supervisor.LogCopy), which keeps the secrets out of the log
# file: an API key assignment SGLang logs (its server_args) is masked in the lines shown (the launch's failure and
# the smoke test's, both composed here).
SECRET_ASSIGNMENT = re.compile("((?:api_key|admin_api_key|ssl_keyfile_password)['\"]?\\s*[:=]\\s*)['\"][^'\"]*['\"]")
SECRET_REPLACEMENT = "\\1***"

# The last lines shown of what a module wrote when ansible-core could not read its result (module_stdout/_stderr).
OUTPUT_LINES = 20

UNCERTAIN = " (uncertain: its line follows a raw request echo, where a client can write any line)"


def _shown(value, missing="-"):
    """A value as the line shows it: ``missing`` for none."""
    return missing if value is None else str(value)


def masked(line):
    """A log line with the secret assignments SGLang logs masked."""
    return SECRET_ASSIGNMENT.sub(SECRET_REPLACEMENT, str(line))


def what_happened(result):
    """restarted (why), unchanged, or kept (its supervisor put back). The module writes no program: a kept server's
    supervisor program is the role's to bring up to date."""
    if not result.get("changed"):
        return "unchanged, healthy"
    if result.get("restart_reason") is not None:
        return "restarted (%s)" % result["restart_reason"]
    if result.get("supervisor") == "restored":
        return "kept, healthy, its supervisor program put back"
    return "kept, healthy"


def summary(result, name):
    """The line of what the server ``name`` did: restarted or kept, its PID, the old server's stop and the GPU
    memory's release (a restart that stopped one), the attempt, the seconds of the wait and the log."""
    parts = ["server %s: %s" % (name, what_happened(result)), "pid %s" % _shown(result.get("pid"))]
    stopped = result.get("stopped")
    if isinstance(stopped, dict):
        how = stopped.get("unit") or "PIDs " + ", ".join(
            str(pid) for pid in list(stopped.get("signalled") or []) + list(stopped.get("killed") or []))
        parts.append("old server stopped (%s) in %s s" % (how, _shown(stopped.get("seconds"), "?")))
    release = result.get("gpu_release")
    if isinstance(release, dict):
        parts.append(release.get("note") or "GPU memory back below %s MiB after %s s" % (
            _shown(release.get("below_mib"), "?"), _shown(release.get("seconds"), "?")))
    parts.append("attempt %s" % _shown(result.get("attempt")))
    parts.append("%s s" % _shown(result.get("elapsed"), "0"))
    parts.append("log %s" % _shown(result.get("log_path")))
    return ", ".join(parts)


def _output_tail(result):
    """The last lines a module wrote on stdout and stderr where ansible-core could not read its result (killed, an
    interpreter error: ``module_stdout``/``module_stderr``), each under its heading, escaped and masked: the launch
    task prints no fatal block of its own, so this is where the operator reads them."""
    lines = []
    for key, heading in (("module_stderr", "---- module stderr (last lines) ----"),
                         ("module_stdout", "---- module stdout (last lines) ----")):
        written = [line for line in str(result.get(key) or "").splitlines() if line.strip()]
        if written:
            lines.append(heading)
            lines += [masked(operator_text(line)) for line in written[-OUTPUT_LINES:]]
    return lines


def failure_message(result, default_log="-"):
    """The message of a failed result: the module's message and, where the wait decided a failure (it has a crash
    class; an input or safety refusal has none and its message says it all), the class (flagged when uncertain) and
    exception, the hint, the deciding line, the log (``default_log`` where the result names none) and the crash's
    traceback, or the log's tail where it has none. A result without a crash class that carries what the module
    wrote when its output could not be read (``module_stdout``/``module_stderr``) has their last lines after its
    message."""
    lines = [_shown(result.get("msg"), "the server did not come up")]
    if result.get("crash_class") is None:
        return "\n".join(lines + _output_tail(result))
    crash = "crash class: %s" % result["crash_class"]
    if result.get("class_uncertain"):
        crash += UNCERTAIN
    if result.get("crash_exception"):
        crash += " (%s)" % result["crash_exception"]
    if result.get("crash_cause"):
        crash += ", known cause: %s" % result["crash_cause"]
    lines += [crash,
              "hint: %s" % _shown(result.get("hint")),
              "deciding line %s: %s" % (_shown(result.get("deciding_lineno"), "?"), _shown(result.get("deciding_line"))),
              "log: %s" % (result.get("log_path") or default_log)]
    if result.get("traceback"):
        lines.append("---- traceback ----")
        lines += [masked(line) for line in result["traceback"]]
    else:
        lines.append("---- log tail ----")
        lines += [masked(line) for line in result.get("log_tail") or []]
    return "\n".join(lines)


def add_text(result, name, default_log="-"):
    """``result`` with ``summary`` (a successful one) or ``failure_message`` (a failed one) put in; returned."""
    if result.get("failed"):
        result["failure_message"] = failure_message(result, default_log)
    else:
        result["summary"] = summary(result, name)
    return result

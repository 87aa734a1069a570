# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The result of ``wait_for_model``, in one place: every key the task returns, its type, what it means, and whether a
failed result, a successful one or both may carry it.

The keys are written across module_utils (the reports of the run's executors: validation, lock, stop, launch, keep,
status client, the supervisor's report merged in on a failure, the watch of ``state: watched``; the result is built
from them by ``sglang_reports.build_result``) and by the action plugin (its steps merged, a multi-node
group's words, the operator's text of ``sglang_result_text``). This table is what they are checked against: the unit
tests hold it against the module's RETURN documentation both ways (names and types) and against every result the
module's unit tests produce (``tests/unit/module_harness.py``: an unknown key, a value of another type, or a key
returned where this table says it never is, fails the test that produced it).

Standard library only, Python 3.8 syntax: shipped to the target with the module, imported on the controller by the
action plugin.
"""

from __future__ import annotations

from collections import namedtuple
from typing import Any, Dict, List, Optional

try:  # Python 3.8+
    from typing import TypedDict
except ImportError:  # pragma: no cover - an older Python: the table below is the schema, the TypedDict a convenience
    TypedDict = None

# Where a key may be present: only in a failed result, only in a successful one, or in both.
FAILURE = "failure"
SUCCESS = "success"
BOTH = "both"

# The types of Ansible's RETURN documentation and the Python values they stand for (a float may be an int; None is
# every key's "not known").
PYTHON_TYPES = {"str": (str,), "int": (int,), "float": (float, int), "bool": (bool,), "list": (list, tuple),
                "dict": (dict,)}

Key = namedtuple("Key", "name type meaning present elements")
Key.__doc__ = ("One key of the result: its ``name``, its RETURN ``type`` (str, int, float, bool, list, dict), its "
               "``meaning`` in a line, where it is ``present`` (FAILURE, SUCCESS, BOTH), and a list's ``elements``.")


def _k(name, type_, meaning, present=BOTH, elements=None):
    return Key(name, type_, meaning, present, elements)


# Every key of the result that the module documents (its RETURN), in the order of that documentation.
DOCUMENTED = (
    # a multi-node server (the action plugin's join)
    _k("nodes_group", "dict", "each node's last word on the controller's board, by host (rank, state, phase)"),
    _k("failed_rank", "int", "the rank whose failure ended the group", FAILURE),
    _k("group_failure", "dict", "that node's failure as its own task reports it", FAILURE),
    _k("group_stop", "dict", "what stopping this node's server after another node's failure did", FAILURE),
    # the server and its attempt
    _k("pid", "int", "PID of the server's leader process"),
    _k("log_path", "str", "log file of this attempt"),
    _k("attempt", "int", "attempt number N of <name>_r<N>.log"),
    _k("elapsed", "float", "seconds from the launch (or attach) to the verdict"),
    _k("phases", "list", "timeline of the load: phase, seconds after the launch, log line", elements="dict"),
    _k("phase", "str", "last phase reached"),
    _k("shards", "list", "weight shards loaded and total", elements="int"),
    _k("fingerprint", "str", "SHA-256 of argv, environment, file hashes and fingerprint data"),
    _k("restart_reason", "str", "why the server was (or would be) started; null when nothing changed"),
    _k("judged_failed", "str", "a kept server's last smoke test failed while it answered: why (it is tested again)",
       SUCCESS),
    # a failure's explanation
    _k("crash_class", "str", "class of the failure (from the log, the processes or the clock)", FAILURE),
    _k("class_uncertain", "bool", "the class's line follows a raw request echo (a client can write it)", FAILURE),
    _k("crash_cause", "str", "the crash catalogue's known cause (docs/crash-catalogue.md); hint names its fix", FAILURE),
    _k("hint", "str", "one line for the operator, saying what to do", FAILURE),
    _k("deciding_line", "str", "the log line that proved the crash", FAILURE),
    _k("deciding_lineno", "int", "line number of deciding_line in the log", FAILURE),
    _k("crash_exception", "str", "last line of the crash's traceback", FAILURE),
    _k("traceback", "list", "the crash's traceback lines", FAILURE, elements="str"),
    _k("log_tail", "list", "the last log_tail_lines lines of the log", elements="str"),
    _k("rc", "int", "exit status of the leader (negative for a signal), if it exited", FAILURE),
    # what was stopped or waited for before the launch
    _k("stopped", "dict", "what stopping our previous server did"),
    _k("gpu_release", "dict", "the wait for the old server's GPU memory (gpu_release_below_mib)"),
    _k("stale_state", "str", "why a run-state record was discarded without signalling anything"),
    # the log and health of a kept or watched server
    _k("log_offset", "int", "byte offset of the end of the log (for a later state=watched)"),
    _k("log_watched_from", "int", "byte offset where the state=watched watch started"),
    _k("health_polls", "dict", "health requests of the wait: polls, failed in a row, last status"),
    _k("tree_tracking", "str", "how the server's process tree is found (cgroup or session)"),
    _k("tree_tracking_note", "str", "why the server has no cgroup of its own"),
    _k("lock_wait", "float", "seconds this run waited for the per-server lock"),
    _k("would_stop", "bool", "check mode: the failure would have stopped our server", FAILURE),
    _k("log_crash", "dict", "the crash the log shows, next to what acted (acted_on)"),
    _k("evidence", "str", "what proved the failure, in words (never a log line)", FAILURE),
    _k("stopped_after_failure", "dict", "what stopping our server after a failure did", FAILURE),
    _k("pruned_logs", "list", "per-attempt log files removed after the launch", elements="str"),
    # the supervisor
    _k("supervisor_pid", "int", "PID of the supervisor program started or put back (detached)"),
    _k("supervisor", "str", "gone (the server ran without its supervisor) or restored (one was put back)"),
    _k("log_writer_pid", "int", "PID of the log writer of a server an older eagle-deploy started"),
    _k("dead_child_pid", "int", "PID of the long-lived child whose death failed the wait", FAILURE),
    _k("serving_state", "str", "busy or stuck: what the supervisor finds the serving server"),
    _k("exit_status", "int", "the supervisor's exit status for the failure (78 for good, 69 restartable)", FAILURE),
    _k("after_ready", "bool", "the failure came after the server had become ready (while serving)", FAILURE),
    # the launcher and the unit
    _k("launcher", "str", "the launcher used (auto resolved)"),
    _k("unit", "str", "the systemd unit that runs the server"),
    _k("unit_facts", "dict", "what the role's unit template takes from the module"),
    _k("unit_state", "dict", "the unit's state when a wait on it failed", FAILURE),
    _k("journal_tail", "list", "the unit's (or detached supervisor's) last lines", FAILURE, elements="str"),
    _k("port", "int", "the port the server was recorded with (state=watched)"),
    # the action plugin's steps
    _k("pending", "bool", "a step ended while the server still loads (the plugin calls again)", SUCCESS),
    _k("progress", "dict", "where the load is: phase, status, shards, elapsed, eta, attempt, verdict"),
    _k("steps", "int", "module calls the action plugin made for this task"),
    # the operator's text (sglang_result_text, put in by the action plugin)
    _k("summary", "str", "the operator's line of what the server did (state=started)", SUCCESS),
    _k("failure_message", "str", "the operator's message of a failure: msg, class, hint, deciding line, log tail",
       FAILURE),
)

# What every Ansible module returns and ansible-core documents for all of them (not in a module's RETURN).
COMMON = (
    _k("changed", "bool", "whether the task changed anything"),
    _k("failed", "bool", "whether the task failed"),
    _k("msg", "str", "what happened, in words"),
    _k("warnings", "list", "warnings shown after the task", elements="str"),
    _k("deprecations", "list", "deprecations shown after the task", elements="dict"),
    _k("invocation", "dict", "the module's arguments (secrets masked)"),
)

KEYS = dict((k.name, k) for k in DOCUMENTED + COMMON)

if TypedDict is not None:
    _TYPING = {"str": Optional[str], "int": Optional[int], "float": Optional[float], "bool": Optional[bool],
               "list": Optional[List[Any]], "dict": Optional[Dict[str, Any]]}
    # The result as a type (every key optional: which are present depends on the state, the launcher and the outcome).
    WaitForModelResult = TypedDict("WaitForModelResult", dict((k.name, _TYPING[k.type]) for k in KEYS.values()),
                                   total=False)
else:  # pragma: no cover
    WaitForModelResult = dict


def problems(result, failed=None):
    """What in ``result`` disagrees with this table, as sentences (empty: none): a key it does not know, a value of
    another type (None is every key's "not known"; a list's elements are checked where the table names them), a key
    where it is never present (``failed``: whether the result is a failure; default: its ``failed`` key). Keys that
    begin with ``_ansible_`` are Ansible's own."""
    if failed is None:
        failed = bool(result.get("failed"))
    out = []
    for name in sorted(result):
        if name.startswith("_ansible_"):
            continue
        key = KEYS.get(name)
        if key is None:
            out.append("%s: not a key of wait_for_model's result (module_utils/sglang_result_schema.py)" % name)
            continue
        value = result[name]
        if value is not None and not _is(value, key.type):
            out.append("%s: %s, not %s" % (name, type(value).__name__, key.type))
        elif key.elements and isinstance(value, (list, tuple)):
            bad = [v for v in value if v is not None and not _is(v, key.elements)]
            if bad:
                out.append("%s: an element %r is not %s" % (name, bad[0], key.elements))
        if failed and key.present == SUCCESS:
            out.append("%s: present in a failed result, but only a successful one has it" % name)
        if not failed and key.present == FAILURE:
            out.append("%s: present in a successful result, but only a failed one has it" % name)
    return out


def _is(value, type_):
    if isinstance(value, bool) and type_ != "bool":
        return False  # a bool is an int to Python, never to the documentation
    return isinstance(value, PYTHON_TYPES[type_])

# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Progress of a server load in operator words, and how long it still takes.

Standard library only. Shipped to the target with the modules that import it
(``from ansible.module_utils.sglang_progress import ...``), installed with the supervisor program
(sglang_program, which imports it as ``eagle_deploy.sglang_progress``), and used on the controller by the
``wait_for_model`` action
plugin to print its lines.

* :func:`status_text`: the phase and shard count as the operator reads them.
* :func:`eta`: seconds still to go, from the last successful load's phase durations (inside the weight
  phase, scaled by the shard fraction).
* :func:`record_load` / :func:`last_load`: the load history ``<run_dir>/<name>.loads.json``, trusted only
  as the run state is (see ``sglang_proc.open_run_dir``): reached without symlinks, owned by root or this
  process's user, writable by no one else, written atomically.
* :func:`progress_line`: one line per host, e.g.
  ``blackwell-01 | loading weights 41/64 shards | 4m12s elapsed | ETA ~2m50s (last load 9m58s)``.
* :func:`transfer_line`: a model fetch's line (``sglang_model``): bytes done and total, MB/s, ETA.
* :class:`StepPrinter`: when an action plugin that calls its module in steps prints its line.
* :func:`operator_text`: text (or a result's strings) with every control character escaped, the one function
  through which log and client text leaves for the operator's terminal.
* what a verdict says (:func:`stopped_words`, :func:`timeout_words`, :func:`ended_words`, ...): the words of
  ``wait_for_model``'s results, kept here with the progress words.
"""

from __future__ import annotations

import json
import math
import re
import time

from .sglang_contract import PHASES
from .sglang_proc import UntrustedState, read_json, safe_name, write_files

HISTORY_VERSION = 1
HISTORY_KEEP = 10
# The order a healthy load goes through (sglang_contract.PHASES); other names are placed by the history's own order.
PHASE_ORDER = PHASES
_WORDS = {
    "launching": "starting",
    "loading_weights": "loading weights",
    "kv_cache": "allocating the KV cache",
    "cuda_graph": "capturing CUDA graphs",
    "warmup": "warming up",
    "ready": "ready",
}


# ------------------------------------------------------------------ what reaches the operator's terminal
# C0 controls (ESC, CR, BEL, backspace, NUL, tab and newline too), DEL and the C1 controls (U+0080-U+009F, CSI among
# them). Printable Unicode stays as it is.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def _escape_char(m):
    return "\\x%02x" % ord(m.group())


def operator_text(value):
    """``value`` safe to show on the operator's terminal: every control character of a string escaped as ``\\xNN``
    (ESC becomes ``\\x1b``, CR ``\\x0d``), so that a prompt echoed into the server's log cannot clear the screen,
    set the window title, overwrite a line with a carriage return or forge Ansible's own output. Lists, tuples and
    dict values are escaped item by item (a traceback, a log tail, a whole module result); other values are
    returned as they are. Idempotent: what it returns holds no control character (a backslash is left alone, so an
    escaped text escapes to itself)."""
    if isinstance(value, str):
        return _CONTROL.sub(_escape_char, value) if _CONTROL.search(value) else value
    if isinstance(value, (list, tuple)):
        return [operator_text(v) for v in value]
    if isinstance(value, dict):
        return dict((k, operator_text(v)) for k, v in value.items())
    return value


# ------------------------------------------------------------------ words
def _shard_pair(shards):
    """(done, total) from [done, total] when it is a sane pair, else None."""
    if not isinstance(shards, (list, tuple)) or len(shards) != 2:
        return None
    done, total = shards
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (done, total)) or total <= 0:
        return None
    return max(0, min(done, total)), total


def status_text(phase, shards=None, verdict=None, ready_after=None):
    """What the server is doing in operator words: ``loading weights 41/64 shards``, ``warming up``. The log
    reaching its ready line is not the server being ready: until the verdict is ``ready`` (a generation answered)
    the words are ``up, waiting for a generation to answer``; with the verdict, ``serving (ready 2m03s after the
    launch)``; with a failure's class, ``failed: <class>``."""
    if verdict == "ready":
        return "serving" if ready_after is None else "serving (ready %s after the launch)" % duration_text(ready_after)
    if verdict == "stopped":
        return "stopped"
    if verdict:
        return "failed: %s" % verdict
    if phase == "ready":
        return "up, waiting for a generation to answer"
    words = _WORDS.get(phase)
    if words is None:
        words = str(phase or "starting").replace("_", " ")
    pair = _shard_pair(shards)
    if phase == "loading_weights" and pair is not None:
        return "%s %d/%d shards" % (words, pair[0], pair[1])
    return words


def duration_text(seconds):
    """``42s``, ``4m12s``, ``1h03m``: whole seconds, never negative."""
    s = int(round(max(0.0, float(seconds or 0.0))))
    if s < 60:
        return "%ds" % s
    if s < 3600:
        return "%dm%02ds" % divmod(s, 60)
    return "%dh%02dm" % (s // 3600, (s % 3600) // 60)


def progress_line(host, progress):
    """One line for the operator, e.g.
    ``blackwell-01 | loading weights 41/64 shards | 4m12s elapsed | ETA ~2m50s (last load 9m58s)``;
    with no history ``... | no ETA yet (first load)``; once the verdict is ``ready`` (a generation answered, not merely
    the log's ready line) ``... | serving | 9m41s elapsed | done (last load 9m58s)``.
    ``progress`` is a module result's ``progress`` (phase, status, shards, elapsed, eta, last_load, verdict)."""
    progress = progress or {}
    phase = progress.get("phase")
    verdict = progress.get("verdict")
    status = progress.get("status") or status_text(phase, progress.get("shards"), verdict)
    last = progress.get("last_load")
    parts = [str(host), status, "%s elapsed" % duration_text(progress.get("elapsed"))]
    if verdict not in (None, "ready"):
        return " | ".join(parts)  # a failure or a stop: no ETA, never "done"
    if verdict == "ready":
        parts.append("done" if last is None else "done (last load %s)" % duration_text(last))
    elif progress.get("eta") is not None and last is not None:
        parts.append("ETA ~%s (last load %s)" % (duration_text(progress["eta"]), duration_text(last)))
    elif last is None:
        parts.append("no ETA yet (first load)")
    else:
        parts.append("no ETA (last load %s)" % duration_text(last))
    return operator_text(" | ".join(parts))


# ------------------------------------------------------------------ a model fetch (sglang_model)
_FETCH_WORDS = {"starting": "starting the fetch of", "fetching": "fetching", "copying": "copying", "verifying": "verifying",
                "finishing": "finishing", "done": "fetched", "failed": "failed to fetch"}


def size_text(n):
    """Bytes in decimal units as download tools show them: ``812.4 MB``, ``547.00 GB``."""
    n = max(0.0, float(n or 0))
    if n >= 1e9:
        return "%.2f GB" % (n / 1e9)
    return "%.1f MB" % (n / 1e6)


def transfer_line(host, progress):
    """One line for a model fetch, e.g.
    ``blackwell-01 | fetching Kimi-K2.5-INT4 | 312.40/547.00 GB, 31/72 files | 210.3 MB/s | 12m04s elapsed | ETA ~18m40s``;
    while only hashing, ``... | verifying X | 120.00/547.00 GB hashed | 1900.0 MB/s | ...``; a copy from a peer says
    ``copying`` and ``copied``. ``progress`` is
    ``sglang_model``'s result ``progress``."""
    progress = progress or {}
    phase = progress.get("phase") or "starting"
    names = ", ".join(str(n) for n in progress.get("models") or ()) or "the models"
    words = _FETCH_WORDS.get(phase, str(phase))
    if progress.get("copy") and phase in ("done", "failed"):
        words = "copied" if phase == "done" else "failed to copy"
    parts = [str(host), "%s %s" % (words, names)]
    if phase == "verifying":
        parts.append("%s/%s hashed" % (size_text(progress.get("hash_done")), size_text(progress.get("hash_total"))))
        rate = progress.get("hash_rate")
    else:
        parts.append("%s/%s, %s/%s files" % (size_text(progress.get("present")), size_text(progress.get("total")),
                                             progress.get("files_done", 0), progress.get("files_total", 0)))
        rate = progress.get("rate")
    if rate is not None and phase not in ("done", "failed"):
        parts.append("%.1f MB/s" % (float(rate) / 1e6))
    parts.append("%s elapsed" % duration_text(progress.get("elapsed")))
    if phase == "done":
        parts.append("done")
    elif phase != "failed":
        eta = progress.get("eta")
        parts.append("ETA ~%s" % duration_text(eta) if eta is not None else "no ETA yet")
    return operator_text(" | ".join(parts))


# ------------------------------------------------------------------ the action plugins' lines
class StepPrinter(object):
    """When an action plugin that calls its module in steps prints a line (``line(host, progress)``): the first
    pending step, every phase change, and often enough that no two lines are more than ``every`` s apart (a line is
    due when waiting one more step like the last would pass it). A verdict gets its own line only after lines were
    printed (a no-op prints nothing). Used on the controller by the ``wait_for_model`` and ``sglang_model`` action
    plugins."""

    def __init__(self, host, say, clock, every=30.0, line=None):
        self.host = host
        self.say = say
        self.clock = clock
        self.every = every
        self.line = line or progress_line
        self.last_at = None
        self.last_phase = None
        self.printed = 0

    def step(self, res, took, final, first):
        prog = res.get("progress")
        if not isinstance(prog, dict):
            return
        if final and (first or not self.printed):
            return
        now = self.clock()
        phase = prog.get("phase")
        due = (self.last_at is None or final or phase != self.last_phase
               or now - self.last_at + max(0.0, took) >= self.every)
        if not due:
            return
        self.say(self.line(self.host, prog))
        self.last_at = now
        self.last_phase = phase
        self.printed += 1


# ------------------------------------------------------------------ what a verdict says
def supervisor_words(launcher, unit):
    """Who decided: the unit (systemd) or the detached supervisor program."""
    return "unit %s" % unit if launcher == "systemd" else "its supervisor program"


def attached_words(who):
    return "attached to our server (same fingerprint, %s) and it became healthy" % who


def not_answering_words(pid, polls, seconds, last, who):
    """A kept server whose supervisor last said ready, and that answered none of this run's health requests."""
    return ("the server (pid %s) is running but does not answer health: %d request(s) of this run, one at a time, "
            "each given the server's whole health window, got %s (the last one %d s after the first); %s last said "
            "ready, before this run. Not proven healthy; nothing was stopped. A busy server answers again once a long "
            "prefill ends; one that never does is hung or stopped (look at its process state and log; restart it "
            "with force_restart)" % (pid, polls, "no answer" if last is None else "no 200 (last %s)" % last, seconds,
                                     who))


UNCERTAIN = "class uncertain: its line follows a raw request echo, where a client can write any line"


def class_words(crash):
    """A crash's class as it is shown anywhere: flagged when it was taken from text a client can write (the crash's
    ``class_uncertain``: its line comes at or after a raw request echo)."""
    if crash.get("class_uncertain"):
        return "%s (%s)" % (crash.get("class"), UNCERTAIN)
    return "%s" % (crash.get("class"),)


def set_aside_words(crash):
    """A crash line the server outlived (it is alive and answering): said, never acted on."""
    return "the log shows %s at line %s (%s), but the server is alive and answering: nothing was stopped" % (
        class_words(crash), crash.get("lineno"), (crash.get("line") or "").strip()[:160])


def unit_failed_words(msg, unit, active, exit_status, permanent):
    """A failure the unit's supervisor decided, with the unit's state (systemd)."""
    return "%s (unit %s: %s, exit status %s%s; journalctl -u %s)" % (
        msg or "the server failed", unit, active, exit_status,
        ", not restarted: a restart would repeat it" if permanent else "", unit)


def stopped_words(phase, who, how):
    """(evidence, hint, msg) of a start stopped before its verdict (``how``: what stops it, e.g. systemctl stop)."""
    hint = "something stopped it during the load (%s, a shutdown): run the playbook again to start it" % how
    return ("%s was stopped (it wrote 'stopped')" % who, hint,
            "the server was stopped while loading (phase '%s'), not crashed — %s" % (phase, hint))


def ended_words(who, show, where):
    """(class, evidence, hint, msg) of a supervisor that ended before it named a verdict (``show``: its state as
    ``systemctl show`` words it; ``where``: where its own lines are)."""
    result = show.get("Result", "?")
    cls = "stalled" if result == "timeout" else "unit_failed"
    evidence = "%s is %s (Result=%s, exit status %s)" % (who, show.get("ActiveState"), result,
                                                         show.get("ExecMainStatus", "?"))
    hint = ("the load stopped moving and systemd's TimeoutStartSec ended it" if cls == "stalled" else
            "the supervisor program ended without a verdict: read journal_tail (%s)" % where)
    return cls, evidence, hint, "server failed: %s — %s (evidence: %s)" % (cls, hint, evidence)


def timeout_words(timeout, phase, who):
    """(evidence, hint, msg) of a start that passed ``timeout`` s in ``phase``."""
    hint = "not healthy after %d s (phase '%s'); raise timeout if the load is just slow" % (timeout, phase)
    return ("not healthy after %d s" % timeout, hint,
            "timed out after %d s in phase '%s' — %s (%s)" % (timeout, phase, hint, who))


# ------------------------------------------------------------------ ETA
def _num(v):
    """A number that is neither a bool, NaN nor an infinity."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    return isinstance(v, int) or math.isfinite(v)


def _clean_phases(phases):
    """[(phase, at)] in order, malformed entries dropped, ``at`` never going backwards."""
    out = []
    for p in phases or ():
        if not isinstance(p, dict) or not isinstance(p.get("phase"), str) or not _num(p.get("at")):
            continue
        at = max(0.0, float(p["at"]))
        if out and at < out[-1][1]:
            at = out[-1][1]
        out.append((p["phase"], at))
    return out


def phase_durations(record):
    """[(phase, seconds)] of a history record, in its order, "ready" left out; the last phase before
    ready lasts until ``total``. None for a record that cannot say."""
    if not isinstance(record, dict) or not _num(record.get("total")) or record["total"] <= 0:
        return None
    total = float(record["total"])
    seq = _clean_phases(record.get("phases"))
    if not seq:
        return [("launching", total)]
    if seq[0][1] > 0:
        seq.insert(0, ("launching", 0.0))  # time before the first recorded phase counts as starting
    out = []
    for i, (phase, at) in enumerate(seq):
        if phase == "ready":
            break
        end = seq[i + 1][1] if i + 1 < len(seq) else total
        out.append((phase, max(0.0, min(end, total) - at)))
    return out


def _later(history_phases, current):
    """Indices of the history's phases that come after ``current``."""
    names = [p for p, _seconds in history_phases]
    if current in names:
        return range(names.index(current) + 1, len(names))
    if current not in PHASE_ORDER:
        return None
    rank = PHASE_ORDER.index(current)
    return [i for i, n in enumerate(names) if n in PHASE_ORDER and PHASE_ORDER.index(n) > rank]


def eta(last_load, phases, elapsed, shards=None):
    """Seconds the current load still takes, or None without history.

    ``last_load``: a history record (:func:`last_load`); ``phases``: this load's [{"phase", "at"}] (at:
    seconds since launch the phase began, in order); ``elapsed``: seconds since launch; ``shards``:
    [done, total] or None.

    The current phase still takes what it took last time less what it has run so far (never less than
    nothing); inside the weight phase the shard fraction tells what is left instead: early on the last
    load's duration scaled by the fraction still to load, and the more shards are in, the more this
    load's own pace counts. The phases after it take what they took last time. A phase the last load
    did not go through counts nothing; a current phase the history cannot place leaves the last load's
    total less the time elapsed. Ready: 0.
    """
    durations = phase_durations(last_load)
    if durations is None:
        return None
    elapsed = max(0.0, float(elapsed)) if _num(elapsed) else 0.0
    seq = _clean_phases(phases)
    current, started = seq[-1] if seq else ("launching", 0.0)
    if current == "ready":
        return 0.0
    in_phase = max(0.0, elapsed - min(started, elapsed))
    later = _later(durations, current)
    if later is None:
        return max(0.0, float(last_load["total"]) - elapsed)
    last_dur = sum(d for p, d in durations if p == current)  # 0 for a phase the history lacks
    left = max(0.0, last_dur - in_phase)
    pair = _shard_pair(shards)
    if current == "loading_weights" and pair is not None and last_dur > 0:
        done, total = pair
        frac = float(done) / total
        by_history = last_dur * (1.0 - frac)
        by_pace = in_phase * (total - done) / done if done else by_history
        left = (1.0 - frac) * by_history + frac * by_pace
    return left + sum(durations[i][1] for i in later)


# ------------------------------------------------------------------ history
def history_name(name):
    return "%s.loads.json" % name


def _valid_record(rec):
    return phase_durations(rec) is not None


def read_loads(run_dir, name):
    """The history's records, oldest first ([] when there is none). Raises
    :class:`sglang_proc.UntrustedState` when the run dir or the file could have been written by someone
    less privileged, OSError when the run dir is missing."""
    if not safe_name(name):
        raise ValueError("unsafe deployment name %r" % (name,))
    data = read_json(run_dir, history_name(name))
    if data is None or not isinstance(data.get("loads"), list):
        return []
    return [r for r in data["loads"] if _valid_record(r)]


def last_load(run_dir, name):
    """The last successful load's record, or None: also when there is no history, the run dir is missing,
    or the history is not trusted (an ETA is never drawn from a file someone else could have written)."""
    try:
        loads = read_loads(run_dir, name)
    except (UntrustedState, OSError, ValueError):
        return None
    return loads[-1] if loads else None


def make_record(attempt, total, phases, shards=None, finished_at=None):
    """A history record: ``phases`` as [{"phase", "at"}] (at: seconds since launch), ``shards`` the weight
    files' count (an int, or [done, total] whose total is taken) or None."""
    pair = _shard_pair(shards)
    if pair is not None:
        shards = pair[1]
    elif not (isinstance(shards, int) and not isinstance(shards, bool) and shards > 0):
        shards = None
    return {
        "attempt": attempt if isinstance(attempt, int) and not isinstance(attempt, bool) else None,
        "finished_at": float(finished_at) if _num(finished_at) else time.time(),
        "total": float(total),
        "phases": [{"phase": p, "at": round(at, 3)} for p, at in _clean_phases(phases)],
        "shards": shards,
    }


def record_load(run_dir, name, record):
    """Append a successful load to the history (the last HISTORY_KEEP kept), atomically: a temp file
    created with O_EXCL|O_NOFOLLOW, mode 0644, renamed over the history, all relative to the checked run
    dir. A history that is not trusted is replaced, never read. Raises UntrustedState for a run dir that
    is not trusted and ValueError for a record without a positive total."""
    if not safe_name(name):
        raise ValueError("unsafe deployment name %r" % (name,))
    if not _valid_record(record):
        raise ValueError("a load record needs a positive total and phases: %r" % (record,))
    try:
        loads = read_loads(run_dir, name)
    except UntrustedState:
        loads = []
    loads = (loads + [record])[-HISTORY_KEEP:]
    write_files(run_dir, ((history_name(name), json.dumps({"version": HISTORY_VERSION, "loads": loads}, indent=1,
                                                          sort_keys=True)),))
    return record

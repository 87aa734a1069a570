# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""nvidia-smi's figures, shared by gpu_facts and wait_for_model: the query and its parsing, and the wait until every
selected GPU's ``memory.used`` is below a figure (the GPU release after our old server was stopped). Module side
only: it runs ``nvidia-smi --query-*`` (through AnsibleModule.run_command) and only reads; clock and sleep are the
caller's (injectable).
"""

from __future__ import annotations

import pwd
import re
import time

from ansible.module_utils.sglang_proc import orphans_of, our_tree, proc_cmdline, proc_uid, read_state, why_not_ours

# The options of gpu_facts that say which GPUs and whose processes (sglang_info's gpus look takes the same).
LOOK_OPTIONS = dict(
    run_dir=dict(type="path"),
    name=dict(type="str", default="sglang"),
    gpu_indices=dict(type="list", elements="int"),
    fail_on_foreign=dict(type="bool", default=False),
    foreign_limit_mib=dict(type="int", default=0),
)

GPU_QUERY = "index,uuid,name,memory.total,memory.used,memory.free"
USED_QUERY = "index,memory.used"
APPS_QUERY = "pid,process_name,gpu_uuid,used_memory"
FORMAT = "--format=csv,noheader,nounits"
NOT_AVAILABLE = ("[N/A]", "[Not Supported]", "N/A", "[Unknown Error]", "[Insufficient Permissions]", "")
INFO_LINES = ("No devices were found", "No running processes found", "No running compute processes found")


class NvidiaSmiError(Exception):
    """nvidia-smi ran and failed."""

    def __init__(self, msg, rc, stdout, stderr):
        super().__init__(msg)
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr


def parse_mib(text):
    """'20480', '20480 MiB', '[N/A]' -> int or None."""
    text = text.strip()
    if text in NOT_AVAILABLE:
        return None
    if text.endswith("MiB"):
        text = text[:-3].strip()
    try:
        return int(float(text))
    except ValueError:
        return None


def parse_int(text):
    text = text.strip()
    try:
        return int(text)
    except ValueError:
        return None


def info_message(text):
    """nvidia-smi's 'No devices were found' and the like, or ''."""
    for line in text.splitlines():
        for known in INFO_LINES:
            if line.strip().startswith(known):
                return line.strip()
    return ""


def data_lines(text):
    return [line for line in text.splitlines() if line.strip() and not info_message(line)]


def parse_gpus(text):
    """Lines of `index, uuid, name, total, used, free` -> list of dicts (a name may hold commas)."""
    gpus = []
    for line in data_lines(text):
        fields = [f.strip() for f in line.split(",")]
        if len(fields) < 6:
            raise ValueError("unexpected nvidia-smi --query-gpu line: %r" % line)
        gpus.append({
            "index": parse_int(fields[0]),
            "uuid": fields[1],
            "name": ", ".join(fields[2:-3]),
            "memory_total_mib": parse_mib(fields[-3]),
            "memory_used_mib": parse_mib(fields[-2]),
            "memory_free_mib": parse_mib(fields[-1]),
        })
    return gpus


def parse_used(text):
    """Lines of `index, memory.used` (USED_QUERY) -> [{"index", "memory_used_mib"}]."""
    gpus = []
    for line in data_lines(text):
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 2:
            raise ValueError("unexpected nvidia-smi --query-gpu=%s line: %r" % (USED_QUERY, line))
        gpus.append({"index": parse_int(fields[0]), "memory_used_mib": parse_mib(fields[1])})
    return gpus


def parse_apps(text):
    """Lines of `pid, process_name, gpu_uuid, used_memory` -> list of dicts (a name may hold commas)."""
    apps = []
    for line in data_lines(text):
        fields = [f.strip() for f in line.split(",")]
        if len(fields) < 4:
            raise ValueError("unexpected nvidia-smi --query-compute-apps line: %r" % line)
        apps.append({
            "pid": parse_int(fields[0]),
            "process_name": ", ".join(fields[1:-2]),
            "gpu_uuid": fields[-2],
            "used_memory_mib": parse_mib(fields[-1]),
        })
    return apps


class Smi(object):
    """``nvidia-smi <query> --format=csv,noheader,nounits`` through ``module.run_command``; ``message`` keeps what
    nvidia-smi printed instead of figures ('No devices were found')."""

    def __init__(self, module, path):
        self.module = module
        self.path = path
        self.message = ""

    def query(self, argument):
        rc, out, err = self.module.run_command([self.path, argument, FORMAT])
        message = info_message(out) or info_message(err)
        if rc != 0:
            if message.startswith("No devices were found"):
                self.message = message
                return ""
            raise NvidiaSmiError(
                "nvidia-smi failed (rc=%d): %s" % (rc, (err.strip() or out.strip() or "no output")),
                rc, out, err)
        if message:
            self.message = message
        return out


def unknown_indices(wanted, gpus):
    """The indices of ``wanted`` that no GPU of ``gpus`` has (sorted)."""
    return sorted(set(wanted or ()) - set(gpu["index"] for gpu in gpus))


def held(gpus, wanted, limit):
    """The GPUs of ``gpus`` selected by ``wanted`` (None: all) whose memory.used is not below ``limit`` (an unknown
    figure counts as held)."""
    return [gpu for gpu in gpus if (wanted is None or gpu["index"] in wanted)
            and (gpu["memory_used_mib"] is None or gpu["memory_used_mib"] >= limit)]


def wait_below(poll, wanted, limit, timeout, interval, clock, sleep):
    """Poll (``poll()`` -> GPUs with index and memory_used_mib) until every GPU selected by ``wanted`` is below
    ``limit`` MiB, at most ``timeout`` s. -> (ok, gpus of the last poll, release seconds or None, polls, elapsed)."""
    start = clock()
    deadline = start + timeout
    polls = 0
    while True:
        gpus = poll()
        polls += 1
        now = clock()
        if not held(gpus, wanted, limit):
            return True, gpus, round(now - start, 3), polls, round(now - start, 3)
        if now >= deadline:
            return False, gpus, None, polls, round(now - start, 3)
        sleep(min(interval, max(deadline - now, 0)))


def figures(gpus, wanted=None):
    """'GPU 0: 20995 MiB used; GPU 1: ...' of the selected GPUs."""
    return "; ".join("GPU %s: %s MiB used" % (g["index"], g["memory_used_mib"]) for g in gpus
                     if wanted is None or g["index"] in wanted)


SECRET_WORDS = frozenset(("key", "token", "secret", "password", "passwd", "apikey"))
MASK = "********"


def _is_secret_flag(flag):
    name = flag.lstrip("-").lower()
    return any(word in SECRET_WORDS for word in re.split(r"[-_.]", name))


def mask_cmdline(argv):
    """Replace the values of secret flags: `--api-key X`, `--api-key=X`, `HF_TOKEN=X`."""
    masked = []
    hide_next = False
    for arg in argv:
        if hide_next:
            masked.append(MASK)
            hide_next = False
            continue
        if "=" in arg:
            flag, _sep, _value = arg.partition("=")
            if _is_secret_flag(flag):
                masked.append(flag + "=" + MASK)
                continue
        elif arg.startswith("-") and _is_secret_flag(arg):
            hide_next = True
        masked.append(arg)
    return masked


def user_name(uid):
    if uid is None:
        return None
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _sleep(seconds):
    time.sleep(seconds)  # looked up when called (not bound at import): the unit-test guard that forbids sleeping sees it


class GpuFacts:
    """Runs nvidia-smi and classifies processes (facts); then, by mode, refuses foreign users or has waited for
    memory release. Clock and sleep are injectable."""

    def __init__(self, module, clock=time.monotonic, sleep=None, params=None, fail=None):
        self.module = module
        self.clock = clock
        self.sleep = sleep or _sleep
        self.params = module.params if params is None else params
        # fail(msg, **result): the module's fail_json; sglang_info's look passes one that reports instead.
        self.fail = fail or module.fail_json
        self.nvidia_smi = module.get_bin_path("nvidia-smi")
        self.message = ""

    def _query(self, argument):
        smi = Smi(self.module, self.nvidia_smi)
        out = smi.query(argument)
        if smi.message:
            self.message = smi.message
        return out

    def query_gpus(self):
        return parse_gpus(self._query("--query-gpu=" + GPU_QUERY))

    def query_apps(self):
        return parse_apps(self._query("--query-compute-apps=" + APPS_QUERY))

    def _selected(self, gpus):
        wanted = self.params["gpu_indices"]
        if wanted is None:
            return gpus
        unknown = unknown_indices(wanted, gpus)
        if unknown:
            self.fail(msg="GPU index %s not found: nvidia-smi lists %s; fix gpu_indices" % (
                ", ".join(str(i) for i in unknown), ", ".join(str(g["index"]) for g in gpus) or "no GPU"),
                gpus=gpus, nvidia_smi=self.nvidia_smi, nvidia_smi_message=self.message)
        return [gpu for gpu in gpus if gpu["index"] in wanted]

    def ownership(self):
        """-> (run_state_found, {pid: reason} of our processes, why the leader is not ours or None)."""
        run_dir = self.params["run_dir"]
        if not run_dir:
            return False, {}, None
        state = read_state(run_dir, self.params["name"])
        if not state:
            return False, {}, None
        leader = state.get("pid")
        reasons = {}
        tree = our_tree(state)
        for pid, info in tree.items():
            if pid == leader:
                reasons[pid] = "our leader PID %s (start time and command line match the run state)" % leader
            elif info.get("sid") == leader:
                reasons[pid] = "in the session of our leader PID %s" % leader
            else:
                reasons[pid] = "descendant of our leader PID %s" % leader
        why = None if tree else why_not_ours(state)
        if not tree:
            for pid in orphans_of(state):
                reasons[pid] = ("left over from our leader PID %s (%s; in its cgroup, or in its session with its run token,"
                                " as its user, started after it)" % (leader, why))
        return True, reasons, why

    def _classify(self, pid, cmdline, found, ours, why):
        if pid in ours:
            return True, ours[pid]
        if cmdline is None:
            return False, "PID not visible in /proc (another PID namespace?)"
        if not self.params["run_dir"]:
            return False, "no run_dir given"
        if not found:
            return False, "no run state for %s in %s" % (self.params["name"], self.params["run_dir"])
        return False, "not in our process tree" + (" (%s)" % why if why else "")

    def describe(self, apps, gpus):
        by_uuid = {gpu["uuid"]: gpu["index"] for gpu in gpus}
        found, ours, why = self.ownership()
        processes = []
        for app in apps:
            pid = app["pid"]
            cmdline = proc_cmdline(pid) if pid is not None else None
            entry = dict(app)
            entry["gpu_index"] = by_uuid.get(app["gpu_uuid"])
            entry["user"] = user_name(proc_uid(pid)) if pid is not None else None
            entry["cmdline"] = mask_cmdline(cmdline) if cmdline is not None else None
            entry["ours"], entry["ours_reason"] = self._classify(pid, cmdline, found, ours, why)
            processes.append(entry)
        return found, processes

    def wait_for_release(self, limit):
        """Poll memory.used until every selected GPU is below limit. -> (ok, gpus, release_seconds, polls, elapsed)."""
        def poll():
            gpus = self.query_gpus()
            self._selected(gpus)  # an unknown index fails the task
            return gpus
        return wait_below(poll, self.params["gpu_indices"], limit, self.params["wait_timeout"],
                          self.params["poll_interval"], self.clock, self.sleep)

    def foreign_report(self, processes, gpus):
        selected = {gpu["index"] for gpu in self._selected(gpus)}
        foreign = [p for p in processes if not p["ours"]]
        by_gpu = {}
        for proc in foreign:
            key = str(proc["gpu_index"])
            by_gpu[key] = by_gpu.get(key, 0) + (proc["used_memory_mib"] or 0)
        over = sorted(key for key, mib in by_gpu.items()
                      if mib > self.params["foreign_limit_mib"]
                      and (key == "None" or int(key) in selected))
        return foreign, by_gpu, over

    def run(self):
        self.module.exit_json(**self.facts())

    def facts(self):
        """Facts, with the wait for release first (wait_memory_below_mib) or the refusal after (fail_on_foreign): the
        result, or the task failed through fail_json."""
        result = dict(changed=False, nvidia_smi=self.nvidia_smi or "missing", nvidia_smi_message="",
                      gpus=[], processes=[], foreign=[], foreign_mib_by_gpu={}, run_state_found=False)
        limit = self.params["wait_memory_below_mib"]
        if not self.nvidia_smi:
            if limit is not None:
                result.update(release_seconds=0.0, polls=0, elapsed=0.0)
                self.module.warn("nvidia-smi not found: no GPU memory to wait for")
            return result
        try:
            if limit is not None:
                ok, gpus, release, polls, elapsed = self.wait_for_release(limit)
                result.update(release_seconds=release, polls=polls, elapsed=elapsed)
            else:
                ok, gpus = True, self.query_gpus()
                self._selected(gpus)
            apps = self.query_apps()
        except NvidiaSmiError as exc:
            result.update(rc=exc.rc, stdout=exc.stdout, stderr=exc.stderr)
            self.fail(msg=str(exc), **result)
        except ValueError as exc:
            self.fail(msg="cannot parse nvidia-smi output: %s" % exc, **result)
        found, processes = self.describe(apps, gpus)
        foreign, by_gpu, over = self.foreign_report(processes, gpus)
        result.update(nvidia_smi_message=self.message, gpus=gpus, processes=processes, foreign=foreign,
                      foreign_mib_by_gpu=by_gpu, run_state_found=found)
        if not ok:
            figures = "; ".join("GPU %s: %s of %s MiB used" % (g["index"], g["memory_used_mib"], g["memory_total_mib"])
                                for g in self._selected(gpus)
                                if g["memory_used_mib"] is None or g["memory_used_mib"] >= limit)
            holders = ", ".join(_describe_process(p) for p in processes) or "no compute process listed"
            self.fail(
                msg="GPU memory not below %d MiB after %s s: %s (held by: %s)" % (
                    limit, result["elapsed"], figures, holders),
                **result)
        refusal = ""
        if over:
            lines = []
            for key in over:
                procs = [p for p in foreign if str(p["gpu_index"]) == key]
                lines.append("GPU %s: %d MiB foreign (limit %d MiB): %s" % (
                    key, by_gpu[key], self.params["foreign_limit_mib"], ", ".join(_describe_process(p) for p in procs)))
            refusal = ("foreign processes hold GPU memory: %s. Stop them or pick other GPUs (gpu_indices); "
                       "this module kills nothing" % "; ".join(lines))
        result["foreign_refusal"] = refusal
        if self.params["fail_on_foreign"] and over:
            self.fail(msg=refusal, **result)
        return result


def _describe_process(proc):
    command = " ".join(proc["cmdline"]) if proc["cmdline"] else proc["process_name"]
    if len(command) > 120:
        command = command[:117] + "..."
    return "PID %s (user %s, %s MiB, %s: %s)" % (
        proc["pid"], proc["user"] or "unknown", proc["used_memory_mib"], "ours" if proc["ours"] else "foreign", command)

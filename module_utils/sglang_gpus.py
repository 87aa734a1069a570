# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""nvidia-smi's figures, shared by gpu_facts and wait_for_model: the query and its parsing, and the wait until every
selected GPU's ``memory.used`` is below a figure (the GPU release after our old server was stopped). Module side
only: it runs ``nvidia-smi --query-*`` (through AnsibleModule.run_command) and only reads; clock and sleep are the
caller's (injectable).
"""

from __future__ import annotations

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

#!/usr/bin/python
# -*- coding: utf-8 -*-

# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


DOCUMENTATION = r"""
---
module: gpu_facts
short_description: Report NVIDIA GPUs and who uses them; optionally refuse foreign users, or wait for memory release
description:
  - Runs C(nvidia-smi --query-gpu) and C(nvidia-smi --query-compute-apps) and returns every GPU with its memory
    figures and every compute process with its owner, its command line (secrets masked) and whether it belongs to
    the server that M(wait_for_model) started.
  - A process is B(ours) when it is in the process tree recorded by M(wait_for_model) in O(run_dir) for server
    O(name), that is the verified leader, every process in the leader's session or in its own cgroup, and their
    descendants; once the leader is dead, what is left in its cgroup and what of its session carries the launch's run
    token (C(EAGLE_DEPLOY_RUN)), runs as its user and started after it. Everything else is foreign, including
    processes whose PID is not visible in this host's C(/proc).
  - 'One call does one of three things, chosen by its options (O(fail_on_foreign) and O(wait_memory_below_mib)
    are mutually exclusive):'
  - B(facts) (neither option) - report, and fail only when C(nvidia-smi) itself fails or O(gpu_indices) names a GPU
    it does not list.
  - B(refuse foreign users) (O(fail_on_foreign=true), a preflight policy) - the facts, then fail when foreign
    processes hold more than O(foreign_limit_mib) MiB on a selected GPU, naming them.
  - B(wait for release) (O(wait_memory_below_mib), after a stop) - poll C(memory.used) every O(poll_interval)
    seconds until every selected GPU is below that figure, then report the facts; fail with the per-GPU figures
    and the holders after O(wait_timeout) seconds.
  - In every mode the module only reads. It never signals or kills a process.
  - When C(nvidia-smi) is not installed the module does not fail; it returns RV(nvidia_smi=missing) and empty
    lists.
version_added: "0.1.0"
options:
  run_dir:
    description:
      - Directory holding the run-state files C(<name>.pid) and C(<name>.json) that M(wait_for_model) writes.
      - When unset, or when no run state is found there, every process is foreign.
    type: path
  name:
    description:
      - Name of the server whose run state marks our processes.
    type: str
    default: sglang
  gpu_indices:
    description:
      - GPU indices that O(fail_on_foreign) and O(wait_memory_below_mib) look at.
      - All GPUs when unset. The returned RV(gpus) and RV(processes) always list every GPU.
      - An index that C(nvidia-smi) does not list fails the task.
    type: list
    elements: int
  fail_on_foreign:
    description:
      - The B(refuse foreign users) mode - fail when foreign processes hold more than O(foreign_limit_mib) MiB on any
        selected GPU.
      - The message lists each such process with PID, owner, command and MiB, per GPU.
      - Mutually exclusive with O(wait_memory_below_mib).
    type: bool
    default: false
  foreign_limit_mib:
    description:
      - MiB that foreign processes may hold on one GPU before O(fail_on_foreign) fails.
    type: int
    default: 0
  wait_memory_below_mib:
    description:
      - The B(wait for release) mode - poll C(memory.used) until it is below this many MiB on every selected GPU.
      - For a stop made outside M(wait_for_model), so that the next start does not meet a card still held. A restart
        by M(wait_for_model) waits inside its own call (its O(wait_for_model#module:gpu_release_below_mib) option, the
        same nvidia-smi figures).
      - Mutually exclusive with O(fail_on_foreign).
    type: int
  wait_timeout:
    description:
      - Seconds to wait for O(wait_memory_below_mib) before failing.
    type: float
    default: 120
  poll_interval:
    description:
      - Seconds between two polls of C(nvidia-smi) while waiting for O(wait_memory_below_mib).
    type: float
    default: 0.2
extends_documentation_fragment: action_common_attributes
attributes:
  check_mode:
    support: full
    details: The module only reads, in every mode, so it runs the same in check mode (the wait for release too).
  diff_mode:
    support: none
  platform:
    platforms: linux
requirements:
  - C(nvidia-smi) on the target for any GPU figure.
notes:
  - Run with privileges that can read C(/proc/PID/cmdline) of other users' processes, or their owner and command
    come back as C(null).
  - Inside a container C(nvidia-smi) may show PIDs of another PID namespace; such processes are reported as
    foreign with RV(processes[].ours_reason) saying the PID is not visible.
seealso:
  - module: wait_for_model
author:
  - eagle-deploy contributors
"""

EXAMPLES = r"""
- name: Read GPU facts and which processes belong to our server
  ansible.legacy.gpu_facts:
    run_dir: /var/log/sglang
    name: sglang
  register: __gpu

- name: Refuse to start while another user's job holds more than 1 GiB on GPUs 0-3
  ansible.legacy.gpu_facts:
    run_dir: /var/log/sglang
    gpu_indices: [0, 1, 2, 3]
    fail_on_foreign: true
    foreign_limit_mib: 1024

- name: Wait until the stopped server's memory is back on every GPU
  ansible.legacy.gpu_facts:
    wait_memory_below_mib: 1024
    wait_timeout: 60
  register: __gpu_release

- name: Show how long the release took
  ansible.builtin.debug:
    msg: "GPU memory released after {{ __gpu_release.release_seconds }} s"
"""

RETURN = r"""
nvidia_smi:
  description: Path of the C(nvidia-smi) that was run, or V(missing) when there is none.
  returned: always
  type: str
  sample: /usr/bin/nvidia-smi
nvidia_smi_message:
  description: Message C(nvidia-smi) printed instead of figures, such as C(No devices were found); empty otherwise.
  returned: always
  type: str
  sample: ""
gpus:
  description: Every GPU C(nvidia-smi) lists. A figure it reports as C([N/A]) or C([Not Supported]) is null.
  returned: always
  type: list
  elements: dict
  contains:
    index:
      description: GPU index.
      type: int
      sample: 0
    uuid:
      description: GPU UUID.
      type: str
      sample: GPU-5f3b8b1e-2a4c-9d7e-0c11-3e0f2b6a9d10
    name:
      description: Product name.
      type: str
      sample: NVIDIA H200
    memory_total_mib:
      description: Total memory in MiB.
      type: int
      sample: 143771
    memory_used_mib:
      description: Used memory in MiB.
      type: int
      sample: 20995
    memory_free_mib:
      description: Free memory in MiB.
      type: int
      sample: 122200
  sample:
    - index: 0
      uuid: GPU-5f3b8b1e-2a4c-9d7e-0c11-3e0f2b6a9d10
      name: NVIDIA H200
      memory_total_mib: 143771
      memory_used_mib: 20995
      memory_free_mib: 122200
processes:
  description: One entry per compute process and GPU.
  returned: always
  type: list
  elements: dict
  contains:
    pid:
      description: Process ID as C(nvidia-smi) reports it.
      type: int
      sample: 4242
    gpu_uuid:
      description: UUID of the GPU the process uses.
      type: str
      sample: GPU-5f3b8b1e-2a4c-9d7e-0c11-3e0f2b6a9d10
    gpu_index:
      description: Index of that GPU; null when the UUID is not in RV(gpus).
      type: int
      sample: 0
    used_memory_mib:
      description: MiB the process holds on that GPU; null when C(nvidia-smi) cannot tell.
      type: int
      sample: 20480
    process_name:
      description: Process name as C(nvidia-smi) reports it.
      type: str
      sample: python3
    user:
      description: Owner (real UID) from C(/proc/PID/status), by name when known; null when the PID is not visible.
      type: str
      sample: sglang
    cmdline:
      description:
        - Command line from C(/proc/PID/cmdline), with the values of secret flags (C(--api-key X), C(--token=X))
          replaced by C(********); null when the PID is not visible.
      type: list
      elements: str
      sample: [python3, -m, sglang.launch_server, --api-key, "********"]
    ours:
      description: Whether the process is in our server's process tree.
      type: bool
      sample: true
    ours_reason:
      description: Why the process is, or is not, ours.
      type: str
      sample: in the session of our leader PID 4200
foreign:
  description: The entries of RV(processes) that are not ours.
  returned: always
  type: list
  elements: dict
  sample: []
foreign_mib_by_gpu:
  description: MiB held by foreign processes, per GPU index (as a string key).
  returned: always
  type: dict
  sample: {"0": 20480}
run_state_found:
  description: Whether a run state of O(name) was found in O(run_dir).
  returned: always
  type: bool
  sample: true
release_seconds:
  description:
    - Seconds from the start of the wait to the poll that saw every selected GPU below O(wait_memory_below_mib),
      that poll's C(nvidia-smi) run included. With one poll (RV(polls=1)) the memory was already back.
  returned: when O(wait_memory_below_mib) is set
  type: float
  sample: 0.42
polls:
  description: Number of C(nvidia-smi) polls made while waiting.
  returned: when O(wait_memory_below_mib) is set
  type: int
  sample: 3
elapsed:
  description: Seconds spent waiting, on success and on timeout.
  returned: when O(wait_memory_below_mib) is set
  type: float
  sample: 0.42
"""

import pwd
import re
import time

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.sglang_gpus import (  # noqa: F401 - the parsers are gpu_facts' API too (its tests use them)
    APPS_QUERY, FORMAT, GPU_QUERY, INFO_LINES, NOT_AVAILABLE, NvidiaSmiError, Smi, data_lines, info_message,
    parse_apps, parse_gpus, parse_int, parse_mib, unknown_indices, wait_below)
from ansible.module_utils.sglang_proc import orphans_of, our_tree, proc_cmdline, proc_uid, read_state, why_not_ours

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


class GpuFacts:
    """Runs nvidia-smi and classifies processes (facts); then, by mode, refuses foreign users or has waited for
    memory release. Clock and sleep are injectable."""

    def __init__(self, module, clock=time.monotonic, sleep=None):
        self.module = module
        self.clock = clock
        # time.sleep looked up when called (not bound at import): the unit-test guard that forbids sleeping sees it
        self.sleep = sleep or (lambda seconds: time.sleep(seconds))
        self.params = module.params
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
            self.module.fail_json(msg="GPU index %s not found: nvidia-smi lists %s; fix gpu_indices" % (
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
        """Facts, with the wait for release first (O(wait_memory_below_mib)) or the refusal after (O(fail_on_foreign))."""
        result = dict(changed=False, nvidia_smi=self.nvidia_smi or "missing", nvidia_smi_message="",
                      gpus=[], processes=[], foreign=[], foreign_mib_by_gpu={}, run_state_found=False)
        limit = self.params["wait_memory_below_mib"]
        if not self.nvidia_smi:
            if limit is not None:
                result.update(release_seconds=0.0, polls=0, elapsed=0.0)
                self.module.warn("nvidia-smi not found: no GPU memory to wait for")
            self.module.exit_json(**result)
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
            self.module.fail_json(msg=str(exc), **result)
        except ValueError as exc:
            self.module.fail_json(msg="cannot parse nvidia-smi output: %s" % exc, **result)
        found, processes = self.describe(apps, gpus)
        foreign, by_gpu, over = self.foreign_report(processes, gpus)
        result.update(nvidia_smi_message=self.message, gpus=gpus, processes=processes, foreign=foreign,
                      foreign_mib_by_gpu=by_gpu, run_state_found=found)
        if not ok:
            figures = "; ".join("GPU %s: %s of %s MiB used" % (g["index"], g["memory_used_mib"], g["memory_total_mib"])
                                for g in self._selected(gpus)
                                if g["memory_used_mib"] is None or g["memory_used_mib"] >= limit)
            holders = ", ".join(_describe_process(p) for p in processes) or "no compute process listed"
            self.module.fail_json(
                msg="GPU memory not below %d MiB after %s s: %s (held by: %s)" % (
                    limit, result["elapsed"], figures, holders),
                **result)
        if self.params["fail_on_foreign"] and over:
            lines = []
            for key in over:
                procs = [p for p in foreign if str(p["gpu_index"]) == key]
                lines.append("GPU %s: %d MiB foreign (limit %d MiB): %s" % (
                    key, by_gpu[key], self.params["foreign_limit_mib"], ", ".join(_describe_process(p) for p in procs)))
            self.module.fail_json(
                msg="foreign processes hold GPU memory: %s. Stop them or pick other GPUs (gpu_indices); "
                    "this module kills nothing" % "; ".join(lines), **result)
        self.module.exit_json(**result)


def _describe_process(proc):
    command = " ".join(proc["cmdline"]) if proc["cmdline"] else proc["process_name"]
    if len(command) > 120:
        command = command[:117] + "..."
    return "PID %s (user %s, %s MiB, %s: %s)" % (
        proc["pid"], proc["user"] or "unknown", proc["used_memory_mib"], "ours" if proc["ours"] else "foreign", command)


def main(clock=time.monotonic, sleep=None):
    module = AnsibleModule(
        argument_spec=dict(
            run_dir=dict(type="path"),
            name=dict(type="str", default="sglang"),
            gpu_indices=dict(type="list", elements="int"),
            wait_memory_below_mib=dict(type="int"),
            wait_timeout=dict(type="float", default=120),
            poll_interval=dict(type="float", default=0.2),
            fail_on_foreign=dict(type="bool", default=False),
            foreign_limit_mib=dict(type="int", default=0),
        ),
        mutually_exclusive=[("fail_on_foreign", "wait_memory_below_mib")],
        supports_check_mode=True,
    )
    GpuFacts(module, clock=clock, sleep=sleep).run()


if __name__ == "__main__":
    main()

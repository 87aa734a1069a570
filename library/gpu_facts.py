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
    the server that M(ansible.legacy.wait_for_model) started.
  - A process is B(ours) when it is in the process tree recorded by M(ansible.legacy.wait_for_model) in O(run_dir) for server
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
      - Directory holding the run-state files C(<name>.pid) and C(<name>.json) that M(ansible.legacy.wait_for_model) writes.
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
      - For a stop made outside M(ansible.legacy.wait_for_model), so that the next start does not meet a card still held. A restart
        by M(ansible.legacy.wait_for_model) waits inside its own call (its O(ansible.legacy.wait_for_model#module:gpu_release_below_mib) option, the
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
  - module: ansible.legacy.wait_for_model
author:
  - eagle-deploy contributors (!UNKNOWN)
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
foreign_refusal:
  description:
    - The refusal of foreign GPU memory over O(foreign_limit_mib) on a selected GPU, in words (PID, user, MiB and
      command of each foreign process there); empty when there is none. O(fail_on_foreign) fails with it.
  returned: when nvidia-smi was found
  type: str
  sample: "foreign processes hold GPU memory: GPU 0: 20998 MiB foreign (limit 1024 MiB): PID 562 (user bob, ...)"
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

import time

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.sglang_gpus import LOOK_OPTIONS, GpuFacts


def main(clock=time.monotonic, sleep=None):
    module = AnsibleModule(
        argument_spec=dict(
            wait_memory_below_mib=dict(type="int"),
            wait_timeout=dict(type="float", default=120),
            poll_interval=dict(type="float", default=0.2),
            **LOOK_OPTIONS
        ),
        mutually_exclusive=[("fail_on_foreign", "wait_memory_below_mib")],
        supports_check_mode=True,
    )
    GpuFacts(module, clock=clock, sleep=sleep).run()


if __name__ == "__main__":
    main()

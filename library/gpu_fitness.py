#!/usr/bin/python
# -*- coding: utf-8 -*-

# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


DOCUMENTATION = r"""
---
module: gpu_fitness
short_description: Say whether this GPU host is fit to serve, before a model load, not minutes into it
description:
  - Reads the host, changes nothing, and returns findings, each with a severity, the GPU (index and UUID) where it is
    about one, what is wrong and what to do. Fails when a finding is fatal (O(fatal)), naming all of them.
  - 'It reads: C(nvidia-smi -q -x) once (driver, highest CUDA the driver supports, ECC errors, retired pages and
    remapped rows, persistence, MIG, clocks, power limits, NVSwitch fabric state); C(nvidia-smi nvlink -s) (links
    down); C(systemctl is-active nvidia-fabricmanager) where NVSwitches are present; the kernel log since boot for
    C(NVRM: Xid) lines (C(/dev/kmsg), else C(journalctl -k -b)); the size of C(/dev/shm); its own
    C(RLIMIT_MEMLOCK); and C(torch/version.py) of the SGLang venv, as text (torch is not imported, CUDA not touched).'
  - Without C(nvidia-smi) it returns RV(checked=false) and no finding.
version_added: "0.1.0"
options:
  python:
    description:
      - The SGLang venv's python; torch's C(version.py) is looked for in that venv's C(lib/python*/site-packages).
      - Unset, or no torch there, gives the C(torch_cuda_unknown) finding instead of the driver check.
    type: path
  gpu_count:
    description:
      - GPUs this node needs (its share of the tensor-parallel size); fewer gives C(too_few_gpus). V(0) skips that.
    type: int
    default: 0
  multi_node:
    description:
      - Whether the server spans nodes (RDMA between them); only then is C(RLIMIT_MEMLOCK) checked.
    type: bool
    default: false
  min_shm_mib:
    description:
      - Smallest C(/dev/shm) in MiB for NCCL, checked where more than one GPU or node is used (C(shm_small)).
    type: int
    default: 1024
  min_memlock_mib:
    description:
      - Smallest C(RLIMIT_MEMLOCK) in MiB for RDMA (C(memlock_low)); unlimited passes.
    type: int
    default: 65536
  fatal:
    description:
      - Finding ids that fail the task; every other finding is a warning.
      - 'Ids: C(fabric_manager_inactive), C(fabric_not_ready), C(driver_too_old), C(ecc_uncorrectable),
        C(memory_repair_pending), C(memory_repair_failed), C(xid_fatal), C(mig_enabled), C(too_few_gpus),
        C(shm_small) (fatal by default); C(xid_warning), C(memory_retired), C(nvlink_down), C(persistence_off),
        C(clocks_mismatch), C(power_cap_mismatch), C(memlock_low), C(torch_cuda_unknown), C(kernel_log_unreadable).'
    type: list
    elements: str
    choices: [clocks_mismatch, driver_too_old, ecc_uncorrectable, fabric_manager_inactive, fabric_not_ready,
              kernel_log_unreadable, memlock_low, memory_repair_failed, memory_repair_pending, memory_retired,
              mig_enabled, nvlink_down, persistence_off, power_cap_mismatch, shm_small, too_few_gpus,
              torch_cuda_unknown, xid_fatal, xid_warning]
    default: [driver_too_old, ecc_uncorrectable, fabric_manager_inactive, fabric_not_ready, memory_repair_failed,
              memory_repair_pending, mig_enabled, shm_small, too_few_gpus, xid_fatal]
  fail_on_fatal:
    description:
      - Fail when a finding is fatal. V(false) only reports (the report role).
    type: bool
    default: true
extends_documentation_fragment: action_common_attributes
attributes:
  check_mode:
    support: full
    details: The module only reads, so it runs the same in check mode.
  diff_mode:
    support: none
  platform:
    platforms: linux
requirements:
  - C(nvidia-smi) on the target.
notes:
  - The kernel log needs root (or C(kernel.dmesg_restrict=0)); unreadable, it gives C(kernel_log_unreadable).
  - Xid lines count since boot; a GPU reset since an Xid does not remove its line. Take C(xid_fatal) out of O(fatal)
    for a host whose GPUs were reset and checked.
seealso:
  - module: ansible.legacy.gpu_facts
author:
  - eagle-deploy contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Check the host is fit to serve before a (re)start
  ansible.legacy.gpu_fitness:
    python: /opt/sglang/venv/bin/python
    gpu_count: 8
  register: __fitness

- name: Report only, never fail
  ansible.legacy.gpu_fitness:
    fail_on_fatal: false
"""

RETURN = r"""
checked:
  description: Whether the host was checked (false without C(nvidia-smi)).
  returned: always
  type: bool
  sample: true
fit:
  description: No finding is fatal.
  returned: always
  type: bool
  sample: true
findings:
  description: What is wrong, fatal ones first.
  returned: always
  type: list
  elements: dict
  sample: [{"id": "ecc_uncorrectable", "severity": "fatal", "gpu": 3, "uuid": "GPU-767d6e6e-...",
            "message": "GPU 3 (GPU-767d6e6e-...): 2 uncorrectable ECC errors since the driver loaded",
            "fix": "drain this host and reset the GPU (`nvidia-smi -r -i 3`, no process may hold it) or call the vendor"}]
driver_version:
  description: The NVIDIA driver's version.
  returned: when checked
  type: str
  sample: "580.159.04"
cuda_version:
  description: The highest CUDA the driver supports.
  returned: when checked
  type: str
  sample: "13.0"
torch_cuda:
  description: The CUDA torch was built with (empty for a CPU build, null when unknown).
  returned: when checked
  type: str
  sample: "13.0"
gpus:
  description: Every GPU, in nvidia-smi's index order.
  returned: when checked
  type: list
  elements: dict
  sample: [{"index": 0, "uuid": "GPU-767d6e6e-c74d-df8f-7833-989f8fcf6618", "name": "NVIDIA H100 80GB HBM3"}]
sources:
  description: What each input was read from, or why it was not.
  returned: when checked
  type: dict
  sample: {"kernel_log": "/dev/kmsg", "fabric_manager": "no NVSwitch"}
elapsed:
  description: Seconds the check took.
  returned: always
  type: float
  sample: 0.31
"""

import errno
import glob
import os
import resource
import time

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils import sglang_host_fitness as fitness

XID_MARK = "NVRM: Xid"
# Where the venv's python would import torch from, found without importing it (its package directory, or nothing).
FIND_TORCH = ("import importlib.util\n"
              "spec = importlib.util.find_spec('torch')\n"
              "print((spec.submodule_search_locations or [''])[0] if spec else '')")


class Host:
    """The one port to the host: commands (module.run_command, argv lists), files, limits. Tests replace it."""

    def __init__(self, module):
        self.module = module

    def which(self, name):
        return self.module.get_bin_path(name)

    def run(self, argv):
        return self.module.run_command(argv)

    def read_text(self, path):
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                return handle.read()
        except OSError:
            return None

    def glob(self, pattern):
        return sorted(glob.glob(pattern))

    def kmsg_xid_lines(self):
        """The ``NVRM: Xid`` records of /dev/kmsg (non-blocking: the records there now), None when unreadable."""
        try:
            fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            return None
        lines = []
        try:
            while True:
                try:
                    record = os.read(fd, 8192)
                except OSError as exc:
                    if exc.errno == errno.EPIPE:  # overwritten while read: go on with the next record
                        continue
                    if exc.errno == errno.EAGAIN:
                        break
                    return None
                if not record:
                    break
                text = record.decode("utf-8", "replace")
                if XID_MARK in text:
                    lines.append(text.split(";", 1)[-1].splitlines()[0])
        finally:
            os.close(fd)
        return lines

    def shm_mib(self):
        try:
            stat = os.statvfs("/dev/shm")
        except OSError:
            return None
        return stat.f_frsize * stat.f_blocks // (1024 * 1024)

    def memlock_mib(self):
        """The soft RLIMIT_MEMLOCK in MiB, None when unlimited."""
        soft = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
        return None if soft == resource.RLIM_INFINITY else soft // (1024 * 1024)


class FitnessCheck:
    def __init__(self, module, host, clock=time.monotonic):
        self.module = module
        self.params = module.params
        self.host = host
        self.clock = clock
        self.sources = {}

    def kernel_xids(self):
        lines = self.host.kmsg_xid_lines()
        if lines is not None:
            self.sources["kernel_log"] = "/dev/kmsg"
            return fitness.parse_xids(lines)
        journalctl = self.host.which("journalctl")
        if journalctl:
            rc, out, _err = self.host.run([journalctl, "-k", "-b", "-q", "-o", "cat", "--no-pager"])
            if rc == 0:
                self.sources["kernel_log"] = "journalctl -k -b"
                return fitness.parse_xids(line for line in out.splitlines() if XID_MARK in line)
        self.sources["kernel_log"] = "unreadable"
        return None

    def fabric_manager(self, smi):
        nvswitch = bool(self.host.glob("/dev/nvidia-nvswitch*")) or any(
            g["fabric_state"] not in ("", "N/A") for g in smi["gpus"])
        if not nvswitch:
            self.sources["fabric_manager"] = "no NVSwitch"
            return False, None
        systemctl = self.host.which("systemctl")
        if not systemctl:
            self.sources["fabric_manager"] = "no systemctl"
            return True, None
        _rc, out, _err = self.host.run([systemctl, "is-active", "nvidia-fabricmanager"])
        self.sources["fabric_manager"] = "systemctl is-active nvidia-fabricmanager"
        return True, out.strip() or "unknown"

    def torch_cuda(self):
        """torch's CUDA from its version.py, read as text: in the venv's site-packages, else where the venv's python
        finds the package (a site dir a .pth file adds: find_spec locates it without running it)."""
        python = self.params["python"]
        if not python:
            return None
        venv = os.path.dirname(os.path.dirname(python))
        for path in self.host.glob(os.path.join(venv, "lib", "python*", "site-packages", "torch", "version.py")):
            self.sources["torch"] = path
            return fitness.torch_cuda_version(self.host.read_text(path))
        rc, out, _err = self.host.run([python, "-I", "-c", FIND_TORCH]) if os.path.exists(python) else (1, "", "")
        found = out.strip().splitlines()[-1] if rc == 0 and out.strip() else ""
        if found and os.path.isabs(found):
            path = os.path.join(found, "version.py")
            text = self.host.read_text(path)
            if text is not None:
                self.sources["torch"] = path
                return fitness.torch_cuda_version(text)
        self.sources["torch"] = "no torch in %s or its python's path" % venv
        return None

    def run(self):
        started = self.clock()
        smi_path = self.host.which("nvidia-smi")
        if not smi_path:
            return {"checked": False, "fit": True, "findings": [], "elapsed": round(self.clock() - started, 3)}
        rc, out, err = self.host.run([smi_path, "-q", "-x"])
        if rc != 0:
            self.module.fail_json(msg="nvidia-smi -q -x failed (rc %d): %s" % (rc, (err or out).strip()[-500:]),
                                  checked=False, fit=False, findings=[], elapsed=round(self.clock() - started, 3))
        try:
            smi = fitness.parse_smi_xml(out)
        except fitness.ET.ParseError as exc:
            self.module.fail_json(msg="nvidia-smi -q -x printed no XML (%s): %s" % (exc, out.strip()[:500]),
                                  checked=False, fit=False, findings=[], elapsed=round(self.clock() - started, 3))
        nv_rc, nv_out, _nv_err = self.host.run([smi_path, "nvlink", "-s"])
        nvswitch, fabric_manager = self.fabric_manager(smi)
        facts = {
            "smi": smi,
            "nvlink": fitness.parse_nvlink_status(nv_out) if nv_rc == 0 else {},
            "xids": self.kernel_xids(),
            "nvswitch": nvswitch,
            "fabric_manager": fabric_manager,
            "torch_cuda": self.torch_cuda(),
            "shm_mib": self.host.shm_mib(),
            "memlock_mib": self.host.memlock_mib(),
        }
        found = fitness.findings(facts, {key: self.params[key] for key in (
            "fatal", "gpu_count", "multi_node", "min_shm_mib", "min_memlock_mib")})
        found.sort(key=lambda f: f["severity"] != "fatal")
        return {
            "checked": True,
            "fit": not any(f["severity"] == "fatal" for f in found),
            "findings": found,
            "driver_version": smi["driver_version"],
            "cuda_version": smi["cuda_version"],
            "torch_cuda": facts["torch_cuda"],
            "gpus": [{"index": g["index"], "uuid": g["uuid"], "name": g["name"]} for g in smi["gpus"]],
            "sources": self.sources,
            "elapsed": round(self.clock() - started, 3),
        }


def main(host_factory=Host, clock=time.monotonic):
    module = AnsibleModule(
        argument_spec=dict(
            python=dict(type="path"),
            gpu_count=dict(type="int", default=0),
            multi_node=dict(type="bool", default=False),
            min_shm_mib=dict(type="int", default=1024),
            min_memlock_mib=dict(type="int", default=65536),
            fatal=dict(type="list", elements="str", default=fitness.DEFAULT_FATAL, choices=sorted(fitness.FINDINGS)),
            fail_on_fatal=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    result = FitnessCheck(module, host_factory(module), clock=clock).run()
    for finding in result["findings"]:
        if finding["severity"] != "fatal":
            module.warn(fitness.finding_line(finding))
    if not result["fit"] and module.params["fail_on_fatal"]:
        module.fail_json(msg=fitness.summary(result["findings"]), **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()

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
    C(NVRM: Xid) lines (C(/dev/kmsg), its kernel records only, else C(journalctl -k -b)); the size of C(/dev/shm);
    its own C(RLIMIT_MEMLOCK); and C(torch/version.py) of the SGLang venv, as text (torch is not imported, CUDA not
    touched).'
  - Without C(nvidia-smi) it returns RV(checked=false) and no finding.
version_added: "0.1.0"
options:
  python:
    description:
      - The SGLang venv's python; torch's C(version.py) is looked for in that venv's C(lib/python*/site-packages).
      - Where it is not there, this python is run (C(python -I -c), as the module's user, root in the role) to say
        where it would import torch from, without importing it. Its start runs the venv's C(.pth) files, so it is run
        only where nobody less privileged than the module could have written it (the venv, its C(bin), C(pyvenv.cfg),
        the python it links to, its C(site-packages), their C(.pth) files and the directories those name, and the
        directories above them); else it is not run, a warning says why, and torch counts as not found.
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
  - From C(/dev/kmsg) only the kernel's own records count (syslog facility 0, the record's priority field >> 3 is 0);
    a process that writes a line there gets a user facility from the kernel, so it cannot forge an Xid.
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
import stat
import time

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils import sglang_host_fitness as fitness

XID_MARK = "NVRM: Xid"
# The kernel's own records in /dev/kmsg: syslog facility 0 (LOG_KERN). A process that writes to /dev/kmsg gets
# LOG_USER, or the facility it names, never 0 (the kernel's devkmsg_write).
KERNEL_FACILITY = 0
# Where the venv's python would import torch from, found without importing it (its package directory, or nothing).
FIND_TORCH = ("import importlib.util\n"
              "spec = importlib.util.find_spec('torch')\n"
              "print((spec.submodule_search_locations or [''])[0] if spec else '')")


def kernel_record_line(record):
    """The message (its first line) of one /dev/kmsg record (``PRIORITY,SEQ,USEC,FLAGS[,...];MESSAGE``), where the
    kernel wrote it (facility 0: priority >> 3 == 0); None for a record another process wrote, or one not read."""
    head, sep, message = record.partition(";")
    priority = head.split(",", 1)[0]
    if not sep or not priority.isdigit() or int(priority) >> 3 != KERNEL_FACILITY:
        return None
    return (message.splitlines() or [""])[0]


def _why_writable(path, lstat, euid, above=False):
    """Why someone less privileged than uid ``euid`` (and root) could have written ``path`` (a link: its own entry,
    its target checked apart), or None (a missing path too: its directory is checked). ``above``: a directory above
    what is checked, where the sticky bit keeps others from swapping its entries (/tmp)."""
    try:
        st = lstat(path)
    except OSError:
        return None
    if st.st_uid not in (0, euid):
        return "%s is owned by uid %d, not root" % (path, st.st_uid)
    if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o022 and not (above and st.st_mode & stat.S_ISVTX):
        return "%s is writable by its group or others (mode %04o)" % (path, stat.S_IMODE(st.st_mode))
    return None


def _ancestors(path):
    out, path = [], os.path.dirname(path)
    while True:
        out.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            return out
        path = parent


def why_python_untrusted(python, lstat=os.lstat, euid=None):
    """Why running the venv's ``python`` could run code that someone less privileged than this module wrote, or None:
    a start runs its venv's .pth files (site), and imports sitecustomize from any directory they add. Checked: the
    venv and every directory above it, bin/, pyvenv.cfg, the python and the file it links to (and the directories
    above that), lib/python*/site-packages, each .pth there and each directory it names."""
    euid = os.geteuid() if euid is None else euid
    venv = os.path.dirname(os.path.dirname(os.path.abspath(python)))
    real = os.path.realpath(python)
    above = _ancestors(venv) + [d for d in _ancestors(real) if d not in _ancestors(venv)]
    paths = [venv, os.path.join(venv, "bin"), os.path.join(venv, "pyvenv.cfg"), os.path.abspath(python), real,
             os.path.join(venv, "lib")]
    for site in sorted(glob.glob(os.path.join(venv, "lib", "python*", "site-packages"))):
        paths += [os.path.dirname(site), site]
        for pth in sorted(glob.glob(os.path.join(site, "*.pth"))):
            paths.append(pth)
            try:
                with open(pth, encoding="utf-8", errors="replace") as handle:
                    named = [line.strip() for line in handle]
            except OSError:
                named = []
            paths += [os.path.join(site, n) for n in named if n and not n.startswith(("#", "import ", "import\t"))]
    for path in above:
        why = _why_writable(path, lstat, euid, above=True)
        if why:
            return why
    for path in paths:
        why = _why_writable(path, lstat, euid)
        if why:
            return why
    return None


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

    def python_untrusted(self, python):
        return why_python_untrusted(python)

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
                line = kernel_record_line(record.decode("utf-8", "replace"))
                if line is not None and XID_MARK in line:
                    lines.append(line)
        finally:
            os.close(fd)
        return lines

    def shm_mib(self):
        try:
            fs = os.statvfs("/dev/shm")
        except OSError:
            return None
        return fs.f_frsize * fs.f_blocks // (1024 * 1024)

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
        if not os.path.exists(python):
            self.sources["torch"] = "no torch in %s or its python's path" % venv
            return None
        # The python runs as this module's user (root in the role), its site start running the venv's .pth files:
        # only where nobody less privileged could have written them (docs/security.md).
        why = self.host.python_untrusted(python)
        if why:
            self.sources["torch"] = "no torch in %s; %s not run to find one: %s" % (venv, python, why)
            self.module.warn("gpu_fitness did not run %s to find torch (it would run as this module's user, and its "
                             "start runs the venv's .pth files): %s. Make the venv root's and writable by root only "
                             "(chown -R root: and chmod -R go-w)." % (python, why))
            return None
        rc, out, _err = self.host.run([python, "-I", "-c", FIND_TORCH])
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

# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Is this GPU host fit to serve: pure parsers of what the host says (``nvidia-smi -q -x``, ``nvidia-smi nvlink -s``,
the kernel log's ``NVRM: Xid`` lines, torch's ``version.py``) and the findings drawn from them. No I/O here: the
module ``library/gpu_fitness.py`` reads the host and hands the texts and figures in.

A finding is a dict: ``id`` (one of FINDINGS), ``severity`` (``fatal`` or ``warning``, from the caller's fatal list),
``gpu`` and ``uuid`` where it is about one GPU, ``message`` (what is wrong) and ``fix`` (what to do)."""
from __future__ import annotations

import ast
import re
import xml.etree.ElementTree as ET

# Every finding id with its default severity. The role's sglang_server_fitness_fatal lists the fatal ones.
FINDINGS = {
    "fabric_manager_inactive": "fatal",
    "fabric_not_ready": "fatal",
    "driver_too_old": "fatal",
    "ecc_uncorrectable": "fatal",
    "memory_repair_pending": "fatal",
    "memory_repair_failed": "fatal",
    "xid_fatal": "fatal",
    "mig_enabled": "fatal",
    "too_few_gpus": "fatal",
    "shm_small": "fatal",
    "xid_warning": "warning",
    "memory_retired": "warning",
    "nvlink_down": "warning",
    "persistence_off": "warning",
    "clocks_mismatch": "warning",
    "power_cap_mismatch": "warning",
    "memlock_low": "warning",
    "torch_cuda_unknown": "warning",
    "kernel_log_unreadable": "warning",
}
DEFAULT_FATAL = sorted(k for k, v in FINDINGS.items() if v == "fatal")

# Xid codes (NVIDIA's Xid catalogue): what each means and whether the GPU must be reset (or the host serviced)
# before it serves again (xid_fatal) or an application fault that a restart clears (xid_warning).
XID_MEANINGS = {
    43: "GPU stopped processing: an application fault, the GPU itself recovers",
    48: "double-bit ECC error: an uncorrectable memory error",
    63: "ECC page retirement or row remapping recorded: active after a GPU reset",
    64: "ECC page retirement or row remapper recording failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    94: "contained ECC error: only the application that touched the memory was hit",
    95: "uncontained ECC error: every application on the GPU was hit",
}
# Xids after which NVIDIA's catalogue asks for a GPU reset or a reboot before the GPU serves again (xid_fatal); the
# others are an application fault, or a repair that the next reset activates (xid_warning).
XID_NEEDS_RESET = (48, 64, 74, 79, 95)
XID_RE = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})[^)]*\):\s*(\d+)")
NVLINK_GPU_RE = re.compile(r"^GPU (\d+):.*?(?:\(UUID: ([^)]+)\))?\s*$")
NVLINK_LINK_RE = re.compile(r"^\s*Link (\d+):\s*(.*?)\s*$")
FABRIC_READY_STATES = ("completed", "n/a", "")
FABRIC_OK_STATUS = ("success", "n/a", "")


def _text(node, path, default=""):
    found = node.find(path) if node is not None else None
    if found is None or found.text is None:
        return default
    return found.text.strip()


def _number(value):
    """The leading number of an nvidia-smi figure ("700.00 W", "1980 MHz", "2"), or None for N/A."""
    match = re.match(r"\s*(-?\d+(?:\.\d+)?)", value or "")
    return float(match.group(1)) if match else None


def _count(node, paths):
    return int(sum(_number(_text(node, p)) or 0 for p in paths))


def short_pci(bus_id):
    """``00000000:3B:00.0`` (nvidia-smi) or ``0000:3b:00`` (the kernel log) as ``0000:3b:00``."""
    match = re.search(r"([0-9A-Fa-f]{4}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})(?:\.\d)?$", (bus_id or "").strip())
    return ("%s:%s:%s" % match.groups()).lower() if match else (bus_id or "").lower()


def parse_smi_xml(text):
    """``nvidia-smi -q -x`` as {driver_version, cuda_version, gpus: [...]}, GPUs in nvidia-smi's index order."""
    root = ET.fromstring(text)
    gpus = []
    for index, gpu in enumerate(root.findall("gpu")):
        ecc = gpu.find("ecc_errors/volatile")
        retired = gpu.find("retired_pages")
        remap = gpu.find("remapped_rows")
        gpus.append({
            "index": index,
            "uuid": _text(gpu, "uuid"),
            "name": _text(gpu, "product_name"),
            "pci": short_pci(gpu.get("id") or _text(gpu, "pci/pci_bus_id")),
            "persistence": _text(gpu, "persistence_mode"),
            "mig_current": _text(gpu, "mig_mode/current_mig"),
            "mig_pending": _text(gpu, "mig_mode/pending_mig"),
            "ecc_uncorrectable": _count(ecc, ("sram_uncorrectable", "sram_uncorrectable_parity",
                                              "sram_uncorrectable_secded", "dram_uncorrectable",
                                              "volatile_uncorrectable")),
            "retired_pages": _count(retired, ("multiple_single_bit_retirement/retired_count",
                                              "double_bit_retirement/retired_count")),
            "pending_retirement": _text(retired, "pending_retirement") == "Yes",
            "remapped_rows_unc": _count(remap, ("remapped_row_unc",)),
            "remap_pending": _text(remap, "remapped_row_pending") == "Yes",
            "remap_failure": _text(remap, "remapped_row_failure") == "Yes",
            "max_sm_clock_mhz": _number(_text(gpu, "max_clocks/sm_clock")),
            "app_graphics_clock_mhz": _number(_text(gpu, "applications_clocks/graphics_clock")),
            "power_limit_w": _number(_text(gpu, "gpu_power_readings/current_power_limit")),
            "fabric_state": _text(gpu, "fabric/state"),
            "fabric_status": _text(gpu, "fabric/status"),
        })
    return {"driver_version": _text(root, "driver_version"), "cuda_version": _text(root, "cuda_version"),
            "gpus": gpus}


def parse_nvlink_status(text):
    """``nvidia-smi nvlink -s`` as {gpu index: {"links": [numbers], "inactive": [numbers]}}; empty without NVLink."""
    found = {}
    current = None
    for line in (text or "").splitlines():
        gpu = NVLINK_GPU_RE.match(line)
        if gpu:
            current = found.setdefault(int(gpu.group(1)), {"links": [], "inactive": []})
            continue
        link = NVLINK_LINK_RE.match(line)
        if link and current is not None:
            current["links"].append(int(link.group(1)))
            if "inactive" in link.group(2).lower():
                current["inactive"].append(int(link.group(1)))
    return found


def parse_xids(lines):
    """The kernel log's ``NVRM: Xid`` lines as [{"pci", "xid", "line"}], in log order."""
    found = []
    for line in lines or ():
        match = XID_RE.search(line)
        if match:
            found.append({"pci": match.group(1).lower(), "xid": int(match.group(2)), "line": line.strip()})
    return found


def torch_cuda_version(text):
    """``cuda`` of torch's ``version.py`` (read as text, never imported): ``"13.0"``; ``""`` for a CPU build;
    None when the file does not say."""
    try:
        tree = ast.parse(text or "")
    except SyntaxError:
        return None
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        for target in targets:
            if isinstance(target, ast.Name) and target.id == "cuda" and isinstance(node.value, ast.Constant):
                return node.value.value or ""
    return None


def version_tuple(text):
    parts = re.findall(r"\d+", text or "")
    return tuple(int(p) for p in parts[:2]) if parts else None


def _finding(fatal, fid, message, fix, gpu=None):
    return {"id": fid, "severity": "fatal" if fid in fatal else "warning",
            "gpu": None if gpu is None else gpu["index"], "uuid": None if gpu is None else gpu["uuid"],
            "message": message, "fix": fix}


def _gpu_words(gpu):
    return "GPU %d (%s)" % (gpu["index"], gpu["uuid"])


def _gpu_findings(add, gpu):
    words = _gpu_words(gpu)
    reset = "drain this host and reset the GPU (`nvidia-smi -r -i %d`, no process may hold it)" % gpu["index"]
    if gpu["mig_current"] == "Enabled" or gpu["mig_pending"] == "Enabled":
        add("mig_enabled", gpu, "%s has MIG mode %s (pending %s): SGLang needs the whole GPU"
            % (words, gpu["mig_current"] or "?", gpu["mig_pending"] or "?"),
            "disable MIG (`nvidia-smi -i %d -mig 0`, then reset the GPU) or serve on another host" % gpu["index"])
    if gpu["ecc_uncorrectable"] > 0:
        add("ecc_uncorrectable", gpu, "%s: %d uncorrectable ECC errors since the driver loaded"
            % (words, gpu["ecc_uncorrectable"]), reset + " or call the vendor")
    if gpu["remap_failure"]:
        add("memory_repair_failed", gpu, "%s: row remapping failed (no spare rows left)" % words,
            "drain this host and call the vendor to replace the GPU")
    if gpu["pending_retirement"] or gpu["remap_pending"]:
        add("memory_repair_pending", gpu, "%s has memory %s pending, active only after a GPU reset"
            % (words, "page retirement" if gpu["pending_retirement"] else "row remapping"), reset)
    elif gpu["retired_pages"] or gpu["remapped_rows_unc"]:
        add("memory_retired", gpu, "%s has %d retired pages and %d rows remapped for uncorrectable errors"
            % (words, gpu["retired_pages"], gpu["remapped_rows_unc"]),
            "watch the count (`nvidia-smi -q -d PAGE_RETIREMENT,ROW_REMAPPER -i %d`); a growing one means "
            "calling the vendor" % gpu["index"])
    if gpu["persistence"] and gpu["persistence"] != "Enabled":
        add("persistence_off", gpu, "%s has persistence mode %s: the driver state is torn down between "
            "processes, which slows every start" % (words, gpu["persistence"]),
            "run nvidia-persistenced (`systemctl enable --now nvidia-persistenced`) or `nvidia-smi -i %d -pm 1`"
            % gpu["index"])
    if gpu["fabric_state"].lower() not in FABRIC_READY_STATES or gpu["fabric_status"].lower() not in FABRIC_OK_STATUS:
        add("fabric_not_ready", gpu, "%s: NVSwitch fabric state %s, status %s: every CUDA call fails with "
            "error 802 (system not yet initialized) until it is Completed/Success"
            % (words, gpu["fabric_state"] or "?", gpu["fabric_status"] or "?"),
            "wait for nvidia-fabricmanager to finish, or read `journalctl -u nvidia-fabricmanager` and restart it "
            "(`systemctl restart nvidia-fabricmanager`)")


def _spread_findings(add, gpus):
    for key, fid, what, unit, fix in (
            ("max_sm_clock_mhz", "clocks_mismatch", "maximum SM clocks", "MHz", "reset clocks on every GPU "
             "(`nvidia-smi -rgc`, `nvidia-smi -rac`) or set the same ones"),
            ("app_graphics_clock_mhz", "clocks_mismatch", "application clocks", "MHz", "reset application clocks "
             "(`nvidia-smi -rac`) or set the same ones on every GPU"),
            ("power_limit_w", "power_cap_mismatch", "power limits", "W", "set one power limit on every GPU "
             "(`nvidia-smi -pl WATTS`)")):
        values = sorted({g[key] for g in gpus if g[key] is not None})
        if len(values) > 1:
            each = ", ".join("GPU %d %g %s" % (g["index"], g[key], unit) for g in gpus if g[key] is not None)
            add(fid, None, "the GPUs of this server run at different %s (%s): tensor parallelism runs at the "
                "slowest one's pace" % (what, each), fix)


def _xid_fix(xid, index):
    if xid == 79:
        return "drain this host and reboot it (a GPU off the bus needs a cold reset); if it comes back, call the vendor"
    if xid == 43:
        return "nothing on the host: the application that hit it has ended; if it repeats, look at the application"
    reset = "drain this host and reset the GPU (`nvidia-smi -r -i %s`) or reboot" % index
    if xid in XID_NEEDS_RESET:
        return reset + "; if it comes back, call the vendor (after a reset, drop xid_fatal from " \
                       "sglang_server_fitness_fatal: the line stays in the log until the next boot)"
    return reset + " if it was not reset since, so that the memory repair takes effect"


def _xid_findings(add, gpus, xids):
    by_pci = {g["pci"]: g for g in gpus}
    seen = {}
    for event in xids:
        if event["xid"] in XID_MEANINGS:
            seen.setdefault((event["pci"], event["xid"]), []).append(event)
    for (pci, xid), events in sorted(seen.items()):
        gpu = by_pci.get(pci)
        where = _gpu_words(gpu) if gpu else "the GPU at PCI %s" % pci
        add("xid_fatal" if xid in XID_NEEDS_RESET else "xid_warning", gpu,
            "%s: Xid %d (%s), %d time(s) since boot; last: %s"
            % (where, xid, XID_MEANINGS[xid], len(events), events[-1]["line"]),
            _xid_fix(xid, gpu["index"] if gpu else "INDEX"))


def _host_findings(add, facts, settings, smi):
    """What is about the host, not one GPU: fabric manager, driver vs torch, /dev/shm, memlock."""
    need = int(settings.get("gpu_count") or 0)
    if facts.get("nvswitch") and facts.get("fabric_manager") not in (None, "active"):
        add("fabric_manager_inactive", None, "this host has NVSwitches but nvidia-fabricmanager is %s: CUDA fails "
            "with error 802 (system not yet initialized) on every rank" % facts["fabric_manager"],
            "start it (`systemctl enable --now nvidia-fabricmanager`; its version must equal the driver's %s)"
            % smi["driver_version"])
    torch_cuda = facts.get("torch_cuda")
    if torch_cuda is None:
        add("torch_cuda_unknown", None, "torch's CUDA version is unknown (no torch/version.py in the SGLang venv)",
            "install SGLang first; the driver check runs on the next start")
    elif torch_cuda and version_tuple(torch_cuda) and version_tuple(smi["cuda_version"]) \
            and version_tuple(torch_cuda) > version_tuple(smi["cuda_version"]):
        add("driver_too_old", None, "the NVIDIA driver %s supports CUDA up to %s, the installed torch is built with "
            "CUDA %s: CUDA fails to initialise (forward compatibility through the cuda-compat package on datacenter "
            "GPUs aside)" % (smi["driver_version"], smi["cuda_version"], torch_cuda),
            "install a driver that supports CUDA %s, or a torch built for CUDA %s or older (sglang_install's "
            "torch index)" % (torch_cuda, smi["cuda_version"]))
    shm = facts.get("shm_mib")
    if shm is not None and (need > 1 or settings.get("multi_node")) and shm < int(settings.get("min_shm_mib", 0)):
        add("shm_small", None, "/dev/shm holds %d MiB, NCCL needs %d MiB (sglang_server_fitness_min_shm_mib) "
            "between the GPUs of a node" % (shm, int(settings["min_shm_mib"])),
            "enlarge /dev/shm (`mount -o remount,size=%dM /dev/shm`, or the container's --shm-size)"
            % int(settings["min_shm_mib"]))
    memlock = facts.get("memlock_mib", -1)
    if settings.get("multi_node") and memlock is not None and memlock >= 0 \
            and memlock < int(settings.get("min_memlock_mib", 0)):
        add("memlock_low", None, "ulimit -l (RLIMIT_MEMLOCK) is %d MiB, RDMA between nodes needs %d MiB or unlimited"
            % (memlock, int(settings["min_memlock_mib"])),
            "raise it (LimitMEMLOCK=infinity in the unit, which this role's unit sets; memlock in "
            "/etc/security/limits.conf for the detached launcher)")


def findings(facts, settings):
    """Findings from what the host said. ``facts``: smi (parse_smi_xml), nvlink (parse_nvlink_status), xids
    (parse_xids, None when the kernel log could not be read), nvswitch (bool), fabric_manager (``systemctl
    is-active`` word, None when not asked), torch_cuda (torch_cuda_version), shm_mib, memlock_mib (None:
    unlimited). ``settings``: fatal (ids), gpu_count, multi_node, min_shm_mib, min_memlock_mib."""
    fatal = set(settings.get("fatal", DEFAULT_FATAL))
    found = []

    def add(fid, gpu, message, fix):
        found.append(_finding(fatal, fid, message, fix, gpu))

    smi = facts["smi"]
    gpus = smi["gpus"]
    need = int(settings.get("gpu_count") or 0)
    if need and len(gpus) < need:
        add("too_few_gpus", None, "nvidia-smi shows %d GPUs, this node's share of the tensor-parallel size needs %d"
            % (len(gpus), need), "serve on a host with %d GPUs, or lower sglang_server_tp_size" % need)
    _host_findings(add, facts, settings, smi)
    for gpu in gpus:
        _gpu_findings(add, gpu)
    for index, links in sorted((facts.get("nvlink") or {}).items()):
        if links["inactive"]:
            gpu = gpus[index] if index < len(gpus) else {"index": index, "uuid": "?"}
            add("nvlink_down", gpu, "%s: NVLink %s of %d down: its traffic goes over PCIe"
                % (_gpu_words(gpu), ", ".join(str(n) for n in links["inactive"]), len(links["links"])),
                "drain this host and reset the GPUs (`nvidia-smi -r`) or reboot; if the link stays down, "
                "call the vendor")
    if len(gpus) > 1:
        _spread_findings(add, gpus)
    if facts.get("xids") is None:
        add("kernel_log_unreadable", None, "the kernel log could not be read, so Xid errors are not checked",
            "run the play with become (root reads /dev/kmsg), or allow dmesg (sysctl kernel.dmesg_restrict=0)")
    else:
        _xid_findings(add, gpus, facts["xids"])
    return found


def finding_line(finding):
    """One finding as the operator reads it: ``FATAL GPU 3 (UUID): what: fix``."""
    return "%s %s: %s" % (finding["severity"].upper(), finding["message"], finding["fix"])


def summary(found):
    """The failure message: every fatal finding, then the warnings, one line each."""
    fatal = [f for f in found if f["severity"] == "fatal"]
    lines = ["this host is not fit to serve (%d fatal finding%s; nothing was stopped or started):"
             % (len(fatal), "" if len(fatal) == 1 else "s")]
    lines.extend(finding_line(f) for f in fatal)
    lines.extend(finding_line(f) for f in found if f["severity"] != "fatal")
    return "\n".join(lines)

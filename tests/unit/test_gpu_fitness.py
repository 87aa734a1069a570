"""Unit tests for the host fitness check: module_utils/sglang_host_fitness.py (parsers and findings) over the H100
capture and its fault variants (tests/data/nvidia-smi/h100-fitness, README there), and library/gpu_fitness.py
driven through a fake host port that answers from those files. No process, no sleep."""
from __future__ import annotations

import filecmp
import importlib.util
import os
import re
import stat

import pytest
import yaml

from ansible.module_utils import sglang_host_fitness as fitness
from ansible.module_utils.common.warnings import get_warning_messages
from ansible.module_utils.testing import patch_module_args
from module_harness import ExitJson, FailJson, module_exits  # noqa: F401 - fixture

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMI_DATA = os.path.join(REPO, "tests", "data", "nvidia-smi")
CAPTURE = os.path.join(SMI_DATA, "h100-80gb-hbm3")
VARIANTS = os.path.join(SMI_DATA, "h100-fitness")
UUID = "GPU-767d6e6e-c74d-df8f-7833-989f8fcf6618"
VENV_PYTHON = "/opt/sglang/venv/bin/python"
TORCH_VERSION_PY = "/opt/sglang/venv/lib/python3.12/site-packages/torch/version.py"


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gpu_fitness = _load("gpu_fitness", os.path.join(REPO, "library", "gpu_fitness.py"))
derive = _load("derive_variants", os.path.join(VARIANTS, "derive_variants.py"))


def fixture_text(variant, name):
    """A variant's file, else the capture's (a variant holds only what it changes); None when neither has it."""
    for folder in ([os.path.join(VARIANTS, variant)] if variant != "healthy" else []) + [CAPTURE]:
        path = os.path.join(folder, name)
        if os.path.exists(path):
            with open(path) as handle:
                return handle.read()
    return None


def host_line(variant, key):
    for line in fixture_text(variant, "host.txt").splitlines():
        if line.startswith(key + " "):
            return line[len(key) + 1:]
    raise AssertionError("host.txt has no %r line" % key)


class FixtureHost:
    """gpu_fitness's host port answering from a variant's files (systemctl-fabricmanager.txt present: the host has
    NVSwitches and that is what `systemctl is-active` prints; kmsg=None: /dev/kmsg unreadable)."""

    def __init__(self, variant, kmsg=True, journal=None, tools=("nvidia-smi", "systemctl", "journalctl")):
        self.variant = variant
        self.kmsg = kmsg
        self.journal = journal
        self.tools = tools
        self.calls = []

    def __call__(self, module):
        return self

    def which(self, name):
        return "/usr/bin/" + name if name in self.tools else None

    def run(self, argv):
        self.calls.append(argv)
        if argv[1:] == ["-q", "-x"]:
            return 0, fixture_text(self.variant, "q.xml"), ""
        if argv[1:] == ["nvlink", "-s"]:
            return 0, fixture_text(self.variant, "nvlink-s.txt"), ""
        if argv[1:] == ["is-active", "nvidia-fabricmanager"]:
            state = fixture_text(self.variant, "systemctl-fabricmanager.txt")
            return (0 if state.strip() == "active" else 3), state, ""
        if argv[0].endswith("journalctl"):
            return (0, self.journal, "") if self.journal is not None else (1, "", "No journal files were found.")
        raise AssertionError("unexpected command %s" % argv)

    def read_text(self, path):
        assert path == TORCH_VERSION_PY, path
        cuda = host_line(self.variant, "torch").split()[1]
        return "from typing import Optional\n\n__version__ = '2.11.0+cu130'\ndebug = False\n" \
               "cuda: Optional[str] = %r\nhip: Optional[str] = None\n" % cuda

    def glob(self, pattern):
        if "nvswitch" in pattern:
            return ["/dev/nvidia-nvswitch0"] if fixture_text(self.variant, "systemctl-fabricmanager.txt") else []
        assert pattern == "/opt/sglang/venv/lib/python*/site-packages/torch/version.py", pattern
        return [TORCH_VERSION_PY]

    untrusted = None  # why_python_untrusted's answer for the venv's python (None: nobody less privileged wrote it)

    def python_untrusted(self, python):
        assert python == VENV_PYTHON, python
        return self.untrusted

    def kmsg_xid_lines(self):
        if not self.kmsg:
            return None
        return [line for line in fixture_text(self.variant, "kmsg-nvrm.txt").splitlines() if "NVRM: Xid" in line]

    def shm_mib(self):
        return int(fixture_text(self.variant, "dev-shm.txt").splitlines()[1].split()[1]) // (1024 * 1024)

    def memlock_mib(self):
        value = host_line(self.variant, "ulimit -l")
        return None if value == "unlimited" else int(value) // 1024


def run_module(host, args=None, check_mode=False):
    args = dict({"python": VENV_PYTHON}, **(args or {}))
    if check_mode:
        args["_ansible_check_mode"] = True
    with patch_module_args(args):
        gpu_fitness.main(host_factory=host)


def exits(host, args=None, check_mode=False):
    with pytest.raises(ExitJson) as info:
        run_module(host, args, check_mode)
    return info.value.args[0]


def fails(host, args=None):
    with pytest.raises(FailJson) as info:
        run_module(host, args)
    return info.value.args[0]


def facts_of(variant):
    host = FixtureHost(variant)
    smi = fitness.parse_smi_xml(fixture_text(variant, "q.xml"))
    state = fixture_text(variant, "systemctl-fabricmanager.txt")
    return {"smi": smi, "nvlink": fitness.parse_nvlink_status(fixture_text(variant, "nvlink-s.txt")),
            "xids": fitness.parse_xids(host.kmsg_xid_lines()), "nvswitch": state is not None,
            "fabric_manager": state.strip() if state else None,
            "torch_cuda": fitness.torch_cuda_version(host.read_text(TORCH_VERSION_PY)),
            "shm_mib": host.shm_mib(), "memlock_mib": host.memlock_mib()}


SETTINGS = {"fatal": fitness.DEFAULT_FATAL, "gpu_count": 1, "multi_node": False, "min_shm_mib": 1024,
            "min_memlock_mib": 65536}

# variant, settings that differ, expected findings as (id, severity, GPU index)
CASES = [
    ("healthy", {}, []),
    ("healthy", {"gpu_count": 2}, [("too_few_gpus", "fatal", None)]),
    ("fabric-in-progress", {}, [("fabric_not_ready", "fatal", 0)]),
    ("fabric-manager-failed", {}, [("fabric_manager_inactive", "fatal", None), ("fabric_not_ready", "fatal", 0)]),
    ("ecc", {}, [("ecc_uncorrectable", "fatal", 0)]),
    ("ecc", {"fatal": []}, [("ecc_uncorrectable", "warning", 0)]),
    ("remap-pending", {}, [("memory_repair_pending", "fatal", 0)]),
    ("remap-failed", {}, [("memory_repair_failed", "fatal", 0)]),
    ("retired-pages", {}, [("memory_retired", "warning", 0)]),
    ("xid", {}, [("xid_warning", "warning", 0), ("xid_fatal", "fatal", 0)]),
    ("nvlink-down", {}, [("nvlink_down", "warning", 0)]),
    ("mig-on", {}, [("mig_enabled", "fatal", 0)]),
    ("driver-old", {}, [("driver_too_old", "fatal", None)]),
    ("persistence-off", {}, [("persistence_off", "warning", 0)]),
    ("two-gpus-mismatched", {"gpu_count": 2},
     [("clocks_mismatch", "warning", None), ("power_cap_mismatch", "warning", None)]),
    ("shm-memlock-small", {}, []),
    ("shm-memlock-small", {"multi_node": True},
     [("shm_small", "fatal", None), ("memlock_low", "warning", None)]),
]


@pytest.mark.parametrize("variant,settings,expected", CASES, ids=["%s%s" % (c[0], "-" + "-".join(
    "%s=%s" % kv for kv in c[1].items()) if c[1] else "") for c in CASES])
def test_findings_of_each_variant(variant, settings, expected):
    found = fitness.findings(facts_of(variant), dict(SETTINGS, **settings))
    assert sorted((f["id"], f["severity"], f["gpu"]) for f in found) == sorted(expected)


def test_every_finding_id_has_a_variant_or_a_case():
    covered = {e[0] for _v, _s, expected in CASES for e in expected}
    assert set(fitness.FINDINGS) - covered == {"torch_cuda_unknown", "kernel_log_unreadable"}


@pytest.mark.parametrize("variant,fid,words", [
    ("ecc", "ecc_uncorrectable", ["GPU 0 (%s)" % UUID, "2 uncorrectable ECC errors", "`nvidia-smi -r -i 0`"]),
    ("xid", "xid_fatal", ["GPU 0 (%s)" % UUID, "Xid 79 (GPU has fallen off the bus), 1 time(s) since boot", "reboot"]),
    ("xid", "xid_warning", ["GPU 0 (%s): Xid 43 (GPU stopped processing" % UUID, "look at the application"]),
    ("two-gpus-mismatched", "power_cap_mismatch", ["GPU 0 700 W, GPU 1 500 W", "`nvidia-smi -pl WATTS`"]),
    ("mig-on", "mig_enabled", ["GPU 0 (%s)" % UUID, "`nvidia-smi -i 0 -mig 0`"]),
    ("driver-old", "driver_too_old", ["550.54.15 supports CUDA up to 12.4", "built with CUDA 13.0", "cuda-compat"]),
    ("fabric-manager-failed", "fabric_manager_inactive", ["error 802", "systemctl enable --now nvidia-fabricmanager"]),
    ("nvlink-down", "nvlink_down", ["GPU 0 (%s): NVLink 7 of 18 down" % UUID]),
])
def test_finding_names_the_gpu_and_the_fix(variant, fid, words):
    line = fitness.finding_line(next(f for f in fitness.findings(facts_of(variant), SETTINGS) if f["id"] == fid))
    for word in words:
        assert word in line


def test_xid_outside_the_watched_list_is_no_finding():
    xids = fitness.parse_xids(["NVRM: Xid (PCI:0000:00:06): 13, pid=1, Graphics Exception"])
    assert xids and not [f for f in fitness.findings(dict(facts_of("healthy"), xids=xids), SETTINGS)]


def test_xid_of_a_pci_address_without_gpu_names_the_address():
    xids = fitness.parse_xids(["6,1021,5012771830,-;NVRM: Xid (PCI:0000:3b:00): 48, pid=9, DBE"])
    found = fitness.findings(dict(facts_of("healthy"), xids=xids), SETTINGS)
    assert [(f["id"], f["gpu"]) for f in found] == [("xid_fatal", None)]
    assert "the GPU at PCI 0000:3b:00" in found[0]["message"]


@pytest.mark.parametrize("text,cuda", [
    ("cuda: Optional[str] = '13.0'\n", "13.0"),
    ("cuda = '12.4'\n", "12.4"),
    ("cuda: Optional[str] = None\n", ""),
    ("__version__ = '2.5.1'\n", None),
    ("not python (", None),
])
def test_torch_cuda_version_read_as_text(text, cuda):
    assert fitness.torch_cuda_version(text) == cuda


def test_cpu_torch_is_not_checked_against_the_driver():
    assert not fitness.findings(dict(facts_of("driver-old"), torch_cuda=""), SETTINGS)


def test_the_capture_parses():
    smi = fitness.parse_smi_xml(fixture_text("healthy", "q.xml"))
    assert (smi["driver_version"], smi["cuda_version"]) == ("580.159.04", "13.0")
    assert smi["gpus"][0]["uuid"] == UUID and smi["gpus"][0]["pci"] == "0000:00:06"
    assert smi["gpus"][0]["power_limit_w"] == 700.0 and smi["gpus"][0]["max_sm_clock_mhz"] == 1980.0
    assert fitness.parse_nvlink_status(fixture_text("healthy", "nvlink-s.txt")) == {}


def test_variants_are_what_derive_variants_writes(tmp_path):
    derive.main(str(tmp_path))
    written = sorted(os.listdir(str(tmp_path)))
    assert written == sorted(d for d in os.listdir(VARIANTS) if os.path.isdir(os.path.join(VARIANTS, d)))
    for name in written:
        files = sorted(os.listdir(str(tmp_path / name)))
        assert files == sorted(os.listdir(os.path.join(VARIANTS, name)))
        match, mismatch, errors = filecmp.cmpfiles(str(tmp_path / name), os.path.join(VARIANTS, name), files,
                                                   shallow=False)
        assert not mismatch and not errors, (name, mismatch, errors)


def test_readme_table_lists_every_variant():
    with open(os.path.join(VARIANTS, "README.md")) as handle:
        rows = re.findall(r"^\| `([a-z0-9-]+)` \|", handle.read(), re.M)
    assert sorted(rows) == sorted(list(derive.variants()) + ["healthy"])


# -- the module ---------------------------------------------------------------------------------------------------
pytestmark_module = pytest.mark.usefixtures("module_exits")


@pytestmark_module
def test_module_passes_the_healthy_capture():
    host = FixtureHost("healthy")
    result = exits(host, {"gpu_count": 1})
    assert result["checked"] and result["fit"] and result["findings"] == []
    assert (result["driver_version"], result["cuda_version"], result["torch_cuda"]) == ("580.159.04", "13.0", "13.0")
    assert result["gpus"] == [{"index": 0, "uuid": UUID, "name": "NVIDIA H100 80GB HBM3"}]
    assert result["sources"] == {"fabric_manager": "no NVSwitch", "kernel_log": "/dev/kmsg",
                                 "torch": TORCH_VERSION_PY}
    assert result["changed"] is False


@pytestmark_module
def test_module_fails_on_a_fatal_finding_with_all_of_them():
    result = fails(FixtureHost("xid"))
    assert result["msg"].splitlines()[0].startswith("this host is not fit to serve (1 fatal finding")
    assert result["msg"].splitlines()[1].startswith("FATAL GPU 0 (%s): Xid 79" % UUID)
    assert result["msg"].splitlines()[2].startswith("WARNING GPU 0 (%s): Xid 43" % UUID)
    assert result["fit"] is False and [f["severity"] for f in result["findings"]] == ["fatal", "warning"]


@pytestmark_module
def test_module_reports_only_when_told_not_to_fail():
    result = exits(FixtureHost("ecc"), {"fail_on_fatal": False})
    assert result["fit"] is False and result["findings"][0]["id"] == "ecc_uncorrectable"


@pytestmark_module
def test_module_warnings_are_printed():
    result = exits(FixtureHost("persistence-off"))
    assert result["fit"] is True
    assert any("WARNING GPU 0 (%s): " % UUID in w for w in get_warning_messages())


@pytestmark_module
def test_module_runs_in_check_mode():
    assert exits(FixtureHost("healthy"), check_mode=True)["fit"] is True


@pytestmark_module
def test_module_without_nvidia_smi_checks_nothing():
    host = FixtureHost("healthy", tools=())
    result = exits(host)
    assert (result["checked"], result["fit"], result["findings"]) == (False, True, [])
    assert host.calls == []


@pytestmark_module
def test_module_reads_journalctl_when_kmsg_is_unreadable():
    journal = "NVRM: loading NVIDIA UNIX Open Kernel Module\nNVRM: Xid (PCI:0000:00:06): 95, pid=1, Uncontained\n"
    result = fails(FixtureHost("healthy", kmsg=False, journal=journal))
    assert result["sources"]["kernel_log"] == "journalctl -k -b"
    assert [f["id"] for f in result["findings"]] == ["xid_fatal"]


@pytestmark_module
def test_module_says_when_the_kernel_log_is_unreadable():
    result = exits(FixtureHost("healthy", kmsg=False))
    assert [f["id"] for f in result["findings"]] == ["kernel_log_unreadable"]


@pytestmark_module
def test_module_asks_systemctl_only_where_nvswitches_are():
    host = FixtureHost("healthy")
    exits(host)
    assert not [c for c in host.calls if "is-active" in c]
    fails(FixtureHost("fabric-manager-failed"))


@pytestmark_module
def test_module_result_keys_are_documented():
    documented = set(yaml.safe_load(gpu_fitness.RETURN))
    assert set(exits(FixtureHost("healthy"))) - {"changed", "warnings", "invocation"} <= documented


def test_default_fatal_list_is_one_everywhere():
    doc = yaml.safe_load(gpu_fitness.DOCUMENTATION)
    assert doc["options"]["fatal"]["default"] == fitness.DEFAULT_FATAL
    with open(os.path.join(REPO, "roles", "sglang_server", "defaults", "main.yml")) as handle:
        assert yaml.safe_load(handle)["sglang_server_fitness_fatal"] == fitness.DEFAULT_FATAL


# -- the report ---------------------------------------------------------------------------------------------------
report = _load("sglang_report", os.path.join(REPO, "roles", "sglang_report", "files", "sglang_report.py"))


@pytestmark_module
def test_report_shows_the_fitness_beside_the_load_timeline():
    result = exits(FixtureHost("xid"), {"fail_on_fatal": False})
    result["findings"][1]["message"] += " <script>alert(1)</script>"
    keys = ("checked", "fit", "findings", "driver_version", "cuda_version", "torch_cuda", "gpus")
    page, _summary = report.render(None, {"host": "gpu-01", "name": "sglang", "status": None, "loads": [],
                                          "fitness": {k: result[k] for k in keys}})
    fitness_part = page[page.index('<section class="fitness">'):page.index("<h2>Load timeline</h2>")]
    assert "Not fit to serve: 1 GPUs, driver 580.159.04 (CUDA up to 13.0), torch built with CUDA 13.0" in fitness_part
    assert fitness_part.count('<tr class="finding fatal">') == 1 and fitness_part.count('<tr class="finding warning">') == 1
    assert "Xid 79 (GPU has fallen off the bus)" in fitness_part and "<script>" not in fitness_part


def test_report_without_a_fitness_check_has_no_section():
    page, _summary = report.render(None, {"host": "gpu-01", "name": "sglang", "status": None, "loads": []})
    assert 'class="fitness"' not in page
    page, _summary = report.render(None, {"host": "h", "status": None, "loads": [],
                                          "fitness": {"checked": False, "fit": True, "findings": []}})
    assert "Not checked (no nvidia-smi on the host)." in page


class GarbledHost(FixtureHost):
    def run(self, argv):
        if argv[1:] == ["-q", "-x"]:
            return 0, "Unable to determine the device handle for GPU0000:00:06.0: Unknown Error\n", ""
        return super().run(argv)


@pytestmark_module
def test_module_fails_when_nvidia_smi_prints_no_xml():
    result = fails(GarbledHost("healthy"))
    assert result["msg"].startswith("nvidia-smi -q -x printed no XML") and "Unknown Error" in result["msg"]


def test_documented_choices_are_the_finding_ids():
    doc = yaml.safe_load(gpu_fitness.DOCUMENTATION)
    assert doc["options"]["fatal"]["choices"] == sorted(fitness.FINDINGS)
    with open(os.path.join(REPO, "roles", "sglang_server", "meta", "argument_specs.yml")) as handle:
        spec = yaml.safe_load(handle)["argument_specs"]["main"]["options"]["sglang_server_fitness_fatal"]
    assert spec["choices"] == sorted(fitness.FINDINGS) and spec["default"] == fitness.DEFAULT_FATAL


class TorchOutsideTheVenv(FixtureHost):
    """The venv has no torch of its own; its python finds one in a site dir (tests/gpu's device: /opt/torch/.venv)."""
    SITE_TORCH = "/opt/torch/.venv/lib/python3.12/site-packages/torch"

    def __init__(self, variant, found=SITE_TORCH):
        super().__init__(variant)
        self.found = found

    def glob(self, pattern):
        return [] if pattern.endswith("torch/version.py") else super().glob(pattern)

    def run(self, argv):
        if argv[:2] == [VENV_PYTHON, "-I"]:
            self.calls.append(argv)
            return (0, self.found + "\n", "") if self.found else (0, "\n", "")
        return super().run(argv)

    def read_text(self, path):
        assert path == self.SITE_TORCH + "/version.py", path
        return super().read_text(TORCH_VERSION_PY)


@pytestmark_module
def test_torch_outside_the_venv_is_found_by_its_python_without_importing_it(monkeypatch):
    exists = os.path.exists
    monkeypatch.setattr(gpu_fitness.os.path, "exists", lambda path: path == VENV_PYTHON or exists(path))
    host = TorchOutsideTheVenv("driver-old")
    result = fails(host)
    assert result["torch_cuda"] == "13.0" and result["sources"]["torch"] == host.SITE_TORCH + "/version.py"
    assert "driver_too_old" in [f["id"] for f in result["findings"]]
    (call,) = [c for c in host.calls if c[0] == VENV_PYTHON]
    assert "find_spec('torch')" in call[-1] and "import torch" not in call[-1]


@pytestmark_module
def test_no_torch_anywhere_is_a_warning_naming_where_it_looked(monkeypatch):
    exists = os.path.exists
    monkeypatch.setattr(gpu_fitness.os.path, "exists", lambda path: path == VENV_PYTHON or exists(path))
    result = exits(TorchOutsideTheVenv("driver-old", found=""))
    assert result["torch_cuda"] is None and result["sources"]["torch"].startswith("no torch in /opt/sglang/venv or")
    assert [f["id"] for f in result["findings"]] == ["torch_cuda_unknown"]


@pytestmark_module
def test_a_venv_someone_less_privileged_could_write_is_not_run_to_find_torch(monkeypatch):
    exists = os.path.exists
    monkeypatch.setattr(gpu_fitness.os.path, "exists", lambda path: path == VENV_PYTHON or exists(path))
    host = TorchOutsideTheVenv("healthy")
    host.untrusted = "/opt/sglang/venv/lib/python3.12/site-packages is writable by its group or others (mode 0777)"
    result = exits(host)
    assert not [c for c in host.calls if c[0] == VENV_PYTHON]  # not run
    assert result["torch_cuda"] is None and [f["id"] for f in result["findings"]] == ["torch_cuda_unknown"]
    assert result["sources"]["torch"].endswith("not run to find one: " + host.untrusted)
    assert any("did not run %s to find torch" % VENV_PYTHON in w and host.untrusted in w
               for w in get_warning_messages())


def _venv(tmp_path):
    """A venv's files as the install role leaves them (this user's, 0755/0644): no python is run."""
    venv = tmp_path / "venv"
    site = venv / "lib" / "python3.12" / "site-packages"
    site.mkdir(parents=True)
    (venv / "bin").mkdir()
    (venv / "bin" / "python").write_text("")
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    extra = tmp_path / "torch-site"
    extra.mkdir()
    (site / "eagle-deploy-sites.pth").write_text("# the host's torch\n%s\nimport os\n" % extra)
    for path in [tmp_path, venv, venv / "bin", venv / "lib", site.parent, site, extra]:
        path.chmod(0o755)
    return str(venv / "bin" / "python"), site, extra


def test_a_venv_only_its_owner_can_write_is_trusted(tmp_path):
    python, _site, _extra = _venv(tmp_path)
    assert gpu_fitness.why_python_untrusted(python) is None


@pytest.mark.parametrize("part", ["site", "pth", "named", "bin", "venv"])
def test_a_venv_part_others_can_write_is_named(tmp_path, part):
    python, site, extra = _venv(tmp_path)
    path = {"site": site, "pth": site / "eagle-deploy-sites.pth", "named": extra,
            "bin": tmp_path / "venv" / "bin", "venv": tmp_path / "venv"}[part]
    path.chmod(path.stat().st_mode | 0o002)
    assert gpu_fitness.why_python_untrusted(python) == "%s is writable by its group or others (mode %04o)" % (
        path, stat.S_IMODE(path.stat().st_mode))


def test_a_venv_file_of_another_user_is_named(tmp_path):
    python, site, _extra = _venv(tmp_path)
    pth = str(site / "eagle-deploy-sites.pth")

    def lstat(path):
        st = os.lstat(path)
        return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, 1000 if path == pth else st.st_uid,
                               st.st_gid, st.st_size, st.st_atime, st.st_mtime, st.st_ctime))

    st = (tmp_path / "venv").stat()
    assert st.st_uid == os.geteuid() != 1000  # the rest is this user's: trusted as the module's own
    assert gpu_fitness.why_python_untrusted(python, lstat=lstat) == "%s is owned by uid 1000, not root" % pth


def test_a_sticky_directory_above_the_venv_is_fine_but_not_the_venv_s_own(tmp_path):
    python, site, _extra = _venv(tmp_path)
    tmp_path.chmod(0o1777)  # like /tmp
    assert gpu_fitness.why_python_untrusted(python) is None
    site.chmod(0o1777)
    assert "site-packages is writable by its group or others (mode 1777)" in gpu_fitness.why_python_untrusted(python)


# /dev/kmsg records as the kernel writes them: PRIORITY,SEQ,USEC,FLAGS;MESSAGE (priority = facility * 8 + level)
KERNEL_XID = "4,1093,2345678901,-;NVRM: Xid (PCI:0000:18:00): 79, pid=0, GPU has fallen off the bus.\n"
# What `echo 'NVRM: Xid ...' > /dev/kmsg` leaves: LOG_USER (1) and the default level (<14>, or <12> as named)
FORGED = ["14,1094,2345679000,-;NVRM: Xid (PCI:0000:18:00): 79, pid=0, GPU has fallen off the bus.\n",
          "12,1095,2345679001,-;NVRM: Xid (PCI:0000:18:00): 48, pid=0, DBE\n",
          "190,1096,2345679002,-;NVRM: Xid (PCI:0000:18:00): 95, pid=0, Uncontained\n"]


def test_only_kernel_records_are_read_from_kmsg():
    assert gpu_fitness.kernel_record_line(KERNEL_XID) == KERNEL_XID.split(";", 1)[1].strip()
    assert gpu_fitness.kernel_record_line("6,5,6,c;NVRM: loading\n SUBSYSTEM=pci\n") == "NVRM: loading"
    for record in FORGED + ["NVRM: Xid (PCI:0000:18:00): 79", "x,1,2,-;NVRM: Xid (PCI:0000:18:00): 79", ""]:
        assert gpu_fitness.kernel_record_line(record) is None, record


def test_a_forged_xid_in_kmsg_is_no_finding(monkeypatch):
    records = [r.encode() for r in [FORGED[0], KERNEL_XID.replace("79,", "31,"), FORGED[1]]]
    closed = []
    monkeypatch.setattr(gpu_fitness.os, "open", lambda path, flags: 42 if path == "/dev/kmsg" else 1 / 0)

    def read(fd, size):
        assert fd == 42
        if records:
            return records.pop(0)
        raise OSError(gpu_fitness.errno.EAGAIN, "no more records")

    monkeypatch.setattr(gpu_fitness.os, "read", read)
    monkeypatch.setattr(gpu_fitness.os, "close", closed.append)
    lines = gpu_fitness.Host(None).kmsg_xid_lines()
    assert lines == ["NVRM: Xid (PCI:0000:18:00): 31, pid=0, GPU has fallen off the bus."] and closed == [42]
    assert [x["xid"] for x in fitness.parse_xids(lines)] == [31]


# -- the real check on a lent H100, in the playbook (tests/data/h200-playbook/fitness-h100, README there) ------------
GPU_PLAY = os.path.join(REPO, "tests", "data", "h200-playbook", "fitness-h100", "console")


def _task_block(console, task):
    """The lines of one task's output in a stamped console (``<stamp> <text>``), stamps dropped."""
    lines = [line.split(" ", 1)[1] if " " in line else "" for line in console.splitlines()]
    start = next(i for i, line in enumerate(lines) if line.startswith("TASK [sglang_server : %s]" % task))
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("TASK ["))
    return "\n".join(lines[start + 1:end])


def _console(name):
    with open(os.path.join(GPU_PLAY, name)) as handle:
        return handle.read()


def test_the_real_check_on_the_h100_passes_and_reads_torch_from_a_site_dir_outside_the_venv():
    block = _task_block(_console("fresh.console.txt"), "Check the host is fit to serve")
    result = yaml.safe_load(block.split("=>", 1)[1])
    assert result["fit"] is True and result["findings"] == [] and result["checked"] is True
    assert (result["driver_version"], result["cuda_version"], result["torch_cuda"]) == ("580.159.04", "13.0", "13.0")
    assert [g["name"] for g in result["gpus"]] == ["NVIDIA H100 80GB HBM3"]
    # the SGLang venv (/opt/sglang/venv-0.5.17) has no torch of its own: its python imports the device's torch from a
    # site dir (sglang_install_site_dirs, a .pth of the venv), and the check found its version.py without importing torch
    assert result["sources"]["torch"] == "/opt/torch/.venv/lib/python3.12/site-packages/torch/version.py"
    assert result["sources"]["kernel_log"] == "/dev/kmsg" and result["sources"]["fabric_manager"] == "no NVSwitch"
    assert result["elapsed"] < 1.0


def test_the_check_adds_nothing_to_the_no_op_rerun_on_the_h100():
    block = _task_block(_console("noop.console.txt"), "Check the host is fit to serve")
    assert block.lstrip().startswith("skipping: [localhost]")

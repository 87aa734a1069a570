"""library/gpu_fitness.py run as Ansible runs it (ansible ad-hoc) on this machine, with tests/gpu/fake_nvidia_smi.py
as nvidia-smi answering from the H100 capture or one of its fault variants (tests/data/nvidia-smi/h100-fitness), and a
venv holding only torch/version.py. The kernel log, /dev/shm and the limits are this machine's (a one-GPU node, so
/dev/shm and memlock are not held against it)."""
from __future__ import annotations

import os

import pytest

from ansible_run import REPO, run_module

UUID = "GPU-767d6e6e-c74d-df8f-7833-989f8fcf6618"


@pytest.fixture
def fake_host(tmp_path, monkeypatch):
    """nvidia-smi on PATH is the fake; returns the python of a venv whose torch was built with CUDA 13.0."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "nvidia-smi").symlink_to(os.path.join(REPO, "tests", "gpu", "fake_nvidia_smi.py"))
    monkeypatch.setenv("PATH", "%s:%s" % (bindir, os.environ["PATH"]))
    torch = tmp_path / "venv" / "lib" / "python3.12" / "site-packages" / "torch"
    torch.mkdir(parents=True)
    (torch / "version.py").write_text("from typing import Optional\n__version__ = '2.11.0+cu130'\n"
                                      "cuda: Optional[str] = '13.0'\n")
    return str(tmp_path / "venv" / "bin" / "python")


def test_the_healthy_capture_passes(fake_host, monkeypatch):
    monkeypatch.delenv("FAKE_NVIDIA_SMI_FITNESS", raising=False)
    result = run_module("gpu_fitness", {"python": fake_host, "gpu_count": 1})
    assert not result.get("failed"), result.get("msg")
    assert result["checked"] and result["fit"] and result["torch_cuda"] == "13.0"
    # this machine's kernel log may be unreadable to the test's user: that is a warning, nothing else is
    assert {f["id"] for f in result["findings"]} <= {"kernel_log_unreadable"}
    assert result["elapsed"] < 1.0


def test_an_ecc_fault_fails_naming_the_gpu_and_the_fix(fake_host, monkeypatch):
    monkeypatch.setenv("FAKE_NVIDIA_SMI_FITNESS", "ecc")
    result = run_module("gpu_fitness", {"python": fake_host, "gpu_count": 1})
    assert result["failed"] and not result["fit"]
    assert "FATAL GPU 0 (%s): 2 uncorrectable ECC errors" % UUID in result["msg"]
    assert "`nvidia-smi -r -i 0`" in result["msg"]

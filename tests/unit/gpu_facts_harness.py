"""What the gpu_facts tests share (tests/unit/test_gpu_facts.py, tests/integration/test_gpu_facts_processes.py):
the module loaded from library/, a fake clock, nvidia-smi cases built from the captured H200 outputs
(tests/data/nvidia-smi), and main() driven with module args."""
from __future__ import annotations

import importlib.util
import os
import shutil

import pytest

from ansible.module_utils.testing import patch_module_args
from module_harness import ExitJson, FailJson

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(REPO, "tests", "data", "nvidia-smi")

_spec = importlib.util.spec_from_file_location("gpu_facts", os.path.join(REPO, "library", "gpu_facts.py"))
gpu_facts = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_facts)

CAPTURED_PID = 562  # the holder PID in h200-busy
TREE_PIDS = (811, 815)  # holder and its child in h200-busy-tree
H200_UUID = "GPU-8d9a908f-8223-a2b4-18a6-444d8fbdb0d2"


def case_dir(case):
    return case if os.path.isabs(case) else os.path.join(FIXTURES, case)


class FakeClock:
    def __init__(self):
        self.now = 100.0
        self.sleeps = []

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


def case_from(tmp_path, name, sources, pids):
    """A case dir built from captured ones: query-gpu from the first source, compute-apps lines of all sources,
    with captured PIDs replaced through `pids` ({captured: real})."""
    target = tmp_path / name
    target.mkdir()
    first = os.path.join(FIXTURES, sources[0])
    for fname in os.listdir(first):
        if fname.startswith("query-gpu."):
            shutil.copy(os.path.join(first, fname), str(target / fname))
    lines = []
    for source in sources:
        with open(os.path.join(FIXTURES, source, "query-compute-apps.stdout")) as handle:
            for line in handle.read().splitlines():
                pid, rest = line.split(",", 1)
                lines.append("%s,%s" % (pids.get(int(pid), pid), rest))
    (target / "query-compute-apps.stdout").write_text("".join(line + "\n" for line in lines))
    return str(target)


def run_module(args=None, clock=None):
    fake = clock or FakeClock()
    with patch_module_args(args or {}):
        gpu_facts.main(clock=fake.clock, sleep=fake.sleep)


def exits(args=None, clock=None):
    with pytest.raises(ExitJson) as info:
        run_module(args, clock)
    return info.value.args[0]


def fails(args=None, clock=None):
    with pytest.raises(FailJson) as info:
        run_module(args, clock)
    return info.value.args[0]


def unused_pid():
    with open("/proc/sys/kernel/pid_max") as handle:
        return int(handle.read()) + 1


def fixture_fields(case, kind):
    with open(os.path.join(FIXTURES, case, kind + ".stdout")) as handle:
        return [[f.strip() for f in line.split(",")] for line in handle.read().splitlines() if line.strip()]

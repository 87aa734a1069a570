#!/usr/bin/env python3
"""Runs library/gpu_fitness.py's check on a GPU machine that has no Ansible (a lent one): the module's own Host port and
FitnessCheck, with a stand-in for AnsibleModule (get_bin_path, run_command with argv lists, warn) and the project's
module_utils under ansible.module_utils. Prints the result as JSON and the check's elapsed seconds.

    python3 tests/gpu/fitness_on_gpu.py [GPU_COUNT]

torch's CUDA comes from the torch this python finds (its version.py, read as text: torch is not imported)."""
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import types

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))


class StandInModule:
    def __init__(self, params):
        self.params = params
        self.warnings = []

    def get_bin_path(self, name):
        return shutil.which(name)

    def run_command(self, argv):
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        return proc.returncode, proc.stdout, proc.stderr

    def warn(self, text):
        self.warnings.append(text)

    def fail_json(self, **result):
        print(json.dumps(result, indent=1))
        sys.exit(1)


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def venv_python_with_torch(top):
    """A venv-shaped directory whose site-packages holds a link to the torch this python finds."""
    spec = importlib.util.find_spec("torch")
    if spec is None:
        return None
    site = os.path.join(top, "lib", "python%d.%d" % sys.version_info[:2], "site-packages")
    os.makedirs(site)
    os.symlink(list(spec.submodule_search_locations)[0], os.path.join(site, "torch"))
    return os.path.join(top, "bin", "python")


def main(argv):
    basic = types.ModuleType("ansible.module_utils.basic")
    basic.AnsibleModule = object
    for name in ("ansible", "ansible.module_utils"):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules["ansible.module_utils.basic"] = basic
    fitness = load("ansible.module_utils.sglang_host_fitness", os.path.join(REPO, "module_utils", "sglang_host_fitness.py"))
    sys.modules["ansible.module_utils"].sglang_host_fitness = fitness
    gpu_fitness = load("gpu_fitness", os.path.join(REPO, "library", "gpu_fitness.py"))
    with tempfile.TemporaryDirectory() as top:
        params = {"python": venv_python_with_torch(top), "gpu_count": int(argv[0]) if argv else 1, "multi_node": False,
                  "min_shm_mib": 1024, "min_memlock_mib": 65536, "fatal": fitness.DEFAULT_FATAL}
        module = StandInModule(params)
        started = time.monotonic()
        result = gpu_fitness.FitnessCheck(module, gpu_fitness.Host(module)).run()
        wall = time.monotonic() - started
    result["wall_s"] = round(wall, 3)
    print(json.dumps(result, indent=1))
    for finding in result["findings"]:
        print(fitness.finding_line(finding))
    return 0 if result["fit"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

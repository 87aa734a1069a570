#!/usr/bin/env python3
"""A stand-in `nvidia-smi` for dry runs of the GPU scripts on a machine without a GPU.

Install as `nvidia-smi` on PATH. It shows one "NVIDIA H200" whose used memory is 0 MiB plus, for every live
process running tests/gpu/holder.py, its --gib (default 20) in MiB (+ 500 MiB of context), and lists those
processes as compute apps. Understands the two --query-* forms gpu_facts uses, `-i N` and `-q`.

For gpu_fitness it answers `-q -x` and `nvlink -s` from the H100 capture (tests/data/nvidia-smi/h100-80gb-hbm3), or
from the fault variant FAKE_NVIDIA_SMI_FITNESS names (a folder of tests/data/nvidia-smi/h100-fitness: the files it
changes, the capture's for the rest). Molecule's `default` scenario installs it as eagle-default-1's nvidia-smi
(molecule/default/prepare.yml).
"""
import os
import sys

UUID = "GPU-00000000-fake-fake-fake-000000000000"
TOTAL = 143771


def holders():
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % name, "rb") as handle:
                argv = handle.read().decode(errors="replace").split("\0")
            with open("/proc/%s/stat" % name) as handle:
                state = handle.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state == "Z" or not any(a.endswith("holder.py") for a in argv):
            continue
        gib = float(argv[argv.index("--gib") + 1]) if "--gib" in argv else 20.0
        found.append((int(name), argv[0], int(gib * 1024) + 500))
    return found


SMI_DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(__file__))), "data", "nvidia-smi")


def fitness_fixture(name):
    variant = os.environ.get("FAKE_NVIDIA_SMI_FITNESS", "")
    for folder in ([os.path.join(SMI_DATA, "h100-fitness", variant)] if variant else []) + [
            os.path.join(SMI_DATA, "h100-80gb-hbm3")]:
        path = os.path.join(folder, name)
        if os.path.exists(path):
            with open(path) as handle:
                return handle.read()
    return ""


def main(argv):
    if argv[:2] == ["-q", "-x"]:
        sys.stdout.write(fitness_fixture("q.xml"))
        return 0
    if argv[:2] == ["nvlink", "-s"]:
        sys.stdout.write(fitness_fixture("nvlink-s.txt"))
        return 0
    procs = holders()
    used = sum(mib for _pid, _name, mib in procs)
    if "-q" in argv:
        print("==============NVSMI LOG==============\n\nDriver Version : fake\nAttached GPUs : 1")
        return 0
    for arg in argv:
        if arg.startswith("--query-gpu="):
            fields = arg.split("=", 1)[1].split(",")
            values = {"index": "0", "uuid": UUID, "name": "NVIDIA H200", "memory.total": str(TOTAL),
                      "memory.used": str(used), "memory.free": str(TOTAL - used - 520)}
            print(", ".join(values[f] for f in fields))
            return 0
        if arg.startswith("--query-compute-apps="):
            for pid, name, mib in procs:
                print("%d, %s, %s, %d" % (pid, name, UUID, mib))
            return 0
    sys.stderr.write("fake nvidia-smi: unsupported arguments %s\n" % argv)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Helpers shared by the tests: run a module the way Ansible runs it (ansible ad-hoc, JSON callback),
and find a free loopback port."""
from __future__ import annotations

import atexit
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
EMULATOR = os.path.join(REPO, "tests", "emulator", "sglang-emulator")  # the emulator package, run from the tree
TARGET_PYTHON = shutil.which("python3", path="/usr/bin") or sys.executable


_PROGRAMS = {}


def installed_program(module):
    """The program ``module`` runs (the supervisor, the model fetch program), installed once per test process as its
    role does, in a private directory of its own (0700 above it): the tests that call a module directly play the
    role's part (tasks/program.yml)."""
    if module not in _PROGRAMS:
        from installed_programs import FETCH, SUPERVISOR, install
        top = tempfile.mkdtemp(prefix="eagle-deploy-programs-")
        atexit.register(shutil.rmtree, top, True)
        _PROGRAMS[module] = install(SUPERVISOR if module == "wait_for_model" else FETCH, os.path.join(top, module))
    return _PROGRAMS[module]


def run_module(module, args, check=False, timeout=300, python=TARGET_PYTHON):
    if module == "wait_for_model" and "launcher" not in args:
        # these tests run servers as this machine's processes: never as a systemd unit of the test machine
        args = dict(args, launcher="detached")
    if module in ("wait_for_model", "sglang_model") and "program_dir" not in args:
        args = dict(args, program_dir=installed_program(module))
    env = dict(os.environ)
    env.update({
        "ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg"),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
        "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
        "ANSIBLE_LIBRARY": os.path.join(REPO, "library"),
        "ANSIBLE_MODULE_UTILS": os.path.join(REPO, "module_utils"),
        "PATH": BIN + os.pathsep + env.get("PATH", ""),
    })
    cmd = [os.path.join(BIN, "ansible"), "localhost", "-i", "localhost,", "-c", "local",
           "-e", "ansible_python_interpreter=%s" % python, "-m", module, "-a", json.dumps(args)]
    if check:
        cmd.append("--check")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=timeout, check=False)
    try:
        out = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError("ansible printed no JSON (rc=%s):\n%s\n%s" % (proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:]))
    result = out["plays"][0]["tasks"][0]["hosts"]["localhost"]
    return result


def free_port():
    """A TCP port nothing listens on right now (the kernel picks it; we release it at once)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def install_sglang_files(site, version="0.5.23",
                         members=("sglang/srt/speculative/eagle_worker_v2.py", "sglang/srt/managers/scheduler.py")):
    """An 'installed' sglang package dir under ``site`` (a pathlib.Path) holding ``members`` of the real SGLang
    wheel ``version`` from the tests' wheel cache (tests/unit/sglang_src.py; never downloaded here): what the
    emulator's eagle scenario reads. Returns the package dir."""
    import zipfile
    sys.path.insert(0, os.path.join(REPO, "tests", "unit"))
    import sglang_src
    with zipfile.ZipFile(sglang_src.wheel_path(version)) as wheel:
        for member in members:
            target = site / member
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(wheel.read(member))
    return site / "sglang"


def gone(pid):
    """Whether the process has ended (gone, or a zombie nobody reaped yet)."""
    try:
        with open("/proc/%d/stat" % pid) as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


class Play:
    """One ansible-playbook run with the json stdout callback: its rc, seconds, and each host's task results."""

    def __init__(self, proc, elapsed):
        self.rc = proc.returncode
        self.elapsed = elapsed
        try:
            self.out = json.loads(proc.stdout)
        except ValueError:
            raise AssertionError("no JSON from ansible-playbook (rc=%s):\n%s\n%s"
                                 % (proc.returncode, proc.stdout[-4000:], proc.stderr[-4000:]))

    def results(self, host):
        """(task name without the role prefix, result) of every task that ran on ``host``, in order."""
        return [(t["task"]["name"].split(" : ", 1)[-1], t["hosts"][host])
                for play in self.out["plays"] for t in play["tasks"] if host in t["hosts"]]

    def result(self, host, name):
        found = [r for n, r in self.results(host) if n == name]
        assert found, "%s: task %r did not run: %s" % (host, name, [n for n, _ in self.results(host)])
        return found[-1]

    def failures(self):
        return {host: r.get("msg", "") for play in self.out["plays"] for t in play["tasks"]
                for host, r in t["hosts"].items() if r.get("failed") and not r.get("ignore_errors")}

    def __repr__(self):
        return "rc=%s failures=%s stats=%s" % (self.rc, self.failures(), self.out.get("stats"))


def local_hosts(kind, names):
    """A work dir (``eagle-deploy-<kind>-*``) with a prefix and a free port per host name, for inventory hosts of this
    machine (local connection): (workdir, {name: {"prefix", "port"}}). The service user walks into the prefixes."""
    workdir = tempfile.mkdtemp(prefix="eagle-deploy-%s-" % kind)
    os.chmod(workdir, 0o755)
    hosts = {}
    for name in names:
        prefix = os.path.join(workdir, name)
        os.mkdir(prefix)
        os.chmod(prefix, 0o755)
        hosts[name] = {"prefix": prefix, "port": free_port()}
    return workdir, hosts


def write_inventory(path, servers):
    """An inventory at ``path`` whose group ``sglang_servers`` is ``servers`` (its body: ``{"hosts": ...}`` or
    ``{"children": ...}``), with inventory/local's group vars (the rehearsal settings)."""
    os.makedirs(path, exist_ok=True)
    link = os.path.join(path, "group_vars")
    if not os.path.islink(link):
        os.symlink(os.path.join(REPO, "inventory", "local", "group_vars"), link)
    with open(os.path.join(path, "hosts.yml"), "w") as handle:
        json.dump({"all": {"children": {"sglang_servers": servers}}}, handle, indent=1)


def run_playbook(playbook, inventory, *extra, timeout=600):
    """``ansible-playbook playbooks/<playbook> -i <inventory> <extra>`` from the repo with the json callback: a Play."""
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""),
               ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_NOCOLOR="1")
    cmd = [os.path.join(BIN, "ansible-playbook"), os.path.join("playbooks", playbook), "-i", inventory] + list(extra)
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    done = Play(proc, time.monotonic() - start)
    print("%s %s: %.1f s, rc=%s" % (playbook, " ".join(extra[:1]), done.elapsed, done.rc))
    return done

#!/usr/bin/env python3
"""How a converge scales with the number of hosts: the real serve playbook on N = 1, 4, 16 hosts at once.

Each host is an inventory host on this machine (local connection) with a prefix and a port of its own and the group
vars of inventory/local (real SGLang 0.5.23 files installed --no-deps, really patched, the SGLang EMULATOR as the
server, its load 1 s, one TP rank: `-e sglang_server_tp_size=1`, so that N servers cost this machine N schedulers, not
8 N). For each N, from bare: `ansible-playbook playbooks/serve_eagle3.yml` (install, patch, start, smoke on every host;
timed), then one unchanged re-run (timed), then stop.yml and the prefixes removed (unless stop.yml failed: then the
prefixes, which hold the run state that finds the servers, are left and the error printed).

What it measures: the wall time of converging N hosts from one controller. Here the N hosts are also this one machine,
so their own work (pip unpacking and compiling SGLang's 2,000 files, the modules, the servers) shares its cores;
on a fleet each host brings its own. For each run it prints the CPU seconds of the playbook's process tree (the
controller, its forks and every module and command they ran; the detached servers are not in it), the floor that CPU
alone puts under the wall time on this machine (cpu_s / cores), the CPU of the controller's main process alone (the
strategy, the results, one fork per task and host: what stays serial whatever `forks` is; read from /proc every 0.1 s),
and how busy the whole machine was (from /proc/stat, other work on it included). A wall time near its floor means the
hosts ran in parallel and the machine's cores were the limit; a wall time far above it, with the machine idle, would
mean serial work.

Prints figures; asserts nothing. Last line exactly: scale_16_over_1=<f> (converge from bare, N=16 over N=1, measured in
the same run).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)


def free_ports(count):
    """Ports nothing listens on (all bound at once, so they differ; released before use)."""
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            socks.append(sock)
        return [s.getsockname()[1] for s in socks]
    finally:
        for sock in socks:
            sock.close()


def machine_busy():
    """(busy, total) jiffies of all CPUs since boot, from /proc/stat."""
    with open("/proc/stat") as handle:
        fields = [int(x) for x in handle.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


def children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def own_cpu(pid):
    """utime + stime of the process itself (its children not counted), from /proc/<pid>/stat; None once gone."""
    try:
        with open("/proc/%d/stat" % pid) as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / float(os.sysconf("SC_CLK_TCK"))


def own_cpu_until_exit(proc, every=0.1):
    """The CPU the process used itself, read every ``every`` seconds until it exits (the last look's figure: at most
    ``every`` seconds of its CPU are missed)."""
    last = 0.0
    while proc.poll() is None:
        seen = own_cpu(proc.pid)
        if seen is not None:
            last = seen
        time.sleep(every)
    return last


class Run(object):
    """One ansible-playbook run: wall s; CPU s of its whole process tree (controller, forks, every module and command
    they ran; detached servers not counted); CPU s of the controller's main process alone (the strategy, the results,
    a fork per task and host: the part that is serial whatever forks is); busy fraction of the machine; its output."""

    def __init__(self, wall, cpu, main_cpu, busy, out):
        self.wall, self.cpu, self.main_cpu, self.busy, self.out = wall, cpu, main_cpu, busy, out

    def changed(self):
        return sum(s["changed"] for s in self.out["stats"].values())

    def line(self, n, kind, cores):
        return ("n=%d %s_s=%.1f cpu_s=%.1f cpu_floor_s=%.1f controller_main_cpu_s=%.1f machine_busy=%.2f changed=%d"
                % (n, kind, self.wall, self.cpu, self.cpu / cores, self.main_cpu, self.busy, self.changed()))


class Fleet:
    """N local hosts, each with its prefix and port, in an inventory that takes inventory/local's group vars."""

    def __init__(self, n, forks):
        self.n = n
        self.forks = forks
        self.workdir = tempfile.mkdtemp(prefix="eagle-deploy-scale-%d-" % n)
        os.chmod(self.workdir, 0o755)  # the service user walks into the prefixes below it
        hosts = {}
        for i, port in enumerate(free_ports(n), 1):
            prefix = os.path.join(self.workdir, "host%02d" % i)
            os.mkdir(prefix)
            os.chmod(prefix, 0o755)
            hosts["host%02d" % i] = {"ansible_connection": "local",
                                     "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                                     "eagle_deploy_prefix": prefix, "sglang_server_port": port}
        inventory = os.path.join(self.workdir, "inventory")
        os.mkdir(inventory)
        os.symlink(os.path.join(REPO, "inventory", "local", "group_vars"), os.path.join(inventory, "group_vars"))
        with open(os.path.join(inventory, "hosts.yml"), "w") as handle:
            json.dump({"all": {"children": {"sglang_servers": {"hosts": hosts}}}}, handle, indent=1)
        self.inventory = inventory
        self.env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
                        PATH=BIN + os.pathsep + os.environ.get("PATH", ""))

    def play(self, playbook, *extra):
        """A Run of ansible-playbook on the fleet (raises RuntimeError when it fails)."""
        cmd = [os.path.join(BIN, "ansible-playbook"), os.path.join("playbooks", playbook), "-i", self.inventory,
               "-e", "sglang_server_tp_size=1"] + (["--forks", str(self.forks)] if self.forks else []) + list(extra)
        cpu0, (busy0, total0), t0 = children_cpu(), machine_busy(), time.monotonic()
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            proc = subprocess.Popen(cmd, cwd=REPO, env=self.env, stdout=out, stderr=err)
            main_cpu = own_cpu_until_exit(proc)
            wall, cpu, (busy1, total1) = time.monotonic() - t0, children_cpu() - cpu0, machine_busy()
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
        if proc.returncode != 0:
            raise RuntimeError("%s on %d hosts failed (rc=%d):\n%s\n%s" % (
                playbook, self.n, proc.returncode, stdout[-3000:], stderr[-3000:]))
        return Run(wall, cpu, main_cpu, (busy1 - busy0) / float(max(1, total1 - total0)), json.loads(stdout))

    def stop(self):
        try:
            self.play("stop.yml")
        except RuntimeError as exc:
            # The run state in the prefixes is what finds the servers: deleting it would orphan them.
            print("stop.yml failed; %s is left in place with the servers' run state, stop them with: "
                  "ansible-playbook playbooks/stop.yml -i %s\n%s" % (self.workdir, self.inventory, exc), file=sys.stderr)
            return
        shutil.rmtree(self.workdir, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1,4,16", help="host counts, comma-separated (default 1,4,16)")
    ap.add_argument("--forks", type=int, default=None, help="ansible-playbook --forks (default: ansible.cfg's)")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    cores = os.cpu_count() or 1
    print("cores=%d forks=%s (the playbook's process tree: controller, forks, modules; servers not counted)"
          % (cores, args.forks or "ansible.cfg"))
    converge, noop = {}, {}
    for n in sizes:
        fleet = Fleet(n, args.forks)
        try:
            run = fleet.play("serve_eagle3.yml")
            converge[n] = run.wall
            print(run.line(n, "converge", cores), flush=True)
            run = fleet.play("serve_eagle3.yml")
            noop[n] = run.wall
            print(run.line(n, "noop", cores), flush=True)
        finally:
            fleet.stop()
    first, last = sizes[0], sizes[-1]
    print("noop_%d_over_%d=%.2f" % (last, first, noop[last] / noop[first]))
    print("scale_%d_over_%d=%.2f" % (last, first, converge[last] / converge[first]))


if __name__ == "__main__":
    main()

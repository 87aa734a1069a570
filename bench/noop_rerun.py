#!/usr/bin/env python3
"""Cost of a no-op re-run: the real serve playbook on the local rehearsal inventory, unchanged.

Converges `playbooks/serve_eagle3.yml -i inventory/local` once into its own prefix and port (the first
run installs and starts the server; not timed), then times N unchanged re-runs against N runs of an
empty play on the same inventory in the same process (ansible's start-up cost), alternating the two so
that machine noise hits both alike; stops the server at the end and removes the prefix, unless stop.yml
failed (then the prefix, which holds the run state that finds the server, is left and the error printed).
Also times, alternated with those, a play of two `ansible.builtin.ping` tasks (the floor of a no-op of two module
calls, whatever the modules do). Prints figures; asserts nothing.
Second-last line: two_pings_over_empty=<f> two_pings_s=<f>
Last line exactly: noop_over_empty=<f> noop_s=<f> tasks=<n> module_calls=<n>
(tasks: the tasks that ran, skipped ones not counted; module_calls: those of them that ran a module on the host,
the tasks the controller answers alone (assert, debug, include_tasks, argument validation, ...) not counted.)
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)
# Actions that run on the controller only: no module call on the host.
CONTROLLER_ONLY = frozenset("ansible.builtin." + a for a in (
    "assert", "debug", "fail", "set_fact", "meta", "include_tasks", "import_tasks", "include_role", "validate_argument_spec"))
EMPTY_PLAY = "- name: Empty play\n  hosts: sglang_servers\n  gather_facts: false\n  tasks: []\n"
TWO_PINGS = ("- name: Two module calls and nothing else\n  hosts: sglang_servers\n  gather_facts: false\n  tasks:\n"
             "    - name: One\n      ansible.builtin.ping:\n    - name: Two\n      ansible.builtin.ping:\n")


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=5, help="timed re-runs of each kind (default 5)")
    args = ap.parse_args()
    prefix = tempfile.mkdtemp(prefix="eagle-deploy-noop-")
    os.chmod(prefix, 0o755)  # the service user walks into the prefix
    port = free_port()
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               PATH=BIN + os.pathsep + os.environ.get("PATH", ""))
    empty = os.path.join(prefix, "empty.yml")
    with open(empty, "w") as f:
        f.write(EMPTY_PLAY)
    pings = os.path.join(prefix, "two_pings.yml")
    with open(pings, "w") as f:
        f.write(TWO_PINGS)

    def play(playbook):
        cmd = [os.path.join(BIN, "ansible-playbook"), playbook, "-i", "inventory/local",
               "-e", "eagle_deploy_prefix=%s" % prefix, "-e", "sglang_server_port=%d" % port]
        t0 = time.monotonic()
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, check=False)
        elapsed = time.monotonic() - t0
        if proc.returncode != 0:
            raise SystemExit("%s failed (rc=%d):\n%s\n%s" % (playbook, proc.returncode, proc.stdout[-3000:],
                                                              proc.stderr[-3000:]))
        out = json.loads(proc.stdout)
        tasks = [t for p in out["plays"] for t in p["tasks"]]
        changed = [t["task"]["name"] for t in tasks if any(h.get("changed") for h in t["hosts"].values())]
        ran = [h for t in tasks for h in t["hosts"].values() if not h.get("skipped")]
        calls = [h for h in ran if h.get("action") not in CONTROLLER_ONLY]
        return elapsed, (len(ran), len(calls)), changed

    try:
        first, _, _ = play("playbooks/serve_eagle3.yml")
        print("converge_s=%.2f (not timed below)" % first)
        noop, empty_s, pings_s, tasks, calls = [], [], [], 0, 0
        for i in range(args.n):
            t, (tasks, calls), changed = play("playbooks/serve_eagle3.yml")
            if changed:
                raise SystemExit("re-run %d was not a no-op: changed %s" % (i + 1, changed))
            noop.append(t)
            empty_s.append(play(empty)[0])
            pings_s.append(play(pings)[0])
            print("run %d: noop_s=%.2f empty_s=%.2f two_pings_s=%.2f tasks=%d module_calls=%d"
                  % (i + 1, noop[-1], empty_s[-1], pings_s[-1], tasks, calls))
        med_noop, med_empty, med_pings = statistics.median(noop), statistics.median(empty_s), statistics.median(pings_s)
        print("two_pings_over_empty=%.2f two_pings_s=%.2f" % (med_pings / med_empty, med_pings))
        print("noop_over_empty=%.2f noop_s=%.2f tasks=%d module_calls=%d" % (med_noop / med_empty, med_noop, tasks, calls))
    finally:
        stop = subprocess.run([os.path.join(BIN, "ansible-playbook"), "playbooks/stop.yml", "-i", "inventory/local",
                               "-e", "eagle_deploy_prefix=%s" % prefix, "-e", "sglang_server_port=%d" % port],
                              cwd=REPO, env=env, capture_output=True, text=True, check=False)
        if stop.returncode == 0:
            shutil.rmtree(prefix, ignore_errors=True)
        else:
            # The run state in the prefix is what finds our server: deleting it would orphan the server.
            print("stop.yml failed (rc=%d); the prefix %s is left in place with its server's run state, stop it "
                  "with: ansible-playbook playbooks/stop.yml -i inventory/local -e eagle_deploy_prefix=%s\n%s\n%s"
                  % (stop.returncode, prefix, prefix, stop.stdout[-3000:], stop.stderr[-3000:]), file=sys.stderr)


if __name__ == "__main__":
    main()

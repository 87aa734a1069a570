"""Looks at (and, where asked, acts on) a test host of scenario `systemd`, from inside it. TEST CODE.

cases.py feeds this file to the host's python3 on stdin (`podman exec -i HOST python3 - COMMAND ...`); it prints
one JSON document per line. Standard library only (the host has python3 and systemd, nothing else of ours).

  show UNIT                                  the unit's properties (PROPS)
  sample UNIT PORT TIMEOUT COND...           every 0.5 s: the unit's properties, then GET /health_generate on
                                             127.0.0.1:PORT (read after the unit: `active` then a health code),
                                             until every COND holds (KEY=VALUE, KEY!=VALUE, KEY~SUBSTRING) or
                                             TIMEOUT s passed; a line per sample, the last one has "until": bool
  tree UNIT                                  the processes of the unit (its cgroup, else MainPID's descendants)
  schedulers UNIT                            the emulator's scheduler processes in the unit
  kill-scheduler UNIT                        SIGKILL to the first scheduler of the unit's server
  module                                     the Ansible module process(es) now running under an sshd session
  drop-ssh                                   SIGKILL to the sshd session process of every connection running a module
  alive PID:START...                         which of these processes (PID and start time) still exist
  journal UNIT                               the unit's journal of this boot (the last 200 lines)
  listening PORT                             whether a TCP socket listens on PORT (/proc/net/tcp, tcp6)
  health-delay PORT SECONDS COUNT            the emulator's test control POST /emulator/health_delay on
                                             127.0.0.1:PORT: its next COUNT health requests take SECONDS s

A sample with PORT 0 asks no health (health_generate: null): a probe request would wait out a health delay.
"""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

PROPS = ("ActiveState", "SubState", "Result", "StatusText", "MainPID", "InvocationID", "NRestarts", "ExecMainStatus",
         "ExecMainCode", "UnitFileState", "ControlGroup", "StartLimitBurst", "StartLimitIntervalUSec", "Restart",
         "RestartPreventExitStatus", "Type", "FragmentPath", "ActiveEnterTimestampMonotonic", "KillMode",
         "TimeoutStartUSec", "User", "NeedDaemonReload")


def show(unit):
    out = subprocess.run(["systemctl", "show", unit, "-p", ",".join(PROPS)], stdout=subprocess.PIPE,
                         universal_newlines=True, check=False).stdout
    props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    for key in ("MainPID", "NRestarts", "ExecMainStatus", "StartLimitBurst", "ActiveEnterTimestampMonotonic"):
        if props.get(key, "").isdigit():
            props[key] = int(props[key])
    return props


def health(port):
    """Status of GET /health_generate (0: no answer: refused, reset or timed out; None: port 0, not asked)."""
    if not port:
        return None
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/health_generate" % port, timeout=5) as resp:
            return resp.status
    except urllib.error.HTTPError as e:
        return e.code
    except (OSError, ValueError):
        return 0


def health_delay(port, seconds, count):
    """The emulator's test control (the emulator only, NOT SGLang): its next `count` health requests sleep first."""
    body = json.dumps({"seconds": seconds, "count": count}).encode()
    req = urllib.request.Request("http://127.0.0.1:%d/emulator/health_delay" % port, data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return {"status": resp.status, "body": json.loads(resp.read().decode()), "at": time.time()}


def holds(sample, cond):
    for op in ("!=", "=", "~"):
        if op in cond:
            key, value = cond.split(op, 1)
            have = str(sample.get(key, ""))
            return {"=": have == value, "!=": have != value, "~": value in have}[op]
    raise SystemExit("bad condition %r" % cond)


def sample(unit, port, timeout, conds):
    t0 = time.monotonic()
    while True:
        s = show(unit)
        s["health_generate"] = health(port)
        s["t"] = round(time.monotonic() - t0, 2)
        done = all(holds(s, c) for c in conds)
        if done or s["t"] > timeout:
            s["until"] = done
            print(json.dumps(s), flush=True)
            return
        print(json.dumps(s), flush=True)
        time.sleep(0.5)


def proc(pid):
    try:
        with open("/proc/%d/stat" % pid, "rb") as fh:
            stat = fh.read().decode("utf-8", "replace")
        with open("/proc/%d/cmdline" % pid, "rb") as fh:
            argv = [a.decode("utf-8", "replace") for a in fh.read().split(b"\0") if a]
        uid = os.stat("/proc/%d" % pid).st_uid
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return {"pid": pid, "ppid": int(fields[1]), "state": fields[0], "start_time": int(fields[19]), "uid": uid,
            "comm": stat[stat.index("(") + 1:stat.rindex(")")], "argv": argv}


def procs():
    return [p for p in (proc(int(d)) for d in os.listdir("/proc") if d.isdigit()) if p]


def cgroup_pids(cgroup):
    """Every PID in the unit's cgroup and below it (cgroup v2, or the hybrid/v1 hierarchies systemd keeps)."""
    for root in ("/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd", "/sys/fs/cgroup"):
        top = root + cgroup
        if os.path.isfile(os.path.join(top, "cgroup.procs")):
            pids = set()
            for dirpath, _dirs, files in os.walk(top):
                if "cgroup.procs" in files:
                    with open(os.path.join(dirpath, "cgroup.procs")) as fh:
                        pids.update(int(x) for x in fh.read().split())
            return {"cgroup": top, "pids": sorted(pids)}
    return {"cgroup": None, "pids": []}


def descendants(table, root):
    members = {root}
    grew = True
    while grew:
        grew = False
        for p in table:
            if p["pid"] not in members and p["ppid"] in members:
                members.add(p["pid"])
                grew = True
    return [p for p in table if p["pid"] in members]


def tree(unit):
    props = show(unit)
    table = procs()
    cg = cgroup_pids(props.get("ControlGroup") or "/nonexistent") if props.get("ControlGroup") else \
        {"cgroup": None, "pids": []}
    by_pid = {p["pid"]: p for p in table}
    members = [by_pid[pid] for pid in cg["pids"] if pid in by_pid]
    if not members and props.get("MainPID"):
        members = descendants(table, props["MainPID"])
    return {"unit": props, "cgroup": cg["cgroup"], "procs": members}


def schedulers(unit):
    """The emulator's schedulers: the leader's multiprocessing `spawn` children after the first (the emulator starts
    the detokenizer first, then one scheduler per TP rank: engine.start_children), in start order."""
    t = tree(unit)
    spawned = sorted((p for p in t["procs"] if any("spawn_main" in a for a in p["argv"])),
                     key=lambda p: (p["start_time"], p["pid"]))
    by_parent = {}
    for p in spawned:
        by_parent.setdefault(p["ppid"], []).append(p)
    found = []
    for kids in by_parent.values():
        found.extend(kids[1:])
    return {"unit": t["unit"], "schedulers": sorted(found, key=lambda p: (p["start_time"], p["pid"])),
            "spawned": spawned}


def kill_scheduler(unit):
    s = schedulers(unit)
    if not s["schedulers"]:
        return {"killed": None, "unit": s["unit"], "spawned": s["spawned"]}
    victim = s["schedulers"][0]
    os.kill(victim["pid"], signal.SIGKILL)
    return {"killed": victim, "unit": s["unit"], "at": time.time()}


def modules():
    """Processes running an Ansible module for a connection: python descendants of an sshd session (the sshd
    processes below the listener), with that session's sshd processes."""
    table = procs()
    by_pid = {p["pid"]: p for p in table}
    found = []
    for p in table:
        if not p["argv"] or "python" not in os.path.basename(p["argv"][0]) or p["pid"] == os.getpid():
            continue
        chain, q = [], by_pid.get(p["ppid"])
        while q is not None and q["pid"] > 1:
            chain.append(q)
            q = by_pid.get(q["ppid"])
        sessions = [c for c in chain if c["comm"] == "sshd" and not any("[listener]" in a for a in c["argv"])
                    and not any(a.startswith("/usr/sbin/sshd") for a in c["argv"])]
        if sessions:
            found.append({"module": p, "sshd": sessions})
    return found


def drop_ssh():
    found = modules()
    killed = []
    for f in found:
        for s in f["sshd"]:
            if s["pid"] not in killed:
                os.kill(s["pid"], signal.SIGKILL)
                killed.append(s["pid"])
    return {"modules": found, "killed_sshd": killed, "at": time.time()}


def alive(specs):
    out = {}
    for spec in specs:
        pid, start = (int(x) for x in spec.split(":"))
        p = proc(pid)
        out[spec] = bool(p and p["start_time"] == start and p["state"] != "Z")
    return out


def listening(port):
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as fh:
                rows = fh.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                return True
    return False


def main(argv):
    cmd = argv[0]
    if cmd == "show":
        print(json.dumps(show(argv[1])))
    elif cmd == "sample":
        sample(argv[1], int(argv[2]), float(argv[3]), argv[4:])
    elif cmd == "tree":
        print(json.dumps(tree(argv[1])))
    elif cmd == "schedulers":
        print(json.dumps(schedulers(argv[1])))
    elif cmd == "kill-scheduler":
        print(json.dumps(kill_scheduler(argv[1])))
    elif cmd == "module":
        print(json.dumps(modules()))
    elif cmd == "drop-ssh":
        print(json.dumps(drop_ssh()))
    elif cmd == "alive":
        print(json.dumps(alive(argv[1:])))
    elif cmd == "journal":
        out = subprocess.run(["journalctl", "-b", "-u", argv[1], "-n", "200", "--no-pager", "-o", "short-monotonic"],
                             stdout=subprocess.PIPE, universal_newlines=True, check=False).stdout
        print(json.dumps(out.splitlines()))
    elif cmd == "health-delay":
        print(json.dumps(health_delay(int(argv[1]), float(argv[2]), int(argv[3]))))
    elif cmd == "listening":
        print(json.dumps(listening(int(argv[1]))))
    else:
        raise SystemExit("unknown command %r" % cmd)


if __name__ == "__main__":
    main(sys.argv[1:])

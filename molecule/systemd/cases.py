#!/usr/bin/env python3
"""The ordered cases of scenario `systemd` (TEST CODE), run on the controller by side_effect.yml.

Each case acts on the test host as an operator or a fault would (ansible-playbook over SSH, podman restart, kill -9
inside the host, an SSH connection cut), watches the host from inside (files/unit_probe.py, fed to the host's
python3 through `podman exec`) and records what it saw in $MOLECULE_EPHEMERAL_DIRECTORY/systemd-cases/<case>.json.
verify (tests/test_systemd.py) asserts on those records and on the host as it is afterwards. A case that cannot get
where it must (a state that never comes) raises: side_effect fails, loudly.

  reboot      `podman restart` of the host: the enabled unit sglang-sglang.service loads again (`activating`, the
              phase in StatusText, /health_generate silent), turns `active` once the model answers; a re-run of the
              playbook then changes nothing and keeps MainPID.
  ssh_drop    deployment `slow` (a 60 s load): its converge is cut mid-wait (SIGKILL to the sshd session process of
              its connection, inside the host), the server loads on in its unit; the playbook again picks up the same
              attempt and its wait completes. Then playbooks/stop.yml stops `slow`.
  crash       deployment `crash`: kill -9 of a scheduler each time the server is ready: the unit restarts it
              (exit 69) until its start limit, then stays `failed`.
  crash_load  deployment `crashload`: kill -9 of a scheduler while it loads: exit 78, `failed` at once, never
              restarted; the playbook fails naming the class.
  second_deployment  a second deployment of the name `sglang` (run dir RUN_DIR2): the role's unit tasks (check mode,
              then for real: module_call.yml) are refused by their check, before the template, naming the unit file
              and the first one's run dir, and so is wait_for_model alone; the first serves on, untouched (same
              MainPID, InvocationID, unit file), nothing is written into RUN_DIR2.
  foreign_unit  a unit sglang-stranger.service that we did not write, in /run/systemd/system, running: refused
              naming its file (the role's unit tasks, and wait_for_model alone); it runs on unchanged, no unit of
              ours is written. Removed afterwards.
  transient   a transient unit from `systemd-run --unit sglang-transient`: refused naming its file (the role's unit
              tasks, and wait_for_model alone); it runs on.
  dropin      a foreign drop-in in /etc/systemd/system/sglang-sglang.service.d/ (daemon-reload done): a start (the
              role's unit tasks, and wait_for_model alone) and playbooks/stop.yml on `sglang` are refused naming it;
              the server serves on untouched. Removed afterwards.
  vendor_dropin  a distribution's drop-in for every service, as Fedora ships it
              (/usr/lib/systemd/system/service.d/10-timeout-abort.conf: TimeoutStopFailureMode=abort only; written
              when the image lacks it, daemon-reload done): deployment `vendor` starts and serves beside it, systemd
              applies it (DropInPaths), the run's warning names it. Then state=stopped; a written drop-in is removed.
  planted_dropin  the same harmless text planted for our unit, in the prefix dir
              /run/systemd/system/sglang-.service.d/ (daemon-reload done): a start of `sglang` (the role's unit tasks,
              and wait_for_model alone) is refused naming it; the server serves on untouched. Removed afterwards.
  takeover    the unit of `sglang` as the module of an earlier eagle-deploy wrote it (its mark on the first line, the
              deployment line second; daemon-reload done): the playbook again takes it over (the role's template
              replaces it, the handler reloads systemd) without a restart (same MainPID, InvocationID, NRestarts).
  unhealthy   deployment `unhealthy` (module_call.yml: SGLANG_HEALTH_CHECK_TIMEOUT 2 in its environment, so each
              health request is given 7 s; serve_stuck_seconds 10, serve_stuck_action restart) serving: the
              emulator's test control makes every health request take 15 s while nothing runs or moves; failed
              health is only a question, but nothing moved for 10 s: the watcher fails the stuck serving server
              (status `stuck`, after_ready, exit 69, the journal's `sglang-watcher: failed: stuck` line), systemd shows the unit `activating/auto-restart` with ExecMainStatus 69 (Restart=
              on-failure, RestartSec=10), no process of the old tree is left; the restart (a fresh emulator, no
              delay) serves again. Then state=stopped.
  stop_loading  deployment `stoploading` (a 120 s load), launched by module_call.yml in the background: `systemctl
              stop` of its unit while it loads weights, inside a wait step: the task fails with crash_class
              `stopped` and "stopped while loading" (not unit_failed), the status file says `stopped`, its
              processes are gone, its port is free. Then state=stopped.

Usage: cases.py HOST [CASE...]   (every case, in order, by default)
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

SCENARIO = os.path.dirname(os.path.abspath(__file__))
PROBE = os.path.join(SCENARIO, "files", "unit_probe.py")
REPO = os.environ.get("MOLECULE_PROJECT_DIRECTORY") or os.path.dirname(os.path.dirname(SCENARIO))
OUT = os.path.join(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY") or "/tmp/eagle-systemd", "systemd-cases")
PLAYBOOK_BIN = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
RUN_DIR = "/var/lib/eagle-deploy/run"  # sglang_install_run_dir's default (tests/molecule_support/hostcheck.RUN_DIR)
EMULATOR = "{{ sglang_install_venv }}/bin/sglang-emulator"

# The deployments besides the scenario's own `sglang` (port 30000): name -> port, emulator load (s), shards.
SLOW = ("slow", 30001, 60, 18)
CRASH = ("crash", 30002, 2, 2)
CRASH_LOAD = ("crashload", 30003, 40, 8)
UNHEALTHY = ("unhealthy", 30020, 2, 2)
STOP_LOADING = ("stoploading", 30021, 120, 24)
ROLLBACK = ("rollback", 30023, 2, 2)


class CaseError(Exception):
    """A case could not get where it must; the message says where it stopped."""


def unit_of(name):
    return "sglang-%s.service" % name


def log(msg):
    print("[cases %6.1fs] %s" % (time.monotonic() - T0, msg), flush=True)


T0 = time.monotonic()


class Host:
    """The test host, seen from inside through podman exec."""

    def __init__(self, name):
        self.name = name

    def probe(self, *args, timeout=600):
        with open(PROBE, "rb") as fh:
            r = subprocess.run(["podman", "exec", "-i", self.name, "python3", "-", *map(str, args)], stdin=fh,
                               capture_output=True, timeout=timeout, check=False)
        if r.returncode != 0:
            raise CaseError("unit_probe %s: rc=%s %s" % (" ".join(map(str, args)), r.returncode,
                                                        r.stderr.decode(errors="replace")[-2000:]))
        return [json.loads(line) for line in r.stdout.decode().splitlines() if line.strip()]

    def show(self, name):
        return self.probe("show", unit_of(name))[0]

    def sample(self, name, port, timeout, *conds):
        """Samples every 0.5 s until every condition holds or timeout s passed (the last sample says which)."""
        return self.probe("sample", unit_of(name), port, timeout, *conds, timeout=timeout + 120)

    def until(self, name, port, timeout, *conds):
        samples = self.sample(name, port, timeout, *conds)
        if not samples or not samples[-1].get("until"):
            raise CaseError("%s never reached %s in %s s; last: %s" % (unit_of(name), " ".join(conds), timeout,
                                                                   samples[-1] if samples else None))
        return samples

    def status(self, name):
        """The watcher's <run_dir>/<name>.status.json (None when absent)."""
        r = subprocess.run(["podman", "exec", self.name, "cat", "%s/%s.status.json" % (RUN_DIR, name)],
                           capture_output=True, check=False)
        return json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else None

    def tree(self, name):
        return self.probe("tree", unit_of(name))[0]

    def alive(self, procs):
        if not procs:
            return {}
        return self.probe("alive", *("%d:%d" % (p["pid"], p["start_time"]) for p in procs))[0]

    def listening(self, port):
        return self.probe("listening", port)[0]


def extra_vars(deployment):
    name, port, load, shards = deployment
    return {"sglang_server_name": name, "sglang_server_port": port,
            "sglang_server_command": [EMULATOR, "--emulator-scenario", "normal", "--emulator-load-seconds", str(load),
                                      "--emulator-shards", str(shards)]}


def playbook(host, label, playbook_path, evars=None, background=False, record=None):
    """ansible-playbook on the scenario's inventory (molecule's environment: its ansible.cfg, our library, roles
    and action plugins), output in OUT/<label>.log. background: the Popen; else the finished run's summary."""
    os.makedirs(OUT, exist_ok=True)
    argv = [PLAYBOOK_BIN, "-i", os.environ["MOLECULE_INVENTORY_FILE"], playbook_path]
    if evars is not None:
        path = os.path.join(OUT, "%s.vars.json" % label)
        with open(path, "w") as fh:
            json.dump(evars, fh)
        argv += ["-e", "@" + path]
    if record is not None:
        argv += ["-e", json.dumps({"eagle_systemd_record": record})]
    out = open(os.path.join(OUT, "%s.log" % label), "wb")
    log("ansible-playbook %s (%s)" % (os.path.basename(playbook_path), label))
    # molecule's environment forces colours; the recap is read from plain text.
    env = dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
    proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env=env)
    proc.label, proc.out, proc.t0 = label, out, time.monotonic()
    return proc if background else finish(host, proc)


def finish(host, proc, timeout=900):
    rc = proc.wait(timeout=timeout)
    proc.out.close()
    with open(proc.out.name, encoding="utf-8", errors="replace") as fh:
        text = fh.read()
    m = re.search(r"^%s\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)" % re.escape(host.name),
                  text, re.M)
    recap = dict(zip(("ok", "changed", "unreachable", "failed"), map(int, m.groups()))) if m else None
    log("  %s: rc=%s recap=%s after %.1f s" % (proc.label, rc, recap, time.monotonic() - proc.t0))
    return {"rc": rc, "recap": recap, "seconds": round(time.monotonic() - proc.t0, 1), "tail": text[-6000:],
            "log": proc.out.name}


def save(case, record):
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "%s.json" % case), "w") as fh:
        json.dump(record, fh, indent=1)
    log("recorded %s" % os.path.join(OUT, "%s.json" % case))


def converge_path():
    return os.path.join(SCENARIO, "converge.yml")


# ------------------------------------------------------------------------------------------------------ the cases
def case_reboot(host):
    name, port = "sglang", 30000
    before = host.show(name)
    t = time.monotonic()
    subprocess.run(["podman", "restart", "--time", "30", host.name], check=True, capture_output=True, timeout=120)
    restart_s = round(time.monotonic() - t, 1)
    log("podman restart took %s s" % restart_s)
    # From the boot on: the unit starts (enabled), loads, turns active.
    samples = host.until(name, port, 300, "ActiveState=active")
    after = host.show(name)
    status = host.status(name)
    rerun = playbook(host, "reboot-rerun", converge_path())
    save("reboot", {"before": before, "restart_seconds": restart_s, "samples": samples, "after": after,
                    "status": status, "rerun": rerun, "after_rerun": host.show(name), "status_after_rerun":
                    host.status(name), "health_after_rerun": host.sample(name, port, 0)[-1]["health_generate"]})


def case_ssh_drop(host):
    name, port = SLOW[0], SLOW[1]
    evars = extra_vars(SLOW)
    rec1, rec2 = os.path.join(OUT, "ssh_drop-run1.result.json"), os.path.join(OUT, "ssh_drop-run2.result.json")
    for path in (rec1, rec2):
        if os.path.exists(path):
            os.unlink(path)
    run1 = playbook(host, "ssh_drop-run1", os.path.join(SCENARIO, "record_wait.yml"), evars, background=True,
                    record=rec1)
    # Mid-wait: the unit loads weights and a module process of the playbook's connection is running on the host.
    deadline = time.monotonic() + 300
    while True:
        if run1.poll() is not None:
            raise CaseError("run 1 ended (rc=%s) before the connection could be cut mid-load; log %s"
                            % (run1.returncode, run1.out.name))
        unit = host.show(name)
        modules = host.probe("module")[0]
        if unit.get("ActiveState") == "activating" and "loading weights" in unit.get("StatusText", "") and modules:
            break
        if time.monotonic() > deadline:
            raise CaseError("%s never loaded weights with a module waiting on it; last: %s" % (unit_of(name), unit))
        time.sleep(1)
    mid = {"unit": unit, "status": host.status(name), "tree": host.tree(name)}
    # (a module call may just be between two steps: looked for again, briefly)
    for _ in range(20):
        drop = host.probe("drop-ssh")[0]
        if drop["killed_sshd"]:
            break
        time.sleep(0.25)
    else:
        raise CaseError("no sshd session with a module running to cut: %s" % drop)
    log("cut the connection: SIGKILL to sshd %s (module %s) while %s said %r"
        % (drop["killed_sshd"], [m["module"]["pid"] for m in drop["modules"]], unit_of(name), unit["StatusText"]))
    run1 = finish(host, run1, timeout=300)
    after_drop = {"unit": host.show(name), "status": host.status(name),
                  "modules_alive": host.alive([m["module"] for m in drop["modules"]])}
    run1["result"] = _read_json(rec1)
    # The playbook again, while (or after) the server loads on: it must pick up the same attempt.
    run2_started = time.monotonic()  # the host's CLOCK_MONOTONIC too (one kernel): ActiveEnterTimestampMonotonic
    run2 = playbook(host, "ssh_drop-run2", os.path.join(SCENARIO, "record_wait.yml"), evars, record=rec2)
    run2["started_monotonic_us"] = int(run2_started * 1e6)
    run2["result"] = _read_json(rec2)
    final = host.sample(name, port, 0)[-1]
    save("ssh_drop", {"mid": mid, "drop": drop, "run1": run1, "after_drop": after_drop, "run2": run2,
                      "final": final, "status_final": host.status(name)})

    # playbooks/stop.yml on that deployment: the unit inactive, its processes gone, the port free.
    tree = host.tree(name)
    stop = playbook(host, "ssh_drop-stop", os.path.join(REPO, "playbooks", "stop.yml"), {"sglang_server_name": name})
    save("stop", {"before": tree, "stop": stop, "after": host.show(name), "alive": host.alive(tree["procs"]),
                  "tree_after": host.tree(name), "listening": host.listening(port),
                  "health": host.sample(name, port, 0)[-1]["health_generate"]})


def case_crash(host):
    name, port = CRASH[0], CRASH[1]
    converge = playbook(host, "crash-converge", converge_path(), extra_vars(CRASH))
    if converge["rc"] != 0:
        raise CaseError("the converge of %s failed: %s" % (name, converge["tail"][-1500:]))
    kills, samples = [], []
    for _ in range(10):
        # Ready again (a restart), or given up (failed: the start limit).
        s = host.until(name, port, 180, "ActiveState!=activating")
        samples.append(s)
        if s[-1]["ActiveState"] != "active":
            break
        k = host.probe("kill-scheduler", unit_of(name))[0]
        if k["killed"] is None:
            raise CaseError("no scheduler in %s: %s" % (unit_of(name), k))
        kills.append(k)
        log("kill -9 scheduler %d of %s (NRestarts %s)" % (k["killed"]["pid"], unit_of(name), k["unit"]["NRestarts"]))
        samples.append(host.until(name, port, 60, "ActiveState!=active"))
    else:
        raise CaseError("%s still restarts after %d kills" % (unit_of(name), len(kills)))
    failed = host.show(name)
    # Longer than RestartSec: a restart loop would show here.
    settle = host.sample(name, port, 30, "ActiveState=never")
    save("crash", {"converge": converge, "kills": kills, "samples": samples, "failed": failed, "settle": settle,
                   "final": host.show(name), "status": host.status(name), "tree_after": host.tree(name),
                   "journal": host.probe("journal", unit_of(name))[0]})


def case_crash_load(host):
    name, port = CRASH_LOAD[0], CRASH_LOAD[1]
    run = playbook(host, "crash_load-converge", converge_path(), extra_vars(CRASH_LOAD), background=True)
    deadline = time.monotonic() + 300
    while True:
        if run.poll() is not None:
            raise CaseError("the converge of %s ended (rc=%s) before its load could be cut; log %s"
                            % (name, run.returncode, run.out.name))
        unit = host.show(name)
        if unit.get("ActiveState") == "activating" and "loading weights" in unit.get("StatusText", ""):
            k = host.probe("kill-scheduler", unit_of(name))[0]
            if k["killed"] is not None:
                break
        if time.monotonic() > deadline:
            raise CaseError("%s never loaded weights with a scheduler up; last: %s" % (unit_of(name), unit))
        time.sleep(1)
    log("kill -9 scheduler %d of %s while %r" % (k["killed"]["pid"], unit_of(name), unit["StatusText"]))
    converge = finish(host, run, timeout=300)
    failed = host.until(name, port, 60, "ActiveState=failed")
    settle = host.sample(name, port, 20, "ActiveState=never")
    save("crash_load", {"kill": k, "unit_at_kill": unit, "converge": converge, "failed": failed, "settle": settle,
                        "final": host.show(name), "status": host.status(name), "tree_after": host.tree(name),
                        "journal": host.probe("journal", unit_of(name))[0]})


# ------------------------------------------------------------------ units that are not this deployment's: refused
RUN_DIR2, LOG_DIR2 = "/var/lib/eagle-deploy/run2", "/var/log/sglang2"


def sh(host, *argv, check=True):
    """A command inside the host (podman exec): (rc, stdout)."""
    r = subprocess.run(["podman", "exec", host.name, *argv], capture_output=True, timeout=120, check=False)
    if check and r.returncode != 0:
        raise CaseError("%s: rc=%s %s" % (" ".join(argv), r.returncode, r.stderr.decode(errors="replace")[-1000:]))
    return r.returncode, r.stdout.decode(errors="replace")


def file_state(host, path):
    """sha256 and mode of a file inside the host, None when absent."""
    rc, out = sh(host, "sh", "-c", "test -e %s && sha256sum %s && stat -c %%a %s" % (path, path, path), check=False)
    return out.split()[0::2] if rc == 0 else None


def call(host, label, args, check=False):
    """wait_for_model once (module_call.yml); its result as recorded."""
    rec = os.path.join(OUT, "%s.result.json" % label)
    if os.path.exists(rec):
        os.unlink(rec)
    evars = {"eagle_call": args, "eagle_check": check}
    run = playbook(host, label, os.path.join(SCENARIO, "module_call.yml"), evars, record=rec)
    run["result"] = _read_json(rec)
    if run["result"] is None:
        raise CaseError("%s recorded no result: %s" % (label, run["tail"][-1500:]))
    return run


def emulator_args(name, port, run_dir=RUN_DIR, log_dir="/var/log/sglang"):
    return {"name": name, "port": port, "run_dir": run_dir, "log_dir": log_dir, "run_as": "sglang",
            "argv": ["/opt/sglang/venv/bin/sglang-emulator", "--emulator-scenario", "normal", "--port", str(port)]}


def main_server(host):
    """What must not change while a refused run acts: the main deployment's unit, its file, its answer."""
    u = host.show("sglang")
    return {"unit": {k: u.get(k) for k in ("ActiveState", "SubState", "MainPID", "InvocationID", "NRestarts")},
            "file": file_state(host, "/etc/systemd/system/sglang-sglang.service"),
            "health": host.sample("sglang", 30000, 0)[-1]["health_generate"]}


def case_second_deployment(host):
    sh(host, "install", "-d", "-m", "0755", "-o", "root", "-g", "root", RUN_DIR2, LOG_DIR2)
    before = main_server(host)
    args = emulator_args("sglang", 30010, RUN_DIR2, LOG_DIR2)
    check = call(host, "second_deployment-check", args, check=True)
    real = call(host, "second_deployment-run", args)
    module = call(host, "second_deployment-module", dict(args, unit=False))
    after = main_server(host)
    save("second_deployment", {"before": before, "check": check, "run": real, "module": module, "after": after,
                               "run_dir2": sh(host, "ls", "-A", RUN_DIR2)[1].split(),
                               "listening": host.listening(30010)})


def stranger(host, name):
    """The stranger as systemd and the disk show it."""
    u = host.show(name)
    return {"unit": {k: u.get(k) for k in ("ActiveState", "MainPID", "InvocationID", "FragmentPath")},
            "ours": file_state(host, "/etc/systemd/system/%s" % unit_of(name))}


def case_foreign_unit(host):
    path = "/run/systemd/system/%s" % unit_of("stranger")
    sh(host, "sh", "-c", "printf '[Unit]\nDescription=not ours\n[Service]\nExecStart=/bin/sleep infinity\n' > %s"
       " && systemctl daemon-reload && systemctl start %s" % (path, unit_of("stranger")))
    before = dict(stranger(host, "stranger"), file=file_state(host, path))
    real = call(host, "foreign_unit-run", emulator_args("stranger", 30011))
    module = call(host, "foreign_unit-module", dict(emulator_args("stranger", 30011), unit=False))
    after = dict(stranger(host, "stranger"), file=file_state(host, path))
    save("foreign_unit", {"path": path, "before": before, "run": real, "module": module, "after": after})
    sh(host, "sh", "-c", "systemctl stop %s; rm -f %s; systemctl daemon-reload" % (unit_of("stranger"), path))


def case_transient(host):
    sh(host, "systemd-run", "--unit", unit_of("transient"), "/bin/sleep", "infinity")
    before = stranger(host, "transient")
    real = call(host, "transient-run", emulator_args("transient", 30012))
    module = call(host, "transient-module", dict(emulator_args("transient", 30012), unit=False))
    after = stranger(host, "transient")
    save("transient", {"before": before, "run": real, "module": module, "after": after})
    sh(host, "systemctl", "stop", unit_of("transient"))


def case_dropin(host):
    ddir = "/etc/systemd/system/%s.d" % UNIT_MAIN
    path = ddir + "/foreign.conf"
    sh(host, "sh", "-c", "mkdir -p %s && printf '[Service]\nEnvironment=EAGLE_FOREIGN=1\n' > %s && "
       "systemctl daemon-reload" % (ddir, path))
    before = dict(main_server(host), dropin=file_state(host, path))
    args = dict(emulator_args("sglang", 30000), argv=["/bin/true", "changed"])
    real = call(host, "dropin-run", args)
    module = call(host, "dropin-module", dict(args, unit=False))
    stop = playbook(host, "dropin-stop", os.path.join(REPO, "playbooks", "stop.yml"), {"sglang_server_name": "sglang",
                                                                                      "sglang_server_launcher": "systemd"})
    after = dict(main_server(host), dropin=file_state(host, path))
    save("dropin", {"path": path, "before": before, "run": real, "module": module, "stop": stop, "after": after})
    sh(host, "sh", "-c", "rm -rf %s && systemctl daemon-reload" % ddir)


# Fedora's drop-in for every service (the systemd package's 10-timeout-abort.conf), its comments shortened.
VENDOR_DROPIN = "/usr/lib/systemd/system/service.d/10-timeout-abort.conf"
VENDOR_DROPIN_TEXT = ("# This file is part of the systemd package.\n"
                      "# See https://fedoraproject.org/wiki/Changes/Shorter_Shutdown_Timer.\n\n"
                      "[Service]\nTimeoutStopFailureMode=abort\n")
VENDOR = ("vendor", 30022, 2, 2)


def write_file(host, path, text):
    """``text`` into ``path`` inside the host (0644, its directory made), then systemctl daemon-reload."""
    r = subprocess.run(["podman", "exec", "-i", host.name, "sh", "-c", "mkdir -p %s && cat > %s && chmod 0644 %s && "
                        "systemctl daemon-reload" % (os.path.dirname(path), path, path)],
                       input=text.encode(), capture_output=True, timeout=120, check=False)
    if r.returncode != 0:
        raise CaseError("could not write %s: %s" % (path, r.stderr.decode(errors="replace")))


def case_vendor_dropin(host):
    shipped = file_state(host, VENDOR_DROPIN)
    if shipped is None:
        write_file(host, VENDOR_DROPIN, VENDOR_DROPIN_TEXT)
    name, port = VENDOR[:2]
    start = call(host, "vendor_dropin-start", emulator_deployment(VENDOR))
    serving = host.until(name, port, 60, "ActiveState=active", "health_generate=200")[-1]
    dropins = sh(host, "systemctl", "show", "-p", "DropInPaths", "--value", unit_of(name))[1].split()
    stop = stop_deployment(host, "vendor_dropin-stop", VENDOR)
    save("vendor_dropin", {"path": VENDOR_DROPIN, "shipped": shipped, "start": start, "serving": serving,
                           "dropins": dropins, "stop": stop, "after_stop": host.show(name)})
    if shipped is None:
        sh(host, "sh", "-c", "rm -f %s && rmdir --ignore-fail-on-non-empty %s && systemctl daemon-reload"
           % (VENDOR_DROPIN, os.path.dirname(VENDOR_DROPIN)))


def case_planted_dropin(host):
    path = "/run/systemd/system/sglang-.service.d/10-timeout-abort.conf"
    write_file(host, path, VENDOR_DROPIN_TEXT)
    before = dict(main_server(host), dropin=file_state(host, path))
    args = dict(emulator_args("sglang", 30000), argv=["/bin/true", "changed"])
    real = call(host, "planted_dropin-run", args)
    module = call(host, "planted_dropin-module", dict(args, unit=False))
    after = dict(main_server(host), dropin=file_state(host, path))
    save("planted_dropin", {"path": path, "before": before, "run": real, "module": module, "after": after})
    sh(host, "sh", "-c", "rm -rf %s && systemctl daemon-reload" % os.path.dirname(path))


OLD_UNIT_MARK = "# Written by eagle-deploy (wait_for_model). Changes here are replaced on its next run."
UNIT_MARK = "# Written by eagle-deploy (role sglang_server, tasks/unit.yml)."


def case_takeover(host):
    path = "/etc/systemd/system/%s" % UNIT_MAIN
    text = sh(host, "cat", path)[1]
    header, sep, body = text.partition("\n[Unit]\n")
    deployment = [line for line in header.splitlines() if line.startswith("# eagle-deploy deployment: ")]
    if not sep or len(deployment) != 1 or UNIT_MARK not in header:
        raise CaseError("%s is not the role's template: %r" % (path, header))
    # The unit as wait_for_model wrote it before it was the role's template (mark first, deployment line second).
    old = "%s\n%s\n[Unit]\n%s" % (OLD_UNIT_MARK, deployment[0], body)
    r = subprocess.run(["podman", "exec", "-i", host.name, "sh", "-c", "cat > %s && systemctl daemon-reload" % path],
                       input=old.encode(), capture_output=True, timeout=120, check=False)
    if r.returncode != 0:
        raise CaseError("could not write the old unit: %s" % r.stderr.decode(errors="replace"))
    before = dict(main_server(host), text=sh(host, "cat", path)[1])
    rerun = playbook(host, "takeover-rerun", converge_path())
    after = dict(main_server(host), text=sh(host, "cat", path)[1])
    save("takeover", {"path": path, "template": text, "old": old, "before": before, "rerun": rerun, "after": after,
                      "need_reload": host.probe("show", UNIT_MAIN)[0].get("NeedDaemonReload")})


UNIT_MAIN = unit_of("sglang")


# ------------------------------------------------------------------ a serving server's health fails; a stop mid-load
def emulator_deployment(deployment, **extra):
    """wait_for_model's arguments for an emulator deployment of its own (name, port, load seconds, shards)."""
    name, port, load, shards = deployment
    args = emulator_args(name, port)
    args["argv"] = args["argv"] + ["--emulator-load-seconds", str(load), "--emulator-shards", str(shards)]
    args.update(extra)
    return args


def stop_deployment(host, label, deployment):
    """state=stopped (systemctl disable --now) of a deployment of the cases: nothing of it runs afterwards."""
    name, port = deployment[:2]
    return call(host, label, {"name": name, "state": "stopped", "port": port, "run_dir": RUN_DIR,
                              "log_dir": "/var/log/sglang"})


def case_unhealthy(host):
    name, port = UNHEALTHY[:2]
    # Small numbers: the server's health window 2 s (a request is given 7 s, one every 7 s while serving), stuck once
    # nothing moved for 10 s, and stuck is restarted (the defaults, 20 s / 300 s / report, would restart nothing).
    start = call(host, "unhealthy-start", emulator_deployment(
        UNHEALTHY, environment={"SGLANG_HEALTH_CHECK_TIMEOUT": "2"}, serve_stuck_seconds=10,
        serve_stuck_action="restart"))
    if start["result"].get("failed"):
        raise CaseError("the start of %s failed: %s" % (name, start["result"].get("msg")))
    serving = host.until(name, port, 60, "ActiveState=active")[-1]
    status_serving = host.status(name)
    tree = host.tree(name)
    if not tree["procs"]:
        raise CaseError("%s serves with no process in its unit: %s" % (unit_of(name), tree))
    # Every health request from now on takes 15 s (> the 7 s given), nothing runs, the server writes nothing of its own:
    # the server looks stuck to the watcher.
    delay = host.probe("health-delay", port, 15, 1000)[0]
    log("health delay on %s: %s" % (unit_of(name), delay))
    # Port 0: the probe asks no health itself. The unit's restart state lasts RestartSec (10 s).
    samples = host.until(name, 0, 90, "SubState=auto-restart")
    status = host.status(name)  # before the restart's watcher writes its own
    alive = host.alive(tree["procs"])
    tree_failed = host.tree(name)
    journal = host.probe("journal", unit_of(name))[0]
    log("%s: %s/%s ExecMainStatus %s, verdict %s"
        % (unit_of(name), samples[-1]["ActiveState"], samples[-1]["SubState"], samples[-1]["ExecMainStatus"],
           (status or {}).get("verdict")))
    # Restart=on-failure: the restarted server (a fresh emulator, no delay) serves again.
    restart = host.until(name, port, 120, "ActiveState=active", "health_generate=200")
    save("unhealthy", {"start": start, "serving": serving, "status_serving": status_serving, "tree": tree,
                       "delay": delay, "samples": samples, "status": status, "alive": alive,
                       "tree_failed": tree_failed, "journal": journal, "restart": restart[-1],
                       "status_restart": host.status(name), "stop": stop_deployment(host, "unhealthy-stop", UNHEALTHY),
                       "after_stop": host.show(name), "tree_after_stop": host.tree(name),
                       "listening_after_stop": host.listening(port)})


def case_stop_loading(host):
    name, port = STOP_LOADING[:2]
    rec = os.path.join(OUT, "stop_loading-start.result.json")
    if os.path.exists(rec):
        os.unlink(rec)
    evars = {"eagle_call": emulator_deployment(STOP_LOADING, timeout=300), "eagle_check": False}
    run = playbook(host, "stop_loading-start", os.path.join(SCENARIO, "module_call.yml"), evars, background=True,
                   record=rec)
    deadline = time.monotonic() + 300
    first = None
    while True:
        if run.poll() is not None:
            raise CaseError("the start of %s ended (rc=%s) before it could be stopped mid-load; log %s"
                            % (name, run.returncode, run.out.name))
        unit = host.show(name)
        pids = {m["module"]["pid"] for m in host.probe("module")[0]}
        if unit.get("ActiveState") == "activating" and "loading weights" in unit.get("StatusText", "") and pids:
            # A wait step that has just begun (the action plugin calls the module in steps of 10 s): the stop
            # lands inside a step, whose wait reads the watcher's verdict.
            if first is None:
                first = pids
            elif not pids & first:
                break
        if time.monotonic() > deadline:
            raise CaseError("%s never loaded weights with a new wait step running; last: %s" % (unit_of(name), unit))
        time.sleep(0.2)
    tree = host.tree(name)
    status_before = host.status(name)
    t = time.monotonic()
    stop_rc, stop_out = sh(host, "systemctl", "stop", unit_of(name), check=False)
    stop_seconds = round(time.monotonic() - t, 1)
    log("systemctl stop %s (rc=%s, %.1f s) while %r" % (unit_of(name), stop_rc, stop_seconds, unit["StatusText"]))
    start = finish(host, run, timeout=300)
    start["result"] = _read_json(rec)
    save("stop_loading", {"unit_at_stop": unit, "status_before": status_before, "tree": tree,
                          "stop_rc": stop_rc, "stop_out": stop_out, "stop_seconds": stop_seconds, "start": start,
                          "after": host.show(name), "status": host.status(name), "alive": host.alive(tree["procs"]),
                          "tree_after": host.tree(name), "listening": host.listening(port),
                          "journal": host.probe("journal", unit_of(name))[0],
                          "cleanup": stop_deployment(host, "stop_loading-cleanup", STOP_LOADING)})


def _run_file(host, fname):
    """(JSON of <run_dir>/<fname>, its 'uid mode' as stat shows it) inside the host."""
    rc, text = sh(host, "cat", "%s/%s" % (RUN_DIR, fname), check=False)
    return (json.loads(text) if rc == 0 and text.strip() else None), sh(host, "stat", "-c", "%u %a",
                                                                         "%s/%s" % (RUN_DIR, fname), check=False)[1]


def case_rollback(host):
    """A deployment that passed its smoke test under its unit, then a start of a new one that crashes while loading,
    with sglang_server_rollback: the good one is put back under the same unit, serving."""
    name, port = ROLLBACK[:2]
    good_run = playbook(host, "rollback-good", converge_path(), extra_vars(ROLLBACK))
    if good_run["rc"] != 0:
        raise CaseError("the converge of %s failed: %s" % (name, good_run["tail"][-1500:]))
    good_state = _run_file(host, "%s.json" % name)[0]
    record, record_stat = _run_file(host, "%s.good.json" % name)
    evars = extra_vars(ROLLBACK)
    evars["sglang_server_command"][2] = "crash_loading"
    evars["sglang_server_rollback"] = True
    # a changed server argument too: the new config is written over the good one, which the rollback puts back (as
    # root, into the config dir sglang_install made root's: nobody less privileged can swap it)
    evars["sglang_server_context_length"] = 8192
    config = "/etc/sglang/%s.yaml" % name
    failed_run = playbook(host, "rollback-crash", converge_path(), evars)
    after = host.until(name, port, 60, "ActiveState=active", "health_generate=200")[-1]
    config_after = {"sha256": sh(host, "sha256sum", config)[1].split()[0],
                    "stat": sh(host, "stat", "-c", "%U %G %a", config)[1].strip(),
                    "dir_stat": sh(host, "stat", "-c", "%U %G %a", "/etc/sglang")[1].strip()}
    save("rollback", {"good_run": good_run, "good_state": good_state, "record": record, "record_stat": record_stat,
                      "config": config, "config_after": config_after,
                      "failed_run": failed_run, "after": after, "state_after": _run_file(host, "%s.json" % name)[0],
                      "status_after": host.status(name),
                      "stop": stop_deployment(host, "rollback-stop", ROLLBACK), "after_stop": host.show(name),
                      "listening_after_stop": host.listening(port)})


def _read_json(path):
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


CASES = {"reboot": case_reboot, "ssh_drop": case_ssh_drop, "crash": case_crash, "crash_load": case_crash_load,
         "second_deployment": case_second_deployment, "foreign_unit": case_foreign_unit, "transient": case_transient,
         "dropin": case_dropin, "vendor_dropin": case_vendor_dropin, "planted_dropin": case_planted_dropin,
         "takeover": case_takeover, "unhealthy": case_unhealthy,
         "stop_loading": case_stop_loading, "rollback": case_rollback}


def main(argv):
    host = Host(argv[0])
    for case in argv[1:] or list(CASES):
        log("case %s" % case)
        CASES[case](host)
    log("all cases ran")


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except CaseError as e:
        print("CASE FAILED: %s" % e, flush=True)
        sys.exit(1)

"""Live progress on the controller, for real: ansible-playbook runs wait_for_model (the action plugin, which calls the
module in steps) against the SGLang emulator with a 3-minute load, twice.

* The first load prints progress lines with shard counts, no more than 30 s apart (a little slack for ansible's own
  turn-around), with no ETA (no history yet), and leaves its record in the load history on the host.
* The second (a forced restart) prints an ETA drawn from the first load's phase durations; every ETA printed in the
  first three quarters of the load is within 20 % of the time that really was left (the load's own elapsed time at
  ready, as the module reports it, less the line's elapsed time).

The first run uses the default stdout callback (the lines go to stdout, as an operator sees them), the second the json
callback (the lines go to stderr, so stdout stays one JSON document). About 6.5 minutes.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time

import pytest

from installed_programs import install_supervisor

from ansible.module_utils import sglang_progress

from ansible_run import EMULATOR, REPO, TARGET_PYTHON, free_port, run_module

BIN = os.path.dirname(sys.executable)
LOAD_S, SHARDS, CAPTURE_S, WARMUP_S = 165, 64, 8, 5  # about 3 minutes from launch to ready
MAX_GAP_S = 35.0  # the plugin's rule is 30 s; ansible's turn-around between two steps on top
LINE = re.compile(r"^(?P<host>\S+) \| (?P<status>[^|]+) \| (?P<elapsed>\S+) elapsed \| (?P<tail>.*)$")
ETA = re.compile(r"^ETA ~(?P<eta>\S+) \(last load (?P<last>\S+)\)$")

pytestmark = pytest.mark.slow


def seconds(text):
    """'4m12s' / '42s' / '1h03m' back to seconds."""
    m = re.match(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$", text)
    assert m and text, text
    h, mi, s = (int(g or 0) for g in m.groups())
    return 3600 * h + 60 * mi + s


def play(tmp_path, wfm_args, callback, label):
    """Run a one-task playbook; return (rc, stdout lines, stderr lines with their arrival times, the task result)."""
    result_path = str(tmp_path / ("%s.result.json" % label))
    playbook = tmp_path / ("%s.yml" % label)
    playbook.write_text(
        "- name: Progress\n"
        "  hosts: localhost\n"
        "  gather_facts: false\n"
        "  tasks:\n"
        "    - name: Wait for the emulator\n"
        "      ansible.legacy.wait_for_model: %s\n"
        "      register: r\n"
        "      ignore_errors: true\n"
        "    - name: Keep the result\n"
        "      ansible.builtin.copy:\n"
        "        content: \"{{ r | to_json }}\"\n"
        "        dest: %s\n"
        "        mode: \"0600\"\n" % (json.dumps(wfm_args), json.dumps(result_path)))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK=callback, ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               PATH=BIN + os.pathsep + os.environ.get("PATH", ""))
    cmd = [os.path.join(BIN, "ansible-playbook"), str(playbook), "-i", "localhost,", "-c", "local",
           "-e", "ansible_python_interpreter=%s" % TARGET_PYTHON]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    got = {"stdout": [], "stderr": []}

    def pump(stream, into):
        for line in stream:
            into.append((time.monotonic(), line.rstrip("\n")))

    pumps = [threading.Thread(target=pump, args=(proc.stdout, got["stdout"])),
             threading.Thread(target=pump, args=(proc.stderr, got["stderr"]))]
    for t in pumps:
        t.start()
    try:
        rc = proc.wait(timeout=330)
    except subprocess.TimeoutExpired:
        rc = None
    finally:
        if proc.poll() is None:
            proc.kill()
        for t in pumps:
            t.join(10)
    assert rc is not None, "ansible-playbook ran past 330 s; its last lines:\n%s" % "\n".join(
        t for _, t in sorted(got["stdout"] + got["stderr"])[-40:])
    with open(result_path) as fh:
        result = json.load(fh)
    return rc, got, result


def progress_lines(timed):
    """[(arrival, parsed line)] of the progress lines among (arrival, text)."""
    out = []
    for at, text in timed:
        m = LINE.match(text)
        if m and m.group("host") == "localhost":
            out.append((at, dict(m.groupdict(), line=text, elapsed_s=seconds(m.group("elapsed")))))
    return out


def test_progress_lines_and_the_eta_of_a_second_load(tmp_path):
    port = free_port()
    log_dir = str(tmp_path / "logs")
    os.makedirs(log_dir)
    wfm = {
        "name": "emu",
        "argv": [TARGET_PYTHON, EMULATOR, "--port", str(port), "--model-path", "/models/tiny",
                 "--emulator-load-seconds", str(LOAD_S), "--emulator-shards", str(SHARDS),
                 "--emulator-capture-seconds", str(CAPTURE_S), "--emulator-warmup-seconds", str(WARMUP_S)],
        "log_dir": log_dir,
        "health_url": "http://127.0.0.1:%d/health_generate" % port,
        "timeout": 600,
        "stall_timeout": 120,
        # the supervisor program as the role sglang_server installs it (root-owned, under the test's own dir)
        "program_dir": install_supervisor(log_dir, str(tmp_path / "supervisor")),
    }
    try:
        # ---- the first load: lines with shard counts, no ETA yet
        rc, out, first = play(tmp_path, wfm, "ansible.builtin.default", "first")
        lines = progress_lines(out["stdout"])
        report = "\n".join(t for _, t in out["stdout"][-60:]) + "\n" + "\n".join(t for _, t in out["stderr"][-30:])
        assert rc == 0 and not first.get("failed"), (first.get("msg"), report)
        assert first["changed"] is True and first["steps"] >= 10, first
        t1 = first["progress"]["elapsed"]
        # at ready, the last load is this one (recorded before the result is made)
        assert first["progress"]["phase"] == "ready" and first["progress"]["last_load"] in (None, pytest.approx(t1, abs=3)), first
        assert 0.9 * (LOAD_S + CAPTURE_S + WARMUP_S) <= t1 <= LOAD_S + CAPTURE_S + WARMUP_S + 60, t1
        shard_lines = [p for _, p in lines if re.search(r"loading weights \d+/%d shards" % SHARDS, p["status"])]
        assert len(shard_lines) >= 6, report
        assert all(p["tail"] == "no ETA yet (first load)" for _, p in lines[:-1]), report
        assert lines[-1][1]["status"].startswith("serving") and lines[-1][1]["tail"].startswith("done"), report
        gaps = [b - a for (a, _), (b, _) in zip(lines, lines[1:])]
        assert max(gaps) <= MAX_GAP_S, (gaps, report)
        record = sglang_progress.last_load(log_dir, "emu")
        assert record is not None and abs(record["total"] - t1) <= 3.0, (record, t1)
        print("\nfirst load: %.1f s, %d steps, %d lines (%d with shard counts), longest gap %.1f s"
              % (t1, first["steps"], len(lines), len(shard_lines), max(gaps)))
        for _, p in lines:
            print("  " + p["line"])

        # ---- the second load: an ETA from the first one's history, within 20 % of the truth
        rc, out, second = play(tmp_path, dict(wfm, force_restart=True), "ansible.builtin.json", "second")
        report = "\n".join(t for _, t in out["stderr"][-60:])
        assert rc == 0 and not second.get("failed"), (second.get("msg"), report)
        json.loads("\n".join(t for _, t in out["stdout"]))  # the lines stayed out of the json callback's document
        assert second["changed"] is True and second["restart_reason"], second
        lines = progress_lines(out["stderr"])
        t2 = second["progress"]["elapsed"]
        errors = []
        for _, p in lines:
            m = ETA.match(p["tail"])
            if m is None:
                continue
            assert abs(seconds(m.group("last")) - t1) <= 3.0, (p["line"], t1)
            left = t2 - p["elapsed_s"]
            if p["elapsed_s"] <= 0.75 * t2 and left > 0:
                errors.append((abs(seconds(m.group("eta")) - left) / left, p["line"], left))
        print("second load: %.1f s, %d steps, %d lines; ETA errors (line, truth left):" % (t2, second["steps"], len(lines)))
        for err, line, left in errors:
            print("  %5.1f %%  %s  (truth %.0f s)" % (100 * err, line, left))
        assert len(errors) >= 4, report
        assert max(e for e, _, _ in errors) <= 0.20, errors
        assert lines[-1][1]["tail"].startswith("done (last load "), report
    finally:
        stop = run_module("wait_for_model", {"name": "emu", "state": "stopped", "log_dir": log_dir,
                                             "on_foreign_pid": "ignore"})
        assert not stop.get("failed"), stop.get("msg")

"""Busy is not dead (issue 33), with real processes: the supervisor program (module_utils/sglang_supervisor.py) as systemd
runs it, the SGLang emulator speaking SGLang 0.5.23's health (a window of SGLANG_HEALTH_CHECK_TIMEOUT s for any
output, health skipped and kept resident while busy, N resident health requests crash the scheduler as in #35884) as
its server, and the emulator's long prefill: no output at all for several windows while requests run."""
from __future__ import annotations

import json
import signal
import time
import urllib.request

from ansible.module_utils import sglang_contract, sglang_proc

from test_sglang_watcher import watched  # noqa: F401 - the fixture

WINDOW = 1.0  # s: the server's SGLANG_HEALTH_CHECK_TIMEOUT, shortened to keep the test quick
PREFILL = 16.0  # s of no output: many windows, two of the supervisor's intervals (window + 5 s)


def _get(port, path):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=5) as resp:
        return json.loads(resp.read().decode())


def _post(port, path, body):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), method="POST", data=json.dumps(body).encode())
    with urllib.request.urlopen(req, timeout=5) as resp:
        return resp.status


def test_a_server_busy_with_no_output_for_many_windows_stays_serving_with_the_same_pid_and_one_probe_at_most(
        watched):  # noqa: F811
    watched.start(load=0.2, shards=1, env={"SGLANG_HEALTH_CHECK_TIMEOUT": str(WINDOW)}, health_timeout=1,
                  serve_health_interval=0.3, serve_stuck_seconds=120, serve_stuck_action="restart")
    watched.notes("READY=1", 60)
    pid = sglang_proc.read_state(watched.run_dir, "emu")["pid"]
    st = watched.status()
    assert st["verdict"] == "ready"
    assert _post(watched.port, "/emulator/long_prefill", {"seconds": PREFILL, "running": 2, "log_every": 0}) == 200
    t0 = time.monotonic()
    watched.notes("STATUS=serving, busy", PREFILL)  # the unit's STATUS= says busy while the prefill runs
    busy = watched.status()
    assert busy["verdict"] == "ready" and busy["status"].startswith("serving, busy"), busy
    assert busy["serving"]["activity"]["state"] == "busy", busy["serving"]
    most = 0
    while time.monotonic() - t0 < PREFILL + 2:
        most = max(most, _get(watched.port, "/emulator/health_state")["most_resident"])
        assert watched.proc.poll() is None, watched.end()
        time.sleep(0.2)
    serving = watched.status()["serving"]
    assert serving["health_window"] == WINDOW and serving["serve_health_interval"] == WINDOW + 5
    assert serving["health_timeout"] == WINDOW + 5
    watched.notes("STATUS=serving (ready", 30)  # health answers again once the prefill is over
    st = watched.status()
    assert st["verdict"] == "ready" and st["serving"]["activity"]["state"] is None, st
    assert sglang_proc.read_state(watched.run_dir, "emu")["pid"] == pid and sglang_proc.pid_alive(pid)
    health = _get(watched.port, "/emulator/health_state")
    # our health request was in the server during the prefill, and never two of them
    assert max(most, health["most_resident"]) == 1 and health["most_open"] <= 1, (most, health)
    watched.proc.send_signal(signal.SIGTERM)
    rc, _out, err = watched.end(timeout=30)
    assert rc == sglang_contract.EXIT_STOPPED, err

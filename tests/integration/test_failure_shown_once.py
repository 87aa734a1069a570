"""A server that crashes while it loads, as the operator sees it (issue 34): the real playbook against this machine
(`ansible-playbook playbooks/serve_eagle3.yml -i inventory/local`, the SGLang EMULATOR told to crash while it loads),
with the console the project's ansible.cfg gives (ansible.builtin.default, results as YAML, no -v). The failure
(the module's message, the crash class and exception, the hint, the deciding line, the log and the crash's traceback) is printed
exactly once, with no censored no_log block, and the task that fails after it repeats none of it: ansible-core 2.19
prints a failed task's message twice (its [ERROR] line and its fatal: block)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager

from ansible_run import free_port

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
API_KEY = "local-rehearsal-key"  # inventory/local's sglang_server_api_key
FAILED = "server sglang did not come up: why is shown just above"


def _play(playbook, prefix, port, *extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(PATH=BIN + os.pathsep + env.get("PATH", ""), ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
               ANSIBLE_NOCOLOR="1")
    cmd = [os.path.join(BIN, "ansible-playbook"), os.path.join("playbooks", playbook), "-i", "inventory/local",
           "-e", "eagle_deploy_prefix=%s" % prefix, "-e", "sglang_server_port=%d" % port] + list(extra)
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)


@contextmanager
def _host():
    """(prefix, port) of a rehearsal host of its own, its server stopped and its prefix removed at the end."""
    # Not under pytest's tmp dir: /tmp/pytest-of-root is 0700 and the service user must walk into the prefix.
    prefix = tempfile.mkdtemp(prefix="eagle-deploy-test-")
    os.chmod(prefix, 0o755)
    port = free_port()
    try:
        yield prefix, port
    finally:
        stopped = _play("stop.yml", prefix, port)
        assert stopped.returncode == 0, stopped.stdout[-3000:] + stopped.stderr[-3000:]
        shutil.rmtree(prefix, ignore_errors=True)


def test_a_crash_while_loading_is_printed_once():
    with _host() as (prefix, port):
        proc = _play("serve_eagle3.yml", prefix, port, "-e", "sglang_emulator_scenario=crash_loading")
        out = proc.stdout + proc.stderr
        assert proc.returncode == 2, out[-4000:]
        launch = out.index("TASK [sglang_server : Launch SGLang and wait for health]")
        shown = out.index("TASK [sglang_server : Show why the server did not come up]")
        fail = out.index("TASK [sglang_server : Fail when the server did not come up]")
        assert launch < shown < fail, out[launch:]
        parts = ("server crashed: cuda_oom (", "crash class: cuda_oom (", "hint: CUDA out of memory: ",
                 "deciding line ", "log: %s/var/log/sglang/sglang_r1.log" % prefix, "---- traceback ----",
                 ", in load_weights_and_postprocess")
        # the launch itself prints no failure: its result goes on to the two tasks after it (a progress line or a
        # warning of a busy machine may come between)
        launched = out[launch:shown]
        assert "changed: [localhost]" in launched and "fatal:" not in launched and "[ERROR]" not in launched, launched
        assert not [part for part in parts if part in launched], launched
        # every part of the failure once, in the one task that shows it: the crash's traceback (the loader's frames),
        # not the log's tail
        for part in parts:
            assert out.count(part) == 1, (part, out[launch:])
            assert shown < out.index(part) < fail, (part, out[launch:])
        assert "---- log tail ----" not in out, out[launch:]
        # the task that fails says only that: its [ERROR] line and its fatal: block, nothing of the crash
        end = out[fail:]
        assert end.count(FAILED) == 2 and "cuda_oom" not in end and "OutOfMemoryError" not in end, end
        assert "[ERROR]: Task failed: Action failed: " + FAILED in end, end
        assert "hidden due to the fact that" not in out[launch:], out[launch:]
        assert API_KEY not in out


def test_the_incident_at_the_first_decode_is_printed_once():
    """The EAGLEWorkerV2 incident (the emulator's eagle scenario, the early-init patch off): the server comes up and
    its first decode request crashes it. The smoke test's rescue prints the supervisor's failure once; no censored
    block of the request (no_log: it carries the API key) comes before it."""
    with _host() as (prefix, port):
        proc = _play("serve_eagle3.yml", prefix, port, "-e", "sglang_emulator_scenario=eagle",
                     "-e", "sglang_patch_enabled=false")
        out = proc.stdout + proc.stderr
        assert proc.returncode == 2, out[-4000:]
        request = out.index("TASK [sglang_server : Generate from a fixed prompt]")
        shown = out.index("TASK [sglang_server : Show why the smoke test failed]")
        fail = out.index("TASK [sglang_server : Fail when the smoke test failed]")
        assert request < shown < fail, out[request:]
        exception = "AttributeError: 'EAGLEWorkerV2' object has no attribute 'spec_disable_batch_threshold'"
        for part in ("crash class: first_request_crash (" + exception + ")", "hint: ", "deciding line ",
                     "---- traceback ----", ", in forward_batch_generation"):
            assert out[request:].count(part) == 1, (part, out[request:])
            assert shown < out.index(part, request) < fail, (part, out[request:])
        assert "smoke test failed at 'Check that the fixed prompt produced text': " in out[shown:fail], out[shown:]
        end = out[fail:]
        assert "first_request_crash" not in end and exception not in end, end
        assert "hidden due to the fact that" not in out[request:], out[request:]
        assert API_KEY not in out

"""Verify scenario `sglang-cpu`: REAL SGLang on CPU after converge, idempotence and the fault cases.

Values come from molecule.yml's inventory, the state from the host itself.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))


from tests.molecule_support import hostcheck  # noqa: E402 - importable once sys.path has the repository root

V = hostcheck.scenario_vars()
USER = V["sglang_install_user"]
VERSION = V["sglang_install_version"]
KEY = V["sglang_server_api_key"]
PORT = V["sglang_server_port"]
VENV = f"/opt/sglang/venv-{VERSION}"
LOG_DIR, RUN_DIR, CONFIG = hostcheck.LOG_DIR, hostcheck.RUN_DIR, hostcheck.CONFIG
BASE_URL = f"http://127.0.0.1:{PORT}"
FAULTS = "/var/tmp/eagle-faults"


def fault(host, case):
    return json.loads(host.file(f"{FAULTS}/{case}.json").content_string)


def test_venv_holds_pinned_sglang_and_cpu_torch(host):
    out = host.check_output(
        f"{VENV}/bin/python -c 'import importlib.metadata as m; print(m.version(\"sglang\"), m.version(\"torch\"))'")
    sglang, torch = out.split()
    assert sglang == VERSION
    assert torch.endswith("+cpu")


def test_eagle_worker_v2_init_starts_with_the_early_init_assignments(host):
    path = f"{VENV}/lib/python3.11/site-packages/sglang/srt/speculative/eagle_worker_v2.py"
    body = hostcheck.early_init_statements(host.file(path).content_string)
    assert hostcheck.self_assignment(body[0]) == ("spec_disable_batch_threshold", 0)
    # The patched file still imports in the real SGLang venv.
    host.run_test(f"{VENV}/bin/python -c 'import sglang.srt.speculative.eagle_worker_v2'")


def test_config_file_is_private_and_holds_the_key(host):
    config = host.file(CONFIG)
    assert (config.mode, config.user) == (0o600, USER)
    assert KEY in config.content_string
    assert "device: \"cpu\"" in config.content_string


def test_no_api_key_on_any_command_line(procs):
    assert not [p for p in procs if any(KEY in a for a in p["argv"])]


def test_no_api_key_in_any_environment_or_ps_line(host, state):
    assert hostcheck.environ_holders(host, KEY) == []
    # Not vacuous: the scan reads the environment of the service user's server (it holds PYTHONUNBUFFERED=1).
    assert f"/proc/{state['pid']}/environ" in hostcheck.environ_holders(host, "PYTHONUNBUFFERED=1")
    ps = host.check_output("ps -eww -o user=,pid=,args=")
    assert KEY not in ps and f"-I -B {RUN_DIR}/supervisor {RUN_DIR} sglang" in ps  # ps shows the supervisor


def test_api_key_is_in_no_file_under_the_log_dir(host):
    """Real SGLang logs its server_args, api_key included; the supervisor's log copy masked it before it reached the
    disk (the attempt log, and nothing in the run dir: the supervisor's own log, config and status included)."""
    found = host.run(f"grep -rlF -e {KEY} {LOG_DIR} {RUN_DIR}")
    assert (found.rc, found.stdout) == (1, ""), f"files holding the key: {found.stdout}"  # grep: 1 = no match
    # Not vacuous: the real server did log its server_args line, with the key masked in it.
    log = host.file(f"{LOG_DIR}/sglang_r1.log").content_string
    args = [line for line in log.splitlines() if "server_args=" in line]
    assert args and "'api_key': '***'" in args[0], args[:1]
    assert "[EMULATOR]" not in log
    assert host.file(f"{RUN_DIR}/sglang.watcher.json").exists  # scanned above: the supervisor's config is there


def test_the_supervisor_is_roots_and_sits_between_server_and_log(host, state, procs):
    """The supervisor program (detached here: no systemd in the container) is recorded as `watcher`; it runs as root,
    `python3 -I -B <run_dir>/supervisor RUN_DIR NAME` (the program the role installed), reads the server's output from the pipe that is
    the server's stdout and stderr, and holds the log file. No log writer process any more."""
    assert "log_writer" not in state and state["launcher"] == "detached"
    sup = state["watcher"]
    p = next(p for p in procs if p["pid"] == sup["pid"])
    assert (p["user"], p["start_time"], p["argv"]) == ("root", sup["start_time"], sup["cmdline"])
    assert Path(p["argv"][0]).name.startswith("python3")
    assert p["argv"][1:] == ["-I", "-B", f"{RUN_DIR}/supervisor", RUN_DIR, "sglang"]
    assert p["pid"] not in {q["pid"] for q in hostcheck.server_tree(procs, state["pid"])}  # not of the server's tree
    assert KEY.encode() not in host.file(f"/proc/{sup['pid']}/environ").content
    # The server's stdout and stderr are one pipe, written by the server and read by the supervisor alone.
    server = hostcheck.open_files(host, state["pid"])
    pipe = server["1"][0]
    assert pipe.startswith("pipe:") and server["2"][0] == pipe and server["1"][1] & 3 == 1
    held = {fd: flags for fd, (target, flags) in hostcheck.open_files(host, sup["pid"]).items() if target == pipe}
    assert len(held) == 1 and list(held.values())[0] & 3 == 0, held  # the read end only
    tree = {q["pid"] for q in hostcheck.server_tree(procs, state["pid"])}
    assert state["pid"] in hostcheck.holders(host, pipe) and set(hostcheck.holders(host, pipe)) <= tree | {sup["pid"]}
    # The supervisor writes the attempt's log; the server has no descriptor of it.
    log = f"{LOG_DIR}/sglang_r1.log"
    assert log in {t for t, _f in hostcheck.open_files(host, sup["pid"]).values()}
    assert log not in {t for t, _f in server.values()}


def test_real_sglang_tree_runs_as_the_service_user(state, procs):
    tree = hostcheck.server_tree(procs, state["pid"])
    assert {p["user"] for p in tree} == {USER}
    leader = next(p for p in tree if p["pid"] == state["pid"])
    assert leader["argv"] == state["cmdline"]
    assert leader["argv"][1:3] == ["-m", "sglang.launch_server"]
    titles = {p["argv"][0] for p in tree if p["argv"]}
    assert {"sglang::scheduler", "sglang::detokenizer"} <= titles


def test_the_real_server_is_the_only_sglang_left(state, procs):
    """converge started one server; the fault servers (a, b) and their supervisors are gone, nothing else launched
    (c, d). The one supervisor left is the server's own (its argv names the installed program, <run_dir>/supervisor)."""
    tree = {p["pid"] for p in hostcheck.server_tree(procs, state["pid"])}
    supervisors = [p for p in procs if p["argv"][1:4] == ["-I", "-B", f"{RUN_DIR}/supervisor"]]
    sglang = [p for p in procs if any("sglang" in a for a in p["argv"][:3])] + supervisors
    assert {p["pid"] for p in sglang} <= tree | {state["watcher"]["pid"]}
    assert [p["pid"] for p in supervisors] == [state["watcher"]["pid"]]
    assert not [p for p in procs if p["state"] == "Z"], "zombies left"


def test_port_is_listening(host):
    assert host.socket(f"tcp://127.0.0.1:{PORT}").is_listening


def test_health_and_generate(host):
    assert hostcheck.http_status(host, f"{BASE_URL}/health_generate")[0] == 200
    info = json.loads(hostcheck.http_status(host, f"{BASE_URL}/get_model_info", KEY)[1])
    assert "emulator" not in info
    assert info["model_path"] == V["sglang_server_model_path"]
    request = {"text": "The capital of France is", "sampling_params": {"max_new_tokens": 4, "temperature": 0}}
    code, text = hostcheck.http_status(host, f"{BASE_URL}/generate", KEY, "POST", request)
    assert code == 200
    assert json.loads(text)["meta_info"]["completion_tokens"] == 4
    assert hostcheck.http_status(host, f"{BASE_URL}/generate", None, "POST", request)[0] == 401


def test_log_numbering_and_a_single_attempt_of_the_main_server(host, state):
    link = host.file(f"{LOG_DIR}/sglang.log")
    assert link.is_symlink
    assert link.linked_to == f"{LOG_DIR}/sglang_r1.log"
    assert state["attempt"] == 1  # idempotence and the fault cases did not restart it
    files = host.file(LOG_DIR).listdir()
    assert sorted(f for f in files if re.fullmatch(r"sglang_r\d+\.log", f)) == ["sglang_r1.log"]
    # The fault servers logged under their own names, attempt 1 each.
    assert {"fault_a_r1.log", "fault_b_r1.log"} <= set(files)
    assert host.file(f"{LOG_DIR}/fault_a.log").linked_to == f"{LOG_DIR}/fault_a_r1.log"
    # Nothing was launched for c and d.
    assert not [f for f in files if f.startswith(("fault_c", "fault_d"))]


def test_fault_a_bad_model_config_crash_was_classified_early(host):
    a = fault(host, "a")
    assert a["crash_class"] == "bad_config"
    assert "NoSuchArchForCausalLM" in a["crash_exception"]
    assert a["elapsed"] < 200
    log = host.file(f"{LOG_DIR}/fault_a_r1.log").content_string
    assert "NoSuchArchForCausalLM" in log


def test_fault_b_scheduler_death_reported_within_seconds(host):
    b = fault(host, "b")
    assert b["crash_class"] in ("child_died", "child_sigquit")
    assert b["kill_to_verdict_s"] < 3.0
    # After the verdict the stop ended the rest of fault_b's tree and its supervisor; its config went with it.
    assert not host.file(f"/proc/{b['leader_pid']}").exists
    assert not host.file(f"/proc/{b['supervisor_pid']}").exists
    assert not host.file(f"{RUN_DIR}/fault_b.watcher.json").exists
    log = host.file(f"{LOG_DIR}/fault_b_r1.log").content_string
    assert "server_args=" in log  # the supervisor copied real SGLang's output
    # The last lines of the dying server reach the log: SGLang's parent logs one when it is signalled after the
    # kill (0.5.23: "Subprocess scheduler_0 (pid=N) crashed", "SIGQUIT received. ..."; older: "Received sigquit from
    # a child process"; or the stop's "SIGTERM received. ..."), then ends; the supervisor copied it before it ended.
    assert re.search(r"SIGQUIT received|SIGTERM received|Received sigquit from a child process", log), log[-2000:]


def test_fault_c_foreign_port_holder_untouched(host):
    c = fault(host, "c")
    holder = host.process.get(pid=c["foreign_pid"])
    assert holder.user == "root"
    assert "http.server" in holder.args
    assert host.socket("tcp://127.0.0.1:30012").is_listening


def test_fault_d_reused_pid_never_signalled(host):
    d = fault(host, "d")
    stat = host.file(f"/proc/{d['unrelated_pid']}/stat").content_string
    start_time = int(stat[stat.rindex(")") + 2:].split()[19])
    assert start_time == d["unrelated_start_time"]
    assert host.process.get(pid=d["unrelated_pid"]).args == "sleep 3601"


def test_the_real_parser_and_the_source_reading_know_the_same_options(host):
    # sglang_args_check on the host, where the real SGLang imports: its own parser and the ast reading of its
    # sources (the fallback used where SGLang cannot import) must know the same options.
    e = fault(host, "e")
    assert e["parser"]["method"] == "sglang_parser" and e["ast"]["method"] == "ast"
    assert e["parser"]["option_count"] == e["ast"]["option_count"] > 300

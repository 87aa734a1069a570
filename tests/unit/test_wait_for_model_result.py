"""wait_for_model's result against its one schema (module_utils/sglang_result_schema.py): the module's RETURN documentation
both ways (names, types, where a key is present), the keys the code writes (an AST scan of every result write of the
module_utils, the supervisor's report and the action plugin; the module's unit tests check every result they produce,
tests/unit/module_harness.py), and what the operator reads of a result (module_utils/sglang_result_text.py: the
summary line and the failure's message), composed once and put into the result by the action plugin."""
from __future__ import annotations

import ast
import os
import re

import pytest
import yaml

from ansible.module_utils import sglang_result_schema, sglang_result_text
from ansible.module_utils.basic import AnsibleModule

import module_harness
from action_harness import REPO, Clock, load_plugin, make_action
from module_harness import SCHED_CRASH, module_exits, run, world  # noqa: F401 - fixtures

plugin_mod = load_plugin("wait_for_model", "eagle_action_wait_for_model_result")

# Every file that writes keys of the result: the run and its executors' reports (sglang_reports.build_result makes
# the result of them), the supervisor's report (merged into a failed result), the watch of state=watched and the
# action plugin (steps merged, a group's words, the text).
# The names a result (or a report) goes by there: ``<anything>.result``, these, and a dict literal yielded.
WRITERS = {
    "module_utils/sglang_run.py": set(),  # the run's own reports: ``yield {...}``
    "module_utils/sglang_settings.py": {"report"},
    "module_utils/sglang_stop.py": {"report"},
    "module_utils/sglang_launch.py": {"report"},
    "module_utils/sglang_lock.py": {"report"},
    "module_utils/sglang_keep.py": {"report"},
    "module_utils/sglang_unit_guard.py": {"report"},
    "module_utils/sglang_status_file.py": {"r"},
    "module_utils/sglang_serving_watch.py": {"r", "report"},
    "module_utils/sglang_verdict.py": {"r"},  # explain(): the supervisor's report
    "module_utils/sglang_supervisor.py": {"fields"},  # the report's exit_status, after_ready
    "module_utils/sglang_result_text.py": {"result"},
    "action_plugins/wait_for_model.py": {"out", "result"},
}


def documented(module="wait_for_model"):
    """The RETURN documentation of library/<module>.py, parsed as ansible-doc parses it."""
    with open(os.path.join(REPO, "library", module + ".py"), encoding="utf-8") as fh:
        tree = ast.parse(fh.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "RETURN":
            return yaml.safe_load(node.value.value)
    raise AssertionError("library/%s.py has no RETURN" % module)


def schema_keys():
    return dict((k.name, k) for k in sglang_result_schema.DOCUMENTED)


# ------------------------------------------------------------------ the documentation, both ways
def test_every_documented_key_is_in_the_schema():
    missing = sorted(set(documented()) - set(schema_keys()))
    assert not missing, "RETURN documents keys module_utils/sglang_result_schema.py lacks: %s" % missing


def test_every_key_of_the_schema_is_documented():
    missing = sorted(set(schema_keys()) - set(documented()))
    assert not missing, "module_utils/sglang_result_schema.py has keys RETURN does not document: %s" % missing


def test_the_documented_types_are_the_schemas():
    doc, keys = documented(), schema_keys()
    wrong = []
    for name in sorted(set(doc) & set(keys)):
        documented_as = (doc[name].get("type"), doc[name].get("elements"))
        if documented_as != (keys[name].type, keys[name].elements):
            wrong.append("%s: RETURN %s/%s, schema %s/%s" % ((name,) + documented_as + (keys[name].type, keys[name].elements)))
    assert not wrong, wrong


def test_the_keys_only_a_failure_has_are_documented_as_returned_on_failure():
    doc, keys = documented(), schema_keys()
    on_failure = set(name for name, entry in doc.items()
                     if re.match(r"on failure\b", entry["returned"]) or re.search(r"\bfailed\b", entry["returned"]))
    assert on_failure == set(name for name, k in keys.items() if k.present == sglang_result_schema.FAILURE)


def test_the_common_keys_are_no_documented_ones():
    assert not set(k.name for k in sglang_result_schema.COMMON) & set(documented())
    assert all(k.present in (sglang_result_schema.FAILURE, sglang_result_schema.SUCCESS, sglang_result_schema.BOTH) and
               k.type in sglang_result_schema.PYTHON_TYPES for k in sglang_result_schema.KEYS.values())
    assert all((k.elements is None) == (k.type != "list") for k in sglang_result_schema.KEYS.values())


def test_sglang_info_returns_no_key_of_this_result_but_unit_of_its_own():
    """sglang_info reports on an installation (its own RETURN); of wait_for_model's keys it shares only ``unit``, the
    unit's state as systemctl shows it there, not a unit name: it returns no result of this schema."""
    assert set(documented("sglang_info")) & set(schema_keys()) == {"unit"}
    assert documented("sglang_info")["unit"]["type"] == "dict" != schema_keys()["unit"].type


# ------------------------------------------------------------------ what the code writes
def writes(path, names, root=REPO):
    """(line, key) of every constant key written into a result in ``path``: ``X[key] = ...``, ``X.update(key=...)``
    and ``X.setdefault(key, ...)``, where X is ``<anything>.result`` or a name of ``names``, and the constant keys of
    a report yielded as a dict literal (``yield {key: ...}``)."""
    def is_result(node):
        return (isinstance(node, ast.Attribute) and node.attr == "result") or (
            isinstance(node, ast.Name) and node.id in names)
    with open(os.path.join(root, path), encoding="utf-8") as fh:
        tree = ast.parse(fh.read())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Yield) and isinstance(node.value, ast.Dict):
            found += [(node.lineno, k.value) for k in node.value.keys
                      if isinstance(k, ast.Constant) and isinstance(k.value, str)]
        elif isinstance(node, (ast.Assign, ast.AugAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(target, ast.Subscript) and is_result(target.value) and \
                        isinstance(target.slice, ast.Constant) and isinstance(target.slice.value, str):
                    found.append((node.lineno, target.slice.value))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and is_result(node.func.value):
            if node.func.attr == "update":
                found += [(node.lineno, kw.arg) for kw in node.keywords if kw.arg]
            elif node.func.attr == "setdefault" and node.args and isinstance(node.args[0], ast.Constant):
                found.append((node.lineno, node.args[0].value))
    return found


@pytest.mark.parametrize("path", sorted(WRITERS))
def test_every_key_the_code_writes_into_a_result_is_in_the_schema(path):
    found = writes(path, WRITERS[path])
    assert found, "%s: no result write found: the scan no longer reads this file" % path
    unknown = ["%s:%d %s" % (path, line, key) for line, key in found if key not in sglang_result_schema.KEYS]
    assert not unknown, "keys written that module_utils/sglang_result_schema.py lacks: %s" % unknown


def test_the_scan_sees_a_write_of_an_unknown_key(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f(w, r):\n    w.result['restarted_at'] = 1\n    r.update(pid=1, bogus=2)\n"
                   "    r.setdefault('other', 3)\n    yield {'odd': 4}\n")
    assert sorted(writes("bad.py", {"r"}, root=str(tmp_path))) == [
        (2, "restarted_at"), (3, "bogus"), (3, "pid"), (4, "other"), (5, "odd")]


# ------------------------------------------------------------------ results the module produces
@pytest.mark.usefixtures("module_exits")
def test_the_results_of_a_healthy_start_and_a_crash_are_the_schemas(world):  # noqa: F811 - fixture
    world.health = lambda t: 200
    status, r = run(world)
    assert status == "ok" and sglang_result_schema.problems(r) == []
    world.children = {4100: 111}
    world.cmdlines = {4100: ["/usr/bin/python3", "-c", "from multiprocessing.spawn import spawn_main"]}
    world.write(3, SCHED_CRASH)
    world.at(3.05, lambda: world.children.pop(4100))
    world.health = lambda t: None
    status, r = run(world, force_restart=True)
    assert status == "failed" and r["crash_class"] == "nccl"
    assert {"exit_status", "after_ready", "evidence", "hint", "deciding_line"} <= set(r)
    assert sglang_result_schema.problems(r) == []


def test_a_result_that_disagrees_is_named():
    found = sglang_result_schema.problems({"changed": True, "bogus": 1, "pid": "42", "summary": "s", "traceback": [1],
                                    "crash_class": "x", "_ansible_no_log": False})
    assert found == ["bogus: not a key of wait_for_model's result (module_utils/sglang_result_schema.py)",
                     "crash_class: present in a successful result, but only a failed one has it",
                     "pid: str, not int",
                     "traceback: an element 1 is not str",
                     "traceback: present in a successful result, but only a failed one has it"]
    assert sglang_result_schema.problems({"failed": True, "summary": "s", "rc": True}) == [
        "rc: bool, not int", "summary: present in a failed result, but only a successful one has it"]


def test_the_harness_fails_a_module_test_whose_result_has_a_key_the_schema_lacks():
    module = AnsibleModule.__new__(AnsibleModule)
    module.argument_spec = module_harness.wfm.argument_spec()
    with pytest.raises(AssertionError, match="restarted_at: not a key"):
        module_harness.fail_json(module, "failed", restarted_at=1.0)
    with pytest.raises(module_harness.ExitJson):
        module_harness.exit_json(module, pid=1)


def test_the_schema_is_a_typed_dict_too():
    assert set(sglang_result_schema.WaitForModelResult.__annotations__) == set(sglang_result_schema.KEYS)


@pytest.mark.parametrize("name", ["sglang_result_schema", "sglang_result_text"])
def test_the_schema_and_its_text_run_on_the_target(name):
    """Standard library only, Python 3.8 syntax (what a target of ansible-core 2.19 may run)."""
    with open(os.path.join(REPO, "module_utils", name + ".py"), encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), feature_version=(3, 8))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            # a relative import: the project's own module_utils, itself standard library only (sglang_progress's
            # control-character escape, the one function through which log text reaches the operator)
            imported.add(("." if node.level else "") + node.module.split(".")[0])
    assert imported <= {"__future__", "collections", "re", "typing", ".sglang_progress"}, imported


# ------------------------------------------------------------------ what the operator reads
CRASH = {
    "failed": True, "changed": True, "crash_class": "python_exception", "attempt": 2, "pid": 1909,
    "msg": "server crashed: python_exception (AttributeError: 'EAGLEWorkerV2' object has no attribute "
           "'spec_disable_batch_threshold') — EAGLEWorkerV2 was only half constructed",
    "crash_exception": "AttributeError: 'EAGLEWorkerV2' object has no attribute 'spec_disable_batch_threshold'",
    "hint": "apply the early-init patch (sglang_patch_enabled: true)",
    "deciding_line": "[2026-12-06 06:27:01] Scheduler hit an exception: Traceback (most recent call last):",
    "deciding_lineno": 54, "log_path": "/var/log/sglang/sglang_r2.log",
    "traceback": ["[2026-12-06 06:27:01] Scheduler hit an exception: Traceback (most recent call last):",
                  "AttributeError: 'EAGLEWorkerV2' object has no attribute 'spec_disable_batch_threshold'"],
    "log_tail": ["[2026-12-06 06:26:40] server_args=ServerArgs(model_path='/m', api_key='sk-very-secret-key-1234')",
                 "[2026-12-06 06:27:01] Scheduler hit an exception: Traceback (most recent call last):",
                 "AttributeError: 'EAGLEWorkerV2' object has no attribute 'spec_disable_batch_threshold'"],
}


def test_the_message_of_a_crash_with_a_traceback():
    text = sglang_result_text.failure_message(CRASH, "/var/log/sglang/sglang.log")
    assert text.split("\n") == [
        CRASH["msg"],
        "crash class: python_exception (AttributeError: 'EAGLEWorkerV2' object has no attribute "
        "'spec_disable_batch_threshold')",
        "hint: apply the early-init patch (sglang_patch_enabled: true)",
        "deciding line 54: [2026-12-06 06:27:01] Scheduler hit an exception: Traceback (most recent call last):",
        "log: /var/log/sglang/sglang_r2.log",
        "---- traceback ----",
        "[2026-12-06 06:27:01] Scheduler hit an exception: Traceback (most recent call last):",
        "AttributeError: 'EAGLEWorkerV2' object has no attribute 'spec_disable_batch_threshold'",
    ]
    assert "sk-very-secret" not in text
    # the traceback, not the tail: each part once
    assert "---- log tail ----" not in text and "server_args=" not in text


def test_a_traceback_is_masked_and_a_crash_without_one_shows_the_masked_tail():
    secret = dict(CRASH, traceback=["Traceback (most recent call last):", "  ServerArgs(api_key='sk-in-the-trace')",
                                    "ValueError: bad"])
    text = sglang_result_text.failure_message(secret)
    assert text.split("\n")[-4:] == ["---- traceback ----", "Traceback (most recent call last):",
                                     "  ServerArgs(api_key=***)", "ValueError: bad"]
    assert "sk-in-the-trace" not in text
    for no_traceback in (dict(CRASH, traceback=None), {k: v for k, v in CRASH.items() if k != "traceback"},
                         dict(CRASH, traceback=[])):
        text = sglang_result_text.failure_message(no_traceback)
        assert text.split("\n")[5:] == [
            "---- log tail ----",
            "[2026-12-06 06:26:40] server_args=ServerArgs(model_path='/m', api_key=***)",
            "[2026-12-06 06:27:01] Scheduler hit an exception: Traceback (most recent call last):",
            "AttributeError: 'EAGLEWorkerV2' object has no attribute 'spec_disable_batch_threshold'",
        ]
        assert "---- traceback ----" not in text and "sk-very-secret" not in text


def test_a_module_whose_output_could_not_be_read_shows_its_last_lines_escaped_and_masked():
    """A killed module or an interpreter error: ansible-core's result has module_stdout/module_stderr and no crash
    class; the launch task prints no fatal block of its own, so the message carries their last lines."""
    stderr = "\n".join(["line %d" % i for i in range(30)] + [
        "Traceback (most recent call last):", "  api_key='sk-in-stderr'", "\x1b[2Jcleared", "Killed", ""])
    text = sglang_result_text.failure_message({
        "failed": True, "msg": "MODULE FAILURE: No start of json char found\nSee stdout/stderr for the exact error",
        "module_stderr": stderr, "module_stdout": "partial output\n", "rc": 137})
    lines = text.split("\n")
    assert lines[:3] == ["MODULE FAILURE: No start of json char found", "See stdout/stderr for the exact error",
                         "---- module stderr (last lines) ----"]
    assert lines[3:23] == ["line %d" % i for i in range(14, 30)] + [
        "Traceback (most recent call last):", "  api_key=***", "\\x1b[2Jcleared", "Killed"]
    assert lines[23:] == ["---- module stdout (last lines) ----", "partial output"]
    assert "sk-in-stderr" not in text and "\x1b" not in text
    # an empty output adds nothing; a crash class keeps the crash's own parts (no module output there)
    assert sglang_result_text.failure_message({"failed": True, "msg": "m", "module_stderr": "",
                                               "module_stdout": " \n"}) == "m"
    assert "module stderr" not in sglang_result_text.failure_message(dict(CRASH, module_stderr="x"))


def test_the_message_of_an_uncertain_class_without_a_deciding_line_or_log():
    text = sglang_result_text.failure_message({"failed": True, "msg": "server crashed: cuda_oom", "crash_class":
                                               "cuda_oom", "class_uncertain": True, "crash_exception": None,
                                               "deciding_lineno": None}, "/var/log/sglang/sglang.log")
    assert text.split("\n")[1:] == [
        "crash class: cuda_oom (uncertain: its line follows a raw request echo, where a client can write any line)",
        "hint: -", "deciding line ?: -", "log: /var/log/sglang/sglang.log", "---- log tail ----"]


def test_the_message_of_a_refusal_is_the_modules_message_alone():
    refusal = {"failed": True, "msg": "port 30000 is held by a process that is not ours: nginx (PID 12). Nothing was "
                                      "stopped or launched; stop it or choose another port.", "launcher": "detached"}
    assert sglang_result_text.failure_message(refusal) == refusal["msg"]
    assert sglang_result_text.failure_message({"failed": True}) == "the server did not come up"


def test_the_line_of_a_healthy_keep():
    keep = {"changed": False, "restart_reason": None, "pid": 42, "attempt": 1, "elapsed": 0.0,
            "log_path": "/var/log/sglang/sglang_r1.log", "log_offset": 1834}
    assert sglang_result_text.summary(keep, "sglang") == \
        "server sglang: unchanged, healthy, pid 42, attempt 1, 0.0 s, log /var/log/sglang/sglang_r1.log"


def test_the_line_of_an_attach_and_of_a_restart_that_stopped_the_old_server():
    attach = {"changed": False, "restart_reason": None, "pid": 42, "attempt": 3, "elapsed": 41.2,
              "log_path": "/l/sglang_r3.log",
              "msg": "attached to our server (same fingerprint) and it became healthy"}
    assert sglang_result_text.summary(attach, "emu") == \
        "server emu: unchanged, healthy, pid 42, attempt 3, 41.2 s, log /l/sglang_r3.log"
    restart = {"changed": True, "restart_reason": "fingerprint changed: argv", "pid": 42, "attempt": 2,
               "elapsed": 95.0, "log_path": "/l/sglang_r2.log",
               "stopped": {"signalled": [7, 8], "killed": [9], "remaining": [], "seconds": 5.7},
               "gpu_release": {"below_mib": 2048, "seconds": 0.026, "polls": 1, "gpus": []}}
    assert sglang_result_text.summary(restart, "sglang") == (
        "server sglang: restarted (fingerprint changed: argv), pid 42, old server stopped (PIDs 7, 8, 9) in 5.7 s, "
        "GPU memory back below 2048 MiB after 0.026 s, attempt 2, 95.0 s, log /l/sglang_r2.log")


def test_the_line_of_a_keep_that_put_its_supervisor_back_says_so_not_restarted():
    restored = {"changed": True, "restart_reason": None, "supervisor": "restored", "pid": 42, "attempt": 1,
                "elapsed": 0.0, "log_path": "/l/sglang_r1.log"}
    assert sglang_result_text.summary(restored, "sglang").startswith(
        "server sglang: kept, healthy, its supervisor program put back, pid 42,")
    updated = dict(restored, supervisor=None)
    assert sglang_result_text.summary(updated, "sglang").startswith("server sglang: kept, healthy, pid 42,")


def test_the_text_is_put_in_once_the_steps_are_merged():
    """The action plugin: the first step stopped the old server and launched, the last one is the verdict; the
    summary names the stop, the restart's reason and the last step's attempt; a failure gets its message instead."""
    first = {"changed": True, "pending": True, "restart_reason": "force_restart", "attempt": 4,
             "stopped": {"signalled": [7], "killed": [], "remaining": [], "seconds": 1.5},
             "progress": {"phase": "launching", "attempt": 4, "elapsed": 1.0, "status": None, "shards": None,
                          "eta": None, "last_load": None, "launcher": "detached", "verdict": None}}
    last = {"changed": False, "pid": 4242, "attempt": 4, "elapsed": 12.0, "log_path": "/var/log/x/emu_r4.log",
            "invocation": {"module_args": {"name": "emu", "log_dir": "/var/log/x"}}}
    script = [first, last]
    action = make_action(plugin_mod, {"argv": ["serve"], "log_dir": "/var/log/x"},
                         lambda module_args=None, task_vars=None, **kw: dict(script.pop(0)), Clock(),
                         action="ansible.legacy.wait_for_model")
    action._say = lambda line: None
    res = action.run(task_vars={"inventory_hostname": "h"})
    assert res["summary"] == ("server emu: restarted (force_restart), pid 4242, old server stopped (PIDs 7) in 1.5 s, "
                              "attempt 4, 12.0 s, log /var/log/x/emu_r4.log")
    assert "failure_message" not in res and sglang_result_schema.problems(res) == []

    script = [dict(CRASH, log_path=None)]
    action = make_action(plugin_mod, {"name": "emu", "argv": ["serve"], "log_dir": "/var/log/x"},
                         lambda module_args=None, task_vars=None, **kw: dict(script.pop(0)), Clock(),
                         action="ansible.legacy.wait_for_model")
    action._say = lambda line: None
    res = action.run(task_vars={"inventory_hostname": "h"})
    assert res["failure_message"].startswith(CRASH["msg"] + "\ncrash class: python_exception (AttributeError")
    assert "\nlog: /var/log/x/emu.log\n" in res["failure_message"]  # the result names no log: the task's
    assert "summary" not in res and sglang_result_schema.problems(res) == []


def test_a_stop_or_a_watch_gets_no_text():
    for state in ("stopped", "watched"):
        script = [{"changed": False, "msg": "ok"}]
        action = make_action(plugin_mod, {"state": state, "log_dir": "/var/log/x"},
                             lambda module_args=None, task_vars=None, **kw: dict(script.pop(0)), Clock(),
                             action="ansible.legacy.wait_for_model")
        res = action.run(task_vars={"inventory_hostname": "h"})
        assert "summary" not in res and "failure_message" not in res


def test_a_failed_watch_gets_its_failure_message_and_the_role_composes_none():
    """The smoke test's rescue prints the failure_message of its failed watch: composed here, masked here; the role
    keeps no Jinja copy of the message or of its mask."""
    script = [dict(CRASH, log_path=None)]
    action = make_action(plugin_mod, {"state": "watched", "log_dir": "/var/log/x"},
                         lambda module_args=None, task_vars=None, **kw: dict(script.pop(0)), Clock(),
                         action="ansible.legacy.wait_for_model")
    action._say = lambda line: None
    res = action.run(task_vars={"inventory_hostname": "h"})
    assert res["failure_message"].startswith(CRASH["msg"] + "\ncrash class: python_exception (AttributeError")
    with open(os.path.join(REPO, "roles", "sglang_server", "vars", "main.yml"), encoding="utf-8") as fh:
        role_vars = yaml.safe_load(fh)
    assert "_sglang_server_secret_re" not in role_vars and "_sglang_server_secret_repl" not in role_vars
    with open(os.path.join(REPO, "roles", "sglang_server", "tasks", "smoke.yml"), encoding="utf-8") as fh:
        smoke = fh.read()
    assert "failure_message" in smoke and "crash_class" not in smoke and "log_tail" not in smoke

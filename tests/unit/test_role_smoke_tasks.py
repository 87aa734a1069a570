"""The smoke test's tasks (roles/sglang_server/tasks/smoke.yml), read as data: a failure of its own watches (the mark
before the requests, the watch after them) is printed once, as the launch's is (issue 34): the watch does not fail
itself (ansible-core would print its message twice and its whole result), a short fail task follows it, and the
rescue prints the watch's registered failure_message. The message shown is registered for a caller's rescue (the
bench's restore) to read. No emulator scenario makes the watch after the burst fail on its own, so this is the
task file's structure, rendered with jinja2 and Ansible's own filters and tests."""
from __future__ import annotations

import os

import yaml
from ansible.module_utils import sglang_result_text

from test_role_service_tasks import environment

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMOKE = os.path.join(REPO, "roles", "sglang_server", "tasks", "smoke.yml")
MARK = "Note where the server log ends before the smoke requests"
WATCH = "Watch the server after the requests (a crash on any of them is reported with its class)"
MARK_FAIL = "Fail when the server could not be watched before the smoke requests"
WATCH_FAIL = "Fail when the server failed after the requests"
CRASHED = sglang_result_text.add_text(
    {"failed": True, "msg": "server crashed: cuda_oom", "crash_class": "cuda_oom", "hint": "lower it",
     "traceback": ["Traceback (most recent call last):", "torch.OutOfMemoryError: CUDA out of memory"]},
    "sglang", "/var/log/sglang/sglang.log")


def smoke():
    with open(SMOKE, encoding="utf-8") as fh:
        (block,) = yaml.safe_load(fh)
    return block


def named(tasks, name):
    return [t for t in tasks if t.get("name") == name][0]


def expression(template):
    """A task's one ``{{ ... }}`` as a jinja2 expression (what it renders to, typed)."""
    template = template.strip()
    assert template.startswith("{{") and template.endswith("}}"), template
    return environment().compile_expression(template[2:-2].strip())


def true(condition, **values):
    return bool(environment().compile_expression(condition)(**values))


def test_the_watches_do_not_fail_themselves_and_a_short_fail_task_follows_each():
    block = smoke()["block"]
    names = [t["name"] for t in block]
    for watch, register, fail in ((MARK, "__sglang_server_smoke_mark", MARK_FAIL),
                                  (WATCH, "__sglang_server_smoke_watch", WATCH_FAIL)):
        task = named(block, watch)
        assert "ansible.legacy.wait_for_model" in task and task["failed_when"] is False, task
        assert task["register"] == register
        assert names[names.index(watch) + 1] == fail
        failing = named(block, fail)
        (when,) = [failing["when"]] if isinstance(failing["when"], str) else failing["when"]
        assert true(when, **{register: CRASHED}) and not true(when, **{register: {"changed": False, "pid": 1}})
        msg = failing["ansible.builtin.fail"]["msg"]
        assert "failure_message" not in msg and "ansible_failed_result" not in msg
        assert "why is shown below" in msg


def test_the_rescue_prints_the_failed_watch_s_message_once_and_registers_it():
    rescue = smoke()["rescue"]
    ask, show = named(rescue, "Ask the watcher what happened to the server"), named(rescue, "Show why the smoke test failed")
    verdict = expression(show["vars"]["__sglang_server_verdict"])
    env = environment()
    msg = env.from_string(show["ansible.builtin.debug"]["msg"])
    after = {"changed": False, "failure_message": "the watcher's verdict"}
    for failed_task, registered in ((MARK_FAIL, {"__sglang_server_smoke_mark": CRASHED}),
                                    (WATCH_FAIL, {"__sglang_server_smoke_mark": {"log_offset": 10},
                                                  "__sglang_server_smoke_watch": CRASHED})):
        task = {"name": failed_task}
        # no second watch: the failed one said it all
        assert not true(ask["when"], ansible_failed_task=task)
        shown = msg.render(ansible_failed_task=task, ansible_failed_result={"msg": "short"},
                           __sglang_server_verdict=verdict(ansible_failed_task=task, __sglang_server_after={"skipped": True},
                                                           **registered))
        assert shown == "smoke test failed at '%s': %s" % (failed_task, CRASHED["failure_message"])
        assert shown.count("crash class: cuda_oom") == 1 and "---- traceback ----" in shown
    # a failed request: the watcher is asked, and its verdict shown
    task = {"name": "Generate from a fixed prompt"}
    assert true(ask["when"], ansible_failed_task=task)
    assert verdict(ansible_failed_task=task, __sglang_server_after=after) == after
    # what was shown is registered for a caller's rescue, which sees only the short failure after it
    assert show["register"] == "sglang_server_smoke_failure"
    fail = named(rescue, "Fail when the smoke test failed")
    assert "why is shown just above" in fail["ansible.builtin.fail"]["msg"]

"""The bench's restore (roles/sglang_bench/tasks/sweep.yml, "Put the deployment back"): the server role prints a failed
launch's or smoke test's message once and fails with a short one ("why is shown just above"); the restore's rescue
keeps the composed message (crash class, exception, hint, traceback ...) for the report and the final proof, read
where the role registered it, and the short message of any other failed task. Rendered with jinja2 and Ansible's own
filters and tests, as the role's task has it."""
from __future__ import annotations

import os

import yaml
from ansible.module_utils import sglang_result_text

from test_role_service_tasks import environment

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SWEEP = os.path.join(REPO, "roles", "sglang_bench", "tasks", "sweep.yml")
CRASHED = sglang_result_text.add_text(
    {"failed": True, "msg": "server crashed: cuda_oom (torch.OutOfMemoryError)", "crash_class": "cuda_oom",
     "crash_exception": "torch.OutOfMemoryError", "hint": "lower --mem-fraction-static", "log_tail": ["a"]},
    "sglang", "/var/log/sglang/sglang.log")


def walk(tasks):
    for task in tasks or []:
        yield task
        for key in ("block", "rescue", "always"):
            yield from walk(task.get(key))


def restore_error():
    """The restore rescue's expression of the error, as a function of the variables it reads."""
    with open(SWEEP, encoding="utf-8") as fh:
        (note,) = [t for t in walk(yaml.safe_load(fh)) if t.get("name") == "Note that the deployment could not be put back"]
    template = note["ansible.builtin.set_fact"]["__sglang_bench_restore_error"].strip()
    assert template.startswith("{{") and template.endswith("}}"), template
    return environment().compile_expression(template[2:-2].strip())


def test_a_failed_launch_puts_its_composed_message_in_the_report():
    error = restore_error()(ansible_failed_task={"name": "Fail when the server did not come up"},
                            ansible_failed_result={"msg": "server sglang did not come up: why is shown just above"},
                            sglang_server_service=CRASHED)
    assert error == CRASHED["failure_message"]
    assert "crash class: cuda_oom (torch.OutOfMemoryError)" in error and "why is shown" not in error


def test_a_failed_smoke_test_puts_the_message_it_showed_in_the_report():
    shown = "smoke test failed at 'Generate from a fixed prompt': " + CRASHED["failure_message"]
    error = restore_error()(
        ansible_failed_task={"name": "Fail when the smoke test failed"},
        ansible_failed_result={"msg": "smoke test of sglang failed at 'Generate from a fixed prompt': why is shown "
                                      "just above"},
        sglang_server_service={"changed": True, "pid": 42, "summary": "server sglang: restarted"},
        sglang_server_smoke_failure={"msg": shown, "changed": False})
    assert error == shown and "crash class: cuda_oom" in error


def test_any_other_failure_keeps_its_own_message():
    render = restore_error()
    # a check of the role before its launch: the launch's result of an earlier restart is not this failure's
    assert render(ansible_failed_task={"name": "Check the server settings"},
                  ansible_failed_result={"msg": "sglang_server_port must be a port"},
                  sglang_server_service=CRASHED) == "sglang_server_port must be a port"
    assert render(ansible_failed_task={"name": "Fail when the server did not come up"},
                  ansible_failed_result={"msg": "short"}, sglang_server_service={"changed": True}) == "short"
    assert render(ansible_failed_task={"name": "x"}, ansible_failed_result={}) == "the role sglang_server failed"

"""The role's service tasks (roles/sglang_server/tasks/service.yml), read as data: one wait_for_model call per host
does stop, GPU release and launch (no check-mode plan, no separate stop, no gpu_facts wait), and the report line of
a restart names the stopped PIDs and the release seconds (composed by the action plugin's sglang_result_text, as
the plugin puts it into the result, and printed by the role's task: rendered with jinja2 and Ansible's own filters);
the failure's message is the result's own, printed once (issue 34): the launch does not fail itself, a debug task
prints the message and the task that fails says only that the server did not come up."""
from __future__ import annotations

import os

import jinja2
import yaml
from ansible.module_utils import sglang_result_text
from ansible.plugins.filter.core import FilterModule
from ansible.plugins.test.core import TestModule as AnsibleTests

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TASKS = os.path.join(REPO, "roles", "sglang_server", "tasks")
SERVICE = os.path.join(TASKS, "service.yml")


def tasks(path=SERVICE):
    with open(path, encoding="utf-8") as fh:
        top = yaml.safe_load(fh)
    out = []
    for task in top:
        out.append(task)
        for key in ("block", "rescue", "always"):
            out.extend(task.get(key) or [])
    return out


def by_name(name):
    return [t for t in tasks() if t.get("name") == name][0]


def test_one_wait_for_model_call_and_no_gpu_facts_wait():
    # the launch is tasks/launch.yml's one call, included by service.yml (and by rollback.yml: the same launch)
    assert not [t for t in tasks() if "ansible.legacy.wait_for_model" in t]
    include = by_name("Launch the deployment")
    assert include["ansible.builtin.include_tasks"]["file"] == "launch.yml"
    assert include["vars"]["_sglang_server_launch_name"] == "Launch SGLang and wait for health"
    calls = [t for t in tasks(os.path.join(TASKS, "launch.yml")) if "ansible.legacy.wait_for_model" in t]
    assert [t["name"] for t in calls] == ["{{ _sglang_server_launch_name }}"]
    assert not [t for t in tasks() if "ansible.legacy.gpu_facts" in t]
    launch = calls[0]["ansible.legacy.wait_for_model"]
    assert "check_mode" not in calls[0] and "prove_launch" not in launch
    assert "sglang_server_gpu_release_below_mib" in launch["gpu_release_below_mib"]
    assert "sglang_server_gpu_expected" in launch["gpu_release_below_mib"]
    assert "sglang_server_gpu_count" in launch["gpu_release_indices"]
    assert "sglang_server_gpu_release_timeout" in launch["gpu_release_timeout"]
    # a multi-node server's nodes launch together, joined (the action plugin), the rollback's launch included
    assert "_sglang_server_join" in launch["join"] and "_sglang_server_multinode" in launch["join"]


def test_the_rollback_launches_through_the_same_launch_joined():
    rollback = tasks(os.path.join(TASKS, "rollback.yml"))
    assert not [t for t in rollback if "ansible.legacy.wait_for_model" in t]
    include = [t for t in rollback if t.get("name") == "Put the last good deployment back"][0]
    assert include["ansible.builtin.include_tasks"]["file"] == "launch.yml"
    assert include["vars"]["_sglang_server_launch_name"] == "Put the last good deployment back and wait for health"
    # a group: each node reports (read only), then every node chooses from all the reports and restores
    names = [t.get("name") for t in rollback]
    assert names.index("Choose the last good deployment and put back its files") < names.index(
        "Choose the group's last good generation and put back its files on every node") < names.index(
        "Put the last good deployment back")
    report = rollback[names.index("Choose the last good deployment and put back its files")]
    assert "not _sglang_server_multinode" in report["ansible.legacy.sglang_good_deployment"]["restore"]
    group = rollback[names.index("Choose the group's last good generation and put back its files on every node")]
    assert group["ansible.legacy.sglang_good_deployment"]["restore"] is True
    assert "__sglang_server_rollback_choice" in group["ansible.legacy.sglang_good_deployment"]["group_choice"][
        "candidates"]
    decode = rollback[names.index("Decode on the rolled-back server")]
    assert "(_sglang_server_node_rank | int) <= 0" in decode["when"]


def test_a_group_records_and_rolls_back_on_every_node_after_rank0s_smoke():
    main = tasks(os.path.join(TASKS, "main.yml"))
    names = [t.get("name") for t in main]
    assert names.index("Smoke") < names.index("Record the group's deployment as good on every node") < names.index(
        "Roll the group back after rank 0's smoke test failed") < names.index("Fail when the group's smoke test failed")
    record = main[names.index("Record the group's deployment as good on every node")]
    assert record["ansible.builtin.include_tasks"]["file"] == "record_good.yml"
    recorded = tasks(os.path.join(TASKS, "record_good.yml"))[0]["ansible.legacy.sglang_good_deployment"]
    assert "_sglang_server_good_group" in recorded["group"]
    smoke = tasks(os.path.join(TASKS, "smoke.yml"))
    one = [t for t in smoke if t.get("name") == "Roll back to the last good deployment"][0]
    assert "not _sglang_server_multinode | bool" in one["when"]  # a group rolls back on every node, in main.yml


def environment():
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    # Ansible's own filters, but jinja2's `default` (Ansible's needs its templar; on undefined they agree)
    env.filters.update({k: v for k, v in FilterModule().filters().items() if k != "default"})
    env.tests.update(AnsibleTests().tests())
    return env


def render_report(service, model_info=None):
    """The line the role prints for a module result ``service``, its text put in as the action plugin puts it."""
    service = sglang_result_text.add_text(dict(service), "sglang", "/var/log/sglang/sglang.log")
    msg = by_name("Show what the server did")["ansible.builtin.debug"]["msg"]
    return environment().from_string(msg).render(sglang_server_name="sglang", sglang_server_service=service,
                                                 __sglang_server_model_info=model_info or {"skipped": True})


def render_failure(failed_result):
    msg = by_name("Show why the server did not come up")["ansible.builtin.debug"]["msg"]
    return environment().from_string(msg).render(sglang_server_service=failed_result)


def shown(task, result):
    """Whether ``task`` (its ``when``, a list or one condition) runs after a launch that returned ``result``."""
    conds = task.get("when")
    conds = conds if isinstance(conds, list) else [conds]
    return all(environment().from_string("{{ %s }}" % c).render(sglang_server_service=result) == "True"
               for c in conds)


def test_the_report_of_a_restart_names_the_stop_and_the_release():
    line = render_report({"changed": True, "restart_reason": "fingerprint changed: argv", "pid": 42, "attempt": 2,
                          "elapsed": 95.0, "log_path": "/var/log/sglang/sglang_r2.log",
                          "stopped": {"signalled": [7, 8], "killed": [], "remaining": [], "seconds": 5.7},
                          "gpu_release": {"below_mib": 2048, "seconds": 0.026, "polls": 1, "gpus": []}})
    assert line == ("server sglang: restarted (fingerprint changed: argv), pid 42, old server stopped (PIDs 7, 8) in "
                    "5.7 s, GPU memory back below 2048 MiB after 0.026 s, attempt 2, 95.0 s, "
                    "log /var/log/sglang/sglang_r2.log")  # tests/gpu/playbook_figures.py reads the stop and release


def test_the_report_of_a_restart_without_nvidia_smi_says_so():
    line = render_report({"changed": True, "restart_reason": "force_restart", "pid": 42,
                          "stopped": {"unit": "sglang-sglang.service", "seconds": 1.5, "how": "systemctl stop"},
                          "gpu_release": {"below_mib": 2048, "seconds": 0.0, "polls": 0, "gpus": [],
                                          "note": "nvidia-smi not found: no GPU memory to wait for"}})
    assert "old server stopped (sglang-sglang.service) in 1.5 s," in line
    assert "nvidia-smi not found: no GPU memory to wait for," in line


def test_the_report_of_a_no_op_is_short():
    line = render_report({"changed": False, "restart_reason": None, "pid": 42, "attempt": 1, "elapsed": 0.0,
                          "log_path": "/var/log/sglang/sglang_r1.log"})
    assert line == "server sglang: unchanged, healthy, pid 42, attempt 1, 0.0 s, log /var/log/sglang/sglang_r1.log"


def test_the_report_after_a_restart_carries_the_model_info():
    line = render_report({"changed": True, "restart_reason": "not running", "pid": 42, "attempt": 1, "elapsed": 3.5,
                          "log_path": "/var/log/sglang/sglang_r1.log"},
                         model_info={"json": {"model_path": "/models/m", "emulator": True}})
    assert line.startswith("server sglang: restarted (not running), pid 42, attempt 1, 3.5 s, log ")
    assert line.endswith('; /get_model_info: {"model_path": "/models/m", "emulator": true}'), line


def test_the_failure_is_printed_as_the_result_composed_it():
    failed = sglang_result_text.add_text({"failed": True, "msg": "server crashed: cuda_oom", "crash_class": "cuda_oom",
                                          "hint": "lower --mem-fraction-static", "deciding_lineno": 12,
                                          "deciding_line": "torch.OutOfMemoryError", "log_tail": ["a", "b"]},
                                         "sglang", "/var/log/sglang/sglang.log")
    assert render_failure(failed) == failed["failure_message"]
    assert "crash class: cuda_oom" in render_failure(failed)
    # a refusal (no crash class) has only its message
    refused = sglang_result_text.add_text({"failed": True, "msg": "port 30000 is held"}, "sglang", "-")
    assert render_failure(refused) == "port 30000 is held"


def test_the_failure_is_printed_once_and_the_task_that_fails_repeats_none_of_it():
    launch = tasks(os.path.join(TASKS, "launch.yml"))[0]
    # its own failure is not printed (ansible-core prints a failed task's message twice and its whole result)
    assert launch["failed_when"] is False
    show, fail = by_name("Show why the server did not come up"), by_name("Fail when the server did not come up")
    failed = sglang_result_text.add_text({"failed": True, "msg": "server crashed: cuda_oom", "crash_class": "cuda_oom",
                                          "hint": "lower --mem-fraction-static", "log_tail": ["a"]}, "sglang", "-")
    ok = sglang_result_text.add_text({"changed": True, "pid": 42}, "sglang", "-")
    assert shown(show, failed) and shown(fail, failed)
    assert not shown(show, ok) and not shown(fail, ok)
    render = environment().from_string(fail["ansible.builtin.fail"]["msg"]).render
    msg = render(sglang_server_name="sglang", sglang_server_service=failed, __sglang_server_rolled_back=False)
    assert msg.strip() == "server sglang did not come up: why is shown just above"
    # with sglang_server_rollback: what the rollback did follows, in the same message
    msg = render(sglang_server_name="sglang", sglang_server_service=failed, __sglang_server_rolled_back=True,
                 sglang_server_rollback_result={"text": "rolled back to 0123456789abcdef, SGLang 0.5.23, serving, pid 7"})
    assert msg.strip() == ("server sglang did not come up: why is shown just above; rolled back to "
                           "0123456789abcdef, SGLang 0.5.23, serving, pid 7")
    names = [t.get("name") for t in tasks()]
    launch_at = names.index("Launch the deployment")
    assert names[launch_at + 1:names.index(fail["name"])] == [
        "Keep the launch's result", "Show why the server did not come up", "Roll back to the last good deployment",
        "Say what a failed start would roll back to"]

#!/usr/bin/python
# -*- coding: utf-8 -*-

# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


DOCUMENTATION = r"""
---
module: sglang_good_deployment
short_description: Record an SGLang deployment as good, judge a failed one, and choose the one to roll back to
description:
  - Keeps, in the run dir of M(ansible.legacy.wait_for_model) and trusted as its run state is, the last good
    deployments of a server, and the verdict of the running server's smoke test.
  - O(state=good), right after a start passed its smoke test, records the running server (ours, alive, its fingerprint
    the one these inputs make) as good in C(<run_dir>/<name>.good.json) (root, 0600), with its argv, environment, service
    user, fingerprint data and every fingerprint file's SHA-256, owner and mode, with a copy of each file up to 1 MiB
    (the rendered config, which the next deployment overwrites), with O(secrets) kept out of it. The secret environment
    is never recorded. The last
    O(keep) good deployments are kept.
  - O(state=failed) records that the running server failed its smoke test while it still answers (a draft that never
    accepts), so that the next M(ansible.legacy.wait_for_model) run restarts it instead of keeping it.
  - O(state=chosen) says which good deployment a failed start rolls back to (read only), the newest other than
    O(failed_fingerprint) whose inputs are intact (each file as recorded, or restorable from its intact copy; its python
    still there and still the same file); with O(restore=true) the changed files are put back from their copies, with
    their recorded owner and mode. Launching it is M(ansible.legacy.wait_for_model)'s, with RV(deployment)'s inputs.
  - A multi-node server rolls back as a group, all or nothing. Each node records its good deployment with the
    group's generation (O(group)); after a failed start each node reports its RV(candidates), and O(group_choice),
    the candidates of every node in rank order, makes each node choose and restore the newest generation that every
    node holds intact, or none when a node holds none.
  - Recording, judging and restoring hold the lock of M(ansible.legacy.wait_for_model) for this server
    (C(flock) on C(<run_dir>/<name>.lock)), so that two runs never write the record or the files at once.
  - A record or a verdict that someone less privileged than this module could have written (the run dir's or the
    file's owner or mode) is refused, never used.
version_added: "0.1.0"
options:
  name:
    description:
      - The server's name, as M(ansible.legacy.wait_for_model)'s O(ansible.legacy.wait_for_model#module:name).
    type: str
    required: true
  run_dir:
    description:
      - The run dir of M(ansible.legacy.wait_for_model) (root-owned, writable by no one else).
    type: path
    required: true
  state:
    description:
      - V(good) records the running server as good, V(failed) judges it failed, V(chosen) says which good deployment a
        rollback would launch (and restores its files with O(restore=true)).
    type: str
    choices: [good, failed, chosen]
    required: true
  argv:
    description:
      - With O(state=good), the running server's argv, as given to M(ansible.legacy.wait_for_model).
    type: list
    elements: str
    default: []
  environment:
    description:
      - With O(state=good), its environment (it is recorded; keep secrets in O(secret_environment)).
    type: dict
    default: {}
  secret_environment:
    description:
      - With O(state=good), its secret environment. Only its hash enters the fingerprint; it is never recorded.
    type: dict
    default: {}
  redact:
    description:
      - With O(state=good), the O(ansible.legacy.wait_for_model#module:redact) list of the start, for the fingerprint.
    type: list
    elements: str
    default: []
  run_as:
    description:
      - With O(state=good), the service user the server runs as.
    type: str
  fingerprint_files:
    description:
      - With O(state=good), the files the server depends on, as given to M(ansible.legacy.wait_for_model).
    type: list
    elements: path
    default: []
  fingerprint_data:
    description:
      - With O(state=good), the fingerprint data, as given to M(ansible.legacy.wait_for_model); its
        C(sglang_version) names the deployment in messages.
    type: dict
    default: {}
  keep:
    description:
      - With O(state=good), how many good deployments to keep, newest first (at least 1).
    type: int
    default: 1
  reason:
    description:
      - With O(state=failed), why the smoke test failed, as the next run's restart reason shows it.
    type: str
    default: smoke test failed
  secrets:
    description:
      - With O(state=good), values (the API key) that no kept copy may hold; each is replaced by a numbered mark in the
        copies. With O(state=chosen), the values put back in their place (in the same order) when a copy is restored.
      - Never in Ansible's output.
    type: list
    elements: str
    default: []
  failed_fingerprint:
    description:
      - With O(state=chosen), the fingerprint of the deployment that failed (never chosen).
    type: str
    default: ""
  restore:
    description:
      - With O(state=chosen), put back the chosen deployment's changed files from their copies (not in check mode).
      - A file is written back only into a directory that nobody less privileged can write or swap, checked as the
        run dir is (owned by root or this module's user, not writable by group or others, every directory above it
        likewise, no symlink on the path), relative to that directory and never through a symlink at the file's path.
        When one changed file's directory or path fails that check, nothing is restored and the module fails naming
        the file, why and the fix.
    type: bool
    default: false
  group:
    description:
      - With O(state=good), the generation of a multi-node server this node's deployment belongs to (the nodes group's
        name and a digest of every node's fingerprint in rank order), recorded with it.
    type: str
  group_choice:
    description:
      - With O(state=chosen), a multi-node server's choice, from every node's report - C(nodes), the group's hosts in
        rank order, C(candidates), in the same order, the RV(candidates) each node's own O(state=chosen) reported
        (null or false for a node that did not report), and C(failed_group), the generation that failed (never
        chosen; give O(failed_fingerprint) empty, as a node whose own deployment did not change is in that generation
        too). This node then chooses the newest generation that every node holds intact, and none (RV(why_not) naming
        the node) when a node holds none.
    type: dict
  lock_timeout:
    description:
      - Seconds to wait for the server's lock (the one M(ansible.legacy.wait_for_model) holds for a run) before a
        record, a verdict or a restore; then the task fails, naming the holder.
    type: float
    default: 60.0
extends_documentation_fragment: action_common_attributes
attributes:
  check_mode:
    support: full
    details: Reads and reports; records, judges and restores nothing.
  diff_mode:
    support: none
  platform:
    platforms: posix
author:
  - eagle-deploy contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Record the deployment that just passed its smoke test as good
  ansible.legacy.sglang_good_deployment:
    name: sglang
    run_dir: /var/lib/eagle-deploy/run
    state: good
    argv: "{{ server_argv }}"
    environment: {}
    run_as: sglang
    fingerprint_files: [/etc/sglang/sglang.yaml]
    fingerprint_data: {sglang_version: 0.5.23}
    keep: 2

- name: Which deployment a failure would roll back to
  ansible.legacy.sglang_good_deployment:
    name: sglang
    run_dir: /var/lib/eagle-deploy/run
    state: chosen
    failed_fingerprint: "{{ service.fingerprint }}"
  register: rollback_to
"""

RETURN = r"""
changed:
  description: Whether a record, a verdict or a file was written.
  returned: always
  type: bool
good:
  description: With O(state=good), the deployment recorded (fingerprint, sglang_version, recorded_at, python).
  returned: when state is good
  type: dict
good_kept:
  description: With O(state=good), the good deployments kept, newest first.
  returned: when state is good
  type: list
  elements: dict
deployment:
  description:
    - With O(state=chosen), the chosen deployment's inputs for M(ansible.legacy.wait_for_model) (argv, environment,
      run_as, fingerprint_files (paths), fingerprint_data) and its fingerprint, sglang_version and description; null
      when none can be launched.
  returned: when state is chosen
  type: dict
why_not:
  description: With O(state=chosen), why no good deployment can be rolled back to (null when one is chosen).
  returned: when state is chosen
  type: str
candidates:
  description:
    - With O(state=chosen), each good deployment other than O(failed_fingerprint), newest first, with its fingerprint,
      description, group (null for a single node's), recorded_at, intact (bool) and why_not.
  returned: when state is chosen
  type: list
  elements: dict
group:
  description: With O(state=chosen) and O(group_choice), the generation chosen for the whole group (null when none).
  returned: when group_choice is given
  type: str
restored:
  description: With O(state=chosen) and O(restore=true), the files put back from their copies.
  returned: when state is chosen
  type: list
  elements: str
judged:
  description: With O(state=failed), the verdict recorded (null when no server of ours runs).
  returned: when state is failed
  type: dict
"""

import fcntl
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils import sglang_good_group, sglang_good_record, sglang_plan, sglang_proc
from ansible.module_utils.sglang_input_checks import WaitError
from ansible.module_utils.sglang_lock import RunLock


def locked(p, clock=time.monotonic, sleep=time.sleep, locker=fcntl.flock):
    """Take wait_for_model's lock of this server (``<run_dir>/<name>.lock``) as its runs take it: the RunLock, which
    the caller lets go (``unlock``). Raises WaitError when another run holds it past ``lock_timeout``."""
    lock = RunLock()
    lock.take(p["run_dir"], p["name"], p["lock_timeout"], "good-%s" % p["state"], clock=clock, sleep=sleep,
              locker=locker)
    return lock


def _running_ours(module, p):
    state = sglang_proc.read_state(p["run_dir"], p["name"])
    if state and state.get("untrusted"):
        module.fail_json(msg=state["untrusted"])
    why = sglang_proc.why_not_ours(state)
    return state, why


def _record(module, p):
    state, why = _running_ours(module, p)
    if why:
        module.fail_json(msg="no server of ours runs to record as good (%s): record a deployment right after the start "
                             "that launched it passed its smoke test" % why)
    fingerprint = sglang_plan.fingerprint(p, state.get("launcher"))[1]  # as wait_for_model computes it
    inputs = {"argv": p["argv"], "environment": p["environment"], "run_as": p["run_as"],
              "fingerprint_files": p["fingerprint_files"], "fingerprint_data": p["fingerprint_data"],
              "fingerprint": fingerprint}
    if module.check_mode:
        if state.get("fingerprint") != inputs["fingerprint"]:
            module.fail_json(msg="the running server is not the deployment given (fingerprint %s, these inputs make %s)"
                             % ((state.get("fingerprint") or "none")[:16], inputs["fingerprint"][:16]))
        module.exit_json(changed=True, good={"fingerprint": inputs["fingerprint"],
                                             "sglang_version": p["fingerprint_data"].get("sglang_version")},
                         good_kept=[], msg="would record the running server as good")
    if p["group"]:
        inputs["group"] = p["group"]
    changed, report = sglang_good_record.record(p["run_dir"], p["name"], state, inputs, p["keep"], time.time(),
                                                p["secrets"])
    module.exit_json(changed=changed, **report)


def _judge_failed(module, p):
    state, why = _running_ours(module, p)
    if why:  # a dead server is restarted by the next run anyway: nothing to judge
        module.exit_json(changed=False, judged=None, msg="no server of ours runs (%s): nothing to judge" % why)
    if not module.check_mode:
        sglang_good_record.judge(p["run_dir"], p["name"], state, "failed", p["reason"], time.time())
    module.exit_json(changed=True, judged={"pid": state.get("pid"), "fingerprint": state.get("fingerprint"),
                                           "verdict": "failed", "reason": p["reason"]})


def _chosen(module, p):
    assessed = sglang_good_record.assess(p["run_dir"], p["name"], p["failed_fingerprint"], p["secrets"])
    extra = {"candidates": sglang_good_record.candidates(p["run_dir"], p["name"], p["failed_fingerprint"],
                                                         assessed=assessed)}
    group = None
    if p["group_choice"] is not None:
        group, why = sglang_good_group.choose_group(p["group_choice"].get("nodes") or [],
                                                    p["group_choice"].get("candidates"),
                                                    p["group_choice"].get("failed_group"))
        extra["group"] = group
        if group is None:
            module.exit_json(changed=False, deployment=None, why_not=why, restored=[], **extra)
    d, why = sglang_good_record.choose(p["run_dir"], p["name"], p["failed_fingerprint"], group=group,
                                       assessed=assessed)
    if d is None:
        module.exit_json(changed=False, deployment=None, why_not=why, restored=[], **extra)
    restored = []
    if p["restore"] and not module.check_mode:
        restored = sglang_good_record.restore(p["run_dir"], d, p["secrets"])
    data = d.get("fingerprint_data") or {}
    deployment = {"argv": d.get("argv") or [], "environment": d.get("environment") or {}, "run_as": d.get("run_as"),
                  "fingerprint_files": [f.get("path") for f in d.get("fingerprint_files") or []],
                  "fingerprint_data": data, "fingerprint": d.get("fingerprint"),
                  "sglang_version": data.get("sglang_version"), "recorded_at": d.get("recorded_at"),
                  "description": sglang_good_record.describe(d), "group": d.get("group")}
    module.exit_json(changed=bool(restored), deployment=deployment, why_not=None, restored=restored, **extra)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            run_dir=dict(type="path", required=True),
            state=dict(type="str", required=True, choices=["good", "failed", "chosen"]),
            argv=dict(type="list", elements="str", default=[]),
            environment=dict(type="dict", default={}),
            secret_environment=dict(type="dict", default={}, no_log=True),
            redact=dict(type="list", elements="str", default=[], no_log=True),
            run_as=dict(type="str"),
            fingerprint_files=dict(type="list", elements="path", default=[]),
            fingerprint_data=dict(type="dict", default={}),
            keep=dict(type="int", default=1),
            reason=dict(type="str", default="smoke test failed"),
            secrets=dict(type="list", elements="str", default=[], no_log=True),
            failed_fingerprint=dict(type="str", default=""),
            restore=dict(type="bool", default=False),
            group=dict(type="str"),
            group_choice=dict(type="dict"),
            lock_timeout=dict(type="float", default=60.0),
        ),
        required_if=[("state", "good", ("argv",))],
        supports_check_mode=True,
    )
    p = module.params
    if p["keep"] < 1:
        module.fail_json(msg="keep must be at least 1 (got %d): the good deployment just recorded is always kept"
                             % p["keep"])
    lock = None
    try:
        # the writes (a record, a verdict, a restore) under the server's lock, as wait_for_model's runs
        if not module.check_mode and (p["state"] != "chosen" or p["restore"]):
            lock = locked(p)
        if p["state"] == "good":
            _record(module, p)
        elif p["state"] == "failed":
            _judge_failed(module, p)
        else:
            _chosen(module, p)
    except sglang_good_record.GoodRecordError as e:
        module.fail_json(msg=str(e))
    except sglang_proc.UntrustedState as e:
        module.fail_json(msg="the run dir is not trusted, nothing was recorded or restored: %s" % e)
    except WaitError as e:
        module.fail_json(msg="nothing was recorded or restored: %s" % e)
    except (IOError, OSError) as e:
        module.fail_json(msg="%s: %s" % (type(e).__name__, e))
    finally:
        if lock is not None:
            lock.unlock()


if __name__ == "__main__":
    main()

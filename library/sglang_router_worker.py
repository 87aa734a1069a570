#!/usr/bin/python
# -*- coding: utf-8 -*-

# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


DOCUMENTATION = r"""
---
module: sglang_router_worker
short_description: Put an SGLang server into its gateway's worker registry (sglang-router or smg), or take it out
description:
  - Talks to the worker API of SGLang's gateway at O(router_url) - sglang-router (C(sglang_router), tested with 0.3.2)
    or smg, the Shepherd Model Gateway (tested with 1.13.0). Which one is told by what it answers to
    C(GET /get_loads) (smg names its version there), returned as RV(gateway); nothing to set. Finds the worker by its
    URL in C(GET /workers); the gateway's own id for it is a UUID, which C(DELETE) and C(GET) of one worker take (a
    URL is refused there).
  - B(absent) - C(DELETE /workers/<id>), then C(GET /workers/<id>) every O(poll_interval) seconds until the gateway
    answers 404; from then on it sends the server no new request. sglang-router does not drain; smg marks the worker
    C(draining) (routed nothing new) and removes it after its drain settle time (5 s by default) whether or not the
    server still holds requests. What the server holds finishes there (M(ansible.legacy.wait_for_drain) watches it).
    A worker smg is already draining is waited on, not deleted again.
  - B(present) - C(POST /workers) with O(url), O(api_key) and O(worker_config), then C(GET /workers/<id>) until the
    gateway's background job has added it and it finds it healthy; with smg, until its health state is C(ready)
    (not C(pending), C(not_ready), C(failed) or C(draining)). A job that fails, or O(timeout), fails the task with
    the gateway's words. A worker smg is still draining is waited on until it is gone, then posted.
  - A worker already as asked is left alone (no change); a worker already listed under O(state=present) is waited
    on until healthy, never posted again (smg's 409 to a POST of a listed URL, or of one whose add still runs, names
    the id waited on).
version_added: "0.1.0"
options:
  router_url:
    description:
      - Base URL of the router, such as C(http://router.example.internal:30000).
      - A C(user:password@) in it is sent as HTTP basic authentication and never shown; the module's messages and
        the invocation Ansible prints at C(-vvv) have C(********) in its place.
    type: str
    required: true
  router_api_key:
    description:
      - An admin key of the router's C(--control-plane-api-keys), sent as C(Authorization Bearer). Empty when the
        router has no control-plane keys.
      - Never in Ansible's output or in an argument vector.
    type: str
  url:
    description:
      - The worker's URL as the router reaches it (C(http://gpu-node-01.example.internal:30000)). Compared with the
        router's list with the scheme and host lowercased and without a trailing slash.
      - A C(user:password@) in it is never shown (as in O(router_url)).
    type: str
    required: true
  api_key:
    description:
      - The server's API key, handed to the router with O(state=present) so that it can reach the worker
        (C(api_key) of C(POST /workers)). Not sent with O(state=absent).
      - Never in Ansible's output.
    type: str
  worker_config:
    description:
      - More fields of the C(POST /workers) body (C(model_id), C(priority), C(labels), ...), as the router takes them.
    type: dict
    default: {}
  state:
    description:
      - Whether the worker is in the router's registry.
    type: str
    choices: [present, absent]
    default: present
  timeout:
    description:
      - Seconds to wait for the router's background job (the add and the first health answer, or the removal).
    type: float
    default: 120
  poll_interval:
    description:
      - Seconds between two C(GET /workers/<id>) while waiting.
    type: float
    default: 1.0
  min_healthy_others:
    description:
      - With O(state=absent), refuse to take the worker out (nothing is deleted) unless the router lists at least this
        many other healthy workers, so that a rollout, or two at once, never takes the last serving replicas out.
      - 0 lets the last worker go (a fleet of one).
    type: int
    default: 0
  request_timeout:
    description:
      - Seconds one request to the router may take.
    type: float
    default: 10
  validate_certs:
    description:
      - Verify the router's TLS certificate (an C(https) O(router_url)).
    type: bool
    default: true
extends_documentation_fragment: action_common_attributes
attributes:
  check_mode:
    support: full
    details: Reads C(GET /workers) and C(GET /get_loads) only and reports what it would add or remove; it posts and
      deletes nothing.
  diff_mode:
    support: none
  platform:
    platforms: posix
notes:
  - Where the module runs (the controller, say, with C(delegate_to)) must reach O(router_url).
  - sglang-router health-checks its workers every C(--health-check-interval-secs) (60 by default); a worker that
    dies while it is listed gets requests until the router notices. Take a worker out before its server stops.
  - smg's C(PATCH /workers/<id>) changes a worker's priority, cost, labels, key and health or resilience settings but
    cannot take it out of routing, so the module does not use it; C(DELETE) is smg's drain (docs/fleet.md).
seealso:
  - module: ansible.legacy.wait_for_drain
  - module: ansible.legacy.wait_for_model
author:
  - eagle-deploy contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Take this replica out of the router before its server restarts
  ansible.legacy.sglang_router_worker:
    router_url: http://router.example.internal:30000
    router_api_key: "{{ vault_router_admin_key }}"
    url: http://gpu-node-01.example.internal:30000
    state: absent
  delegate_to: localhost

- name: Put it back once it serves again
  ansible.legacy.sglang_router_worker:
    router_url: http://router.example.internal:30000
    router_api_key: "{{ vault_router_admin_key }}"
    url: http://gpu-node-01.example.internal:30000
    api_key: "{{ vault_sglang_api_key }}"
    state: present
  delegate_to: localhost
"""

RETURN = r"""
listed_urls:
  description: The worker URLs the router lists, when it does not list O(url) (compared with default ports dropped,
    scheme and host lowercased).
  returned: when the worker is not in the router
  type: list
  elements: str
  sample: ["http://10.0.0.11:30000", "http://10.0.0.12:30000"]
gateway:
  description: Which gateway answered, from its C(GET /get_loads) - C(smg) with its version, C(sglang-router) (its
    answer names no version), or C(unknown) (read as sglang-router).
  returned: when the gateway listed its workers
  type: dict
  sample: {"name": "smg", "version": "1.13.0"}
worker_id:
  description: The router's id (a UUID) of the worker; null when it is not in the router and was not added.
  returned: always
  type: str
  sample: 686c3591-8445-4fca-a983-6c8a391cc881
worker:
  description: The router's record of the worker (secret fields masked).
  returned: when the router listed the worker
  type: dict
  sample: {"id": "686c3591-8445-4fca-a983-6c8a391cc881", "url": "http://127.0.0.1:30180", "is_healthy": true,
           "status": "ready", "worker_type": "regular", "connection_mode": "http"}
job_status:
  description: The router's background job on the worker, when that job failed.
  returned: on a failed job
  type: dict
  sample: {"job_type": "AddWorker", "status": "failed", "message": "health check failed"}
http_status:
  description: The router's HTTP status when it refused a request (401, 400, ...).
  returned: when the router refused a request
  type: int
  sample: 401
elapsed:
  description: Seconds spent waiting for the router's job, on success and on failure.
  returned: when the router was asked to change something, and on a timeout
  type: float
  sample: 0.31
polls:
  description: Number of C(GET /workers/<id>) made while waiting.
  returned: when the router was asked to change something
  type: int
  sample: 2
msg:
  description: What was done, or what would be done in check mode.
  returned: always
  type: str
  sample: removed worker http://127.0.0.1:30180 (686c3591-8445-4fca-a983-6c8a391cc881) from the router
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.sglang_json_http import HTTP_OPTIONS, JsonHttp, Unreachable, check_options, url_secrets
from ansible.module_utils.sglang_progress import operator_text
from ansible.module_utils.sglang_router_registry import RouterError, RouterWorkers


def main(clock=time.monotonic, sleep=time.sleep, opener=None):
    module = AnsibleModule(
        argument_spec=dict(
            router_url=dict(type="str", required=True),
            router_api_key=dict(type="str", no_log=True),
            url=dict(type="str", required=True),
            api_key=dict(type="str", no_log=True),
            worker_config=dict(type="dict", default={}),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            timeout=dict(type="float", default=120),
            poll_interval=dict(type="float", default=1.0),
            min_healthy_others=dict(type="int", default=0),
            **HTTP_OPTIONS
        ),
        supports_check_mode=True,
    )
    p = module.params
    module.no_log_values.update(url_secrets(p["router_url"], p["url"]))
    problem = check_options(p, urls=("router_url", "url"), positive=("timeout", "poll_interval"),
                            at_least_zero=("min_healthy_others",))
    if problem:
        module.fail_json(msg=problem)
    http = JsonHttp(p["router_url"], token=p["router_api_key"], timeout=p["request_timeout"],
                    validate_certs=p["validate_certs"], opener=opener)
    workers = RouterWorkers(http, clock=clock, sleep=sleep)
    try:
        if p["state"] == "absent":
            result = workers.absent(p["url"], p["timeout"], p["poll_interval"], check_mode=module.check_mode,
                                    min_healthy_others=p["min_healthy_others"])
        else:
            result = workers.present(p["url"], api_key=p["api_key"], config=p["worker_config"], timeout=p["timeout"],
                                     poll_interval=p["poll_interval"], check_mode=module.check_mode)
    except RouterError as exc:
        module.fail_json(msg=operator_text(str(exc)), **operator_text(exc.fields))
    except Unreachable as exc:
        module.fail_json(msg=operator_text("the router does not answer: %s" % exc))
    module.exit_json(**operator_text(result))


if __name__ == "__main__":
    main()

#!/usr/bin/python
# -*- coding: utf-8 -*-

# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


DOCUMENTATION = r"""
---
module: wait_for_drain
short_description: Wait until an SGLang server runs and waits no request, from its own /v1/loads
description:
  - Reads the server's C(GET /v1/loads) (SGLang 0.5.9 and later) every O(poll_interval) seconds and adds up
    C(num_running_reqs) and C(num_waiting_reqs) over its data-parallel ranks, until O(quiet_samples) looks in a row
    find none, or O(timeout) passes.
  - For a server that no longer gets new requests (taken out of its router with
    M(ansible.legacy.sglang_router_worker)), before it is stopped, so that no request it holds is cut. sglang-router
    0.3.2 does not drain and cannot tell a worker's load (its C(/get_loads) asks C(/get_load), which SGLang 0.5.23 no
    longer has, and reads -1).
  - A server that does not answer at all runs nothing, so RV(drained=true).
  - At O(timeout) the task returns RV(drained=false) with the last figures and a warning (the stop that follows
    then cuts what is left), or fails with O(fail_on_timeout=true).
version_added: "0.1.0"
options:
  url:
    description:
      - The server's base URL as this host reaches it, such as C(http://127.0.0.1:30000); the module asks
        C(<url>/v1/loads).
      - A C(user:password@) in it is sent as HTTP basic authentication and never shown; the module's messages and
        the invocation Ansible prints at C(-vvv) have C(********) in its place.
    type: str
    required: true
  api_key:
    description:
      - The server's API key (C(/v1/loads) needs it wherever the server has one), sent as C(Authorization Bearer).
      - Never in Ansible's output.
    type: str
  timeout:
    description:
      - Seconds to wait for the drain. V(0) looks once and does not wait.
    type: float
    default: 300
  poll_interval:
    description:
      - Seconds between two looks.
    type: float
    default: 1.0
  quiet_samples:
    description:
      - Looks in a row that must find nothing running and nothing waiting. The scheduler publishes its figures a
        moment after a request reaches it; one empty look right after the router let go of the server can miss a
        request still on its way.
    type: int
    default: 2
  fail_on_timeout:
    description:
      - Fail when the server is not drained after O(timeout) seconds, instead of returning RV(drained=false) with a
        warning.
    type: bool
    default: false
  request_timeout:
    description:
      - Seconds one request may take.
    type: float
    default: 10
  validate_certs:
    description:
      - Verify the server's TLS certificate (an C(https) O(url)).
    type: bool
    default: true
extends_documentation_fragment: action_common_attributes
attributes:
  check_mode:
    support: full
    details: Looks once and reports the figures; it does not wait.
  diff_mode:
    support: none
  platform:
    platforms: posix
notes:
  - SGLang 0.5.23 drains on its own when its main process alone gets SIGTERM (C(/health) answers 503 while the
    requests it holds finish). A stop that signals the whole process tree (M(ansible.legacy.wait_for_model), a
    systemd unit with C(KillMode=control-group)) ends its scheduler processes at once, so the drain has to be
    waited for before the stop, which is what this module is for.
seealso:
  - module: ansible.legacy.sglang_router_worker
  - module: ansible.legacy.wait_for_model
author:
  - eagle-deploy contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Let the requests this server holds finish (it is out of the router already)
  ansible.legacy.wait_for_drain:
    url: http://127.0.0.1:30000
    api_key: "{{ vault_sglang_api_key }}"
    timeout: 600
  register: __drain

- name: Say what the stop will cut
  ansible.builtin.debug:
    msg: "{{ __drain.msg }}"
  when: not __drain.drained
"""

RETURN = r"""
drained:
  description: Whether the server ran and waited nothing in the last O(quiet_samples) looks, or did not answer.
  returned: always
  type: bool
  sample: true
running:
  description: C(num_running_reqs) over every rank at the last look (null before a first figure).
  returned: always
  type: int
  sample: 0
waiting:
  description: C(num_waiting_reqs) over every rank at the last look (null before a first figure).
  returned: always
  type: int
  sample: 0
max_running:
  description: The most requests seen running at one look (what the wait waited for).
  returned: always
  type: int
  sample: 3
answered:
  description: False when the last look got no answer at all (a timeout, a name or route that fails, TLS); a refused
    connection counts as an answer (nothing listens, nothing runs). With O(timeout=0) or in check mode no answer fails.
  returned: always
  type: bool
  sample: true
samples:
  description: Looks made.
  returned: always
  type: int
  sample: 4
elapsed:
  description: Seconds the wait took.
  returned: always
  type: float
  sample: 3.02
msg:
  description: The outcome in words.
  returned: always
  type: str
  sample: "drained: nothing running or waiting"
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.sglang_json_http import HTTP_OPTIONS, JsonHttp, check_options, url_secrets
from ansible.module_utils.sglang_busy import DrainError, DrainWait
from ansible.module_utils.sglang_progress import operator_text


def main(clock=time.monotonic, sleep=time.sleep, opener=None):
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", required=True),
            api_key=dict(type="str", no_log=True),
            timeout=dict(type="float", default=300),
            poll_interval=dict(type="float", default=1.0),
            quiet_samples=dict(type="int", default=2),
            fail_on_timeout=dict(type="bool", default=False),
            **HTTP_OPTIONS
        ),
        supports_check_mode=True,
    )
    p = module.params
    module.no_log_values.update(url_secrets(p["url"]))
    problem = check_options(p, urls=("url",), positive=("poll_interval",), at_least_zero=("timeout",))
    if problem is None and p["quiet_samples"] < 1:
        problem = "quiet_samples must be 1 or more, got %s" % p["quiet_samples"]
    if problem:
        module.fail_json(msg=problem)
    http = JsonHttp(p["url"], token=p["api_key"], timeout=p["request_timeout"], validate_certs=p["validate_certs"],
                    opener=opener)
    try:
        result = DrainWait(http, clock=clock, sleep=sleep).wait(
            p["timeout"], p["poll_interval"], p["quiet_samples"], once=module.check_mode or p["timeout"] == 0)
    except DrainError as exc:
        module.fail_json(msg=operator_text(str(exc)), drained=False)
    result = operator_text(result)
    if (module.check_mode or p["timeout"] == 0) and not result["answered"]:
        result["msg"] = ("the server's load endpoint gives no answer (%s): the drain could not watch it; set the URL "
                         "the host itself reaches its server at" % result["msg"])
        module.fail_json(**result)
    if not result["drained"] and not module.check_mode and p["timeout"] > 0:
        if p["fail_on_timeout"]:
            module.fail_json(**result)
        module.warn(result["msg"] + "; stopping the server now cuts them")
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()

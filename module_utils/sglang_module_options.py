# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""wait_for_model's options (standard library only): the module's argument spec, also the suboptions of sglang_info's
O(keep), so that the play's one look takes (and masks) them exactly as the module does.
"""

from __future__ import annotations


def argument_spec():
    return dict(
        name=dict(type="str", default="sglang"),
        state=dict(type="str", default="started", choices=["started", "stopped", "watched"]),
        watch_time=dict(type="float", default=3.0),
        argv=dict(type="list", elements="str"),
        environment=dict(type="dict", default={}),
        secret_environment=dict(type="dict", default={}, no_log=True),
        redact=dict(type="list", elements="str", default=[], no_log=True),
        chdir=dict(type="path"),
        log_dir=dict(type="path", required=True),
        run_dir=dict(type="path"),
        run_as=dict(type="str"),
        fingerprint_files=dict(type="list", elements="path", default=[]),
        fingerprint_data=dict(type="dict", default={}),
        health_url=dict(type="str", default="http://127.0.0.1:30000/health_generate"),
        api_key=dict(type="str", no_log=True),
        port=dict(type="int"),
        health_timeout=dict(type="float", default=10.0),
        unhealthy_after=dict(type="int", default=3),
        serve_health_interval=dict(type="float", default=10.0),
        serve_stuck_seconds=dict(type="float", default=300.0),
        serve_stuck_action=dict(type="str", default="report", choices=["report", "restart"]),
        log_offset=dict(type="int", default=0),
        lock_timeout=dict(type="float", default=60.0),
        min_free_space_mib=dict(type="int", default=64),
        cgroup=dict(type="bool", default=True),
        timeout=dict(type="int", default=1800),
        stall_timeout=dict(type="int", default=900),
        settle_time=dict(type="float", default=0.3),
        poll_interval=dict(type="float", default=0.1),
        health_interval=dict(type="float", default=0.25),
        child_grace=dict(type="float", default=2.0),
        stop_timeout=dict(type="int", default=30),
        gpu_release_below_mib=dict(type="int"),
        gpu_release_indices=dict(type="list", elements="int"),
        gpu_release_timeout=dict(type="float", default=120.0),
        stop_on_failure=dict(type="bool", default=True),
        force_restart=dict(type="bool", default=False),
        # the action plugin's (a multi-node server joined on the controller); the module ignores it
        join=dict(type="dict", options=dict(group=dict(type="str", required=True),
                                            nodes=dict(type="list", elements="str", required=True),
                                            rank=dict(type="int", required=True),
                                            timeout=dict(type="float", default=600),
                                            step_time=dict(type="float", default=2))),
        prove_launch=dict(type="bool", default=False),
        on_foreign_pid=dict(type="str", default="fail", choices=["fail", "ignore"]),
        log_tail_lines=dict(type="int", default=40),
        launcher=dict(type="str", default="auto", choices=["auto", "systemd", "detached"]),
        unit_dir=dict(type="path", default="/etc/systemd/system"),
        program_dir=dict(type="path"),
        # The action plugin's protocol, not user options (undocumented on purpose): a step of at most _step_time s,
        # and the attempt a later step goes on waiting for.
        _step_time=dict(type="float"),
        _resume_attempt=dict(type="int"),
        keep_attempts=dict(type="int", default=20),
    )

# Copyright: (c) eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``GET /v1/loads`` as SGLang 0.5.23 answers it (``sglang/srt/entrypoints/v1_loads.py``, the snapshot of
``sglang/srt/managers/load_snapshot.py``): one load per DP rank (the emulator has one, rank 0), every core field
flat, the ``memory``, ``disaggregation`` and ``queues`` sections, ``speculative`` once a speculative decode ran.

Running requests are the client requests the emulator has accepted and not answered yet (up to
``max_running_requests``); the rest wait. Health checks and the warm-up request are not counted, as SGLang's
snapshot does not count them once they are done either. Pure functions: the engine passes its counts in.
"""

from __future__ import annotations

import datetime
import time

MAX_RUNNING_REQUESTS = 128
# The query's section names and the snapshot fields they select (LoadSnapshot.to_dict).
SECTIONS = (("memory", "memory"), ("speculative", "spec"), ("lora", "lora"), ("disaggregation", "disagg"),
            ("queues", "queues"))
VALID_SECTIONS = frozenset(("core", "memory", "spec", "lora", "disagg", "queues", "all"))


class LoadsError(ValueError):
    """A query SGLang refuses: ``status`` 400 (a bad section) or 422 (FastAPI's check of a query parameter)."""

    def __init__(self, message, status=400):
        super().__init__(message)
        self.status = status


def snapshot(in_flight, cfg, tokens_per_request=16, now=None):
    """One rank's LoadSnapshot as a dict, for ``in_flight`` accepted client requests."""
    running = min(in_flight, MAX_RUNNING_REQUESTS)
    waiting = in_flight - running
    capacity = cfg["max_total_num_tokens"]
    used = running * tokens_per_request
    load = {
        "timestamp": time.time() if now is None else now,
        "dp_rank": 0,
        "num_running_reqs": running,
        "num_waiting_reqs": waiting,
        "num_waiting_uncached_tokens": waiting * tokens_per_request,
        "num_used_tokens": used,
        "num_total_tokens": used + waiting * tokens_per_request,
        "num_active_tokens": used + waiting * tokens_per_request,
        "num_prealloc_ready_tokens": 0,
        "max_total_num_tokens": capacity,
        "max_running_requests": MAX_RUNNING_REQUESTS,
        "token_usage": round(used / float(capacity), 4),
        "gen_throughput": 163.41 if running and cfg["speculative"] else (71.88 if running else 0.0),
        "cache_hit_rate": 0.0,
        "utilization": round(running / float(MAX_RUNNING_REQUESTS), 4),
        "total_prefill_uncached_tokens": 0,
        "total_prefill_busy_us": 0,
        "decode_moments": None,
        "memory": {"weight_gb": 15.11, "kv_cache_gb": 2.5, "graph_gb": 0.54, "token_capacity": capacity},
        "speculative": None,
        "lora": None,
        "disaggregation": {"mode": "null", "prefill_bootstrap_queue_reqs": 0, "prefill_inflight_queue_reqs": 0,
                           "decode_prealloc_queue_reqs": 0, "decode_transfer_queue_reqs": 0,
                           "decode_retracted_queue_reqs": 0, "kv_transfer_speed_gb_s": 0.0,
                           "kv_transfer_latency_ms": 0.0},
        "queues": {"waiting": waiting, "grammar": 0, "paused": 0, "retracted": 0, "prealloc_ready": 0},
    }
    return load


def to_dict(load, include=None):
    """LoadSnapshot.to_dict: the core fields, and the sections that are set and asked for."""
    section_fields = {field for field, _ in SECTIONS}
    out = {key: value for key, value in load.items() if key not in section_fields}
    if include is None or "all" in include:
        include_all = True
    else:
        if not include <= VALID_SECTIONS:
            raise LoadsError("Invalid include sections: %s. Valid options: %s"
                             % (set(include - VALID_SECTIONS), sorted(VALID_SECTIONS)))
        if include == {"core"}:
            return out
        include_all = False
    for field, name in SECTIONS:
        if load.get(field) is None or (not include_all and name not in include):
            continue
        out[field] = load[field]
    return out


def answer(load, query, version, num_accelerators, now=None):
    """The JSON body of ``GET /v1/loads?<query>`` (query: the parsed query string, name -> list of values).

    Raises LoadsError for what SGLang refuses."""
    include = None
    if query.get("include"):
        include = {part.strip() for part in query["include"][0].split(",")}
    dp_rank = None
    if query.get("dp_rank"):
        try:
            dp_rank = int(query["dp_rank"][0])
        except ValueError:
            raise LoadsError("dp_rank: Input should be a valid integer", status=422)
    loads = [] if dp_rank not in (None, 0) else [to_dict(load, include)]
    stamp = datetime.datetime.now(datetime.timezone.utc) if now is None else now
    return {"timestamp": stamp.isoformat(), "version": version, "accelerator": None,
            "num_accelerators": num_accelerators, "loads": loads}

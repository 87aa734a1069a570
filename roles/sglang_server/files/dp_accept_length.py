"""The accept length of speculative decoding that SGLang's ``/server_info`` gives: one figure over every
data-parallel rank. The one definition of it: ``smoke_burst.py`` (this role) and the role sglang_bench's
``bench_client.py`` (its ``files/dp_accept_length.py`` links here) are each run as this file followed by theirs, one
``python -c`` program (roles/sglang_server/tasks/smoke.yml, roles/sglang_bench/tasks/run.yml). Python 3 standard
library only: it runs with the SGLang venv's python on the host.

``/server_info``'s ``internal_states`` is a list with one dict per DP rank (its scheduler's
``get_internal_state``); a rank that runs speculative decoding and has verified at least once holds
``avg_spec_accept_length`` (accepted tokens over verify steps, the bonus token included: 1.0 is a draft that never
hits). SGLang (0.5.23 at least) keeps no count beside it, so the ranks cannot be weighted by their verify steps: the
figure is the plain mean of the ranks that report one (under data parallelism with unequal ranks, the mean of the
ranks' accept lengths, not the per-token figure).

The figure is cumulative: since the server's start, or since its last cache flush (SGLang's ``flush_cache`` resets
the counters behind it: ``metrics_reporter.reset_metrics``). The smoke test reads it right after a start (the
warm-up request and the smoke's own); the benchmark client flushes the cache before each run, so it reads that run's.
"""

import math


def _rank_figure(state):
    """A rank's avg_spec_accept_length (a finite number, never a bool), else None."""
    value = state.get("avg_spec_accept_length") if isinstance(state, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def dp_accept_length(states):
    """The accept length from ``/server_info`` ``internal_states`` (one dict per DP rank): ``{"accept_length"``
    (the plain mean of the ranks that report one), ``"per_rank"`` (each reporting rank's, in rank order),
    ``"of_ranks"`` (how many states there were)``}``; None when no rank reports one (no speculation, nothing
    verified yet, or not a list)."""
    if not isinstance(states, list):
        return None
    per_rank = [f for f in (_rank_figure(s) for s in states) if f is not None]
    if not per_rank:
        return None
    return {"accept_length": sum(per_rank) / len(per_rank), "per_rank": per_rank, "of_ranks": len(states)}

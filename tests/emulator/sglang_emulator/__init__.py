# Copyright: (c) eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""SGLang emulator: NOT SGLang.

A stdlib-only stand-in for ``python -m sglang.launch_server`` on machines without a GPU (tests, rehearsals).
It takes SGLang's command line, prints SGLang's real log lines with SGLang's timing shape, starts real child
processes (schedulers and a detokenizer) and serves SGLang's HTTP endpoints with fake, deterministic text.
Scenarios (``--emulator-scenario``) reproduce the failure modes the deployment has to survive.

Modules: ``cli`` (command line, ``--config`` file, ``main``), ``logs`` (SGLang-shaped log lines), ``scenarios``
(the eagle scenario's reading of the installed SGLang), ``scheduler`` (the child processes and the fake model),
``decode`` (the continuous batch and its timing model: emulated tokens/s), ``engine`` (the main process),
``server`` (HTTP), ``multinode`` (``--nnodes``: the rendezvous, the load barrier, a follower's dummy health), ``loads`` (``/v1/loads``), ``drain`` (SIGTERM: drain, then exit), ``replay`` (real logs
replayed). ``init_order`` and ``sglang_paths`` are the deployment's own ``module_utils`` files (links in the source
tree, copies in the wheel).
"""

from __future__ import annotations

import os

VERSION = "1.7"
BANNER = (
    "[EMULATOR] sglang-emulator %s: this is NOT SGLang; it emulates SGLang's HTTP API and log lines "
    "for rehearsals and tests" % VERSION
)
SCENARIOS = ("normal", "crash_loading", "eagle", "child_dies", "hang", "crash_hang", "health_503", "port_taken",
             "replay")
EAGLE_ALGORITHMS = ("EAGLE", "EAGLE3")
EAGLE_ATTRIBUTE = "spec_disable_batch_threshold"
EAGLE_CLASS = "EAGLEWorkerV2"
EAGLE_FILE = os.path.join("srt", "speculative", "eagle_worker_v2.py")
HEALTH_GENERATE_TIMEOUT = 20.0  # SGLang 0.5.23's SGLANG_HEALTH_CHECK_TIMEOUT default (health_window() reads the env)
HEALTH_WINDOW_VAR = "SGLANG_HEALTH_CHECK_TIMEOUT"


def health_window():
    """SGLang 0.5.23's health window: SGLANG_HEALTH_CHECK_TIMEOUT of the environment, default 20 s."""
    try:
        window = float(os.environ.get(HEALTH_WINDOW_VAR, HEALTH_GENERATE_TIMEOUT))
    except ValueError:
        return HEALTH_GENERATE_TIMEOUT
    return window if window > 0 else HEALTH_GENERATE_TIMEOUT
REQUEST_TIMEOUT = 60.0
READY_LINE = "The server is fired up and ready to roll!"
SIGQUIT_LINE = "Received sigquit from a child process. It usually means the child failed."
FAKE_GPU_MEM = 78.58
FAKE_VOCAB = (
    "the", "model", "answers", "with", "a", "short", "and", "deterministic", "sentence", "about",
    "speculative", "decoding", "draft", "tokens", "are", "verified", "by", "target", "in", "one",
    "forward", "pass", "so", "latency", "drops", "when", "acceptance", "is", "high", "emulated",
)
HTTP_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
                405: "Method Not Allowed", 422: "Unprocessable Entity", 500: "Internal Server Error", 503: "Service Unavailable"}



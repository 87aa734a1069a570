# Copyright: (c) eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""SIGTERM as SGLang 0.5.23 takes it in its main process (``tokenizer_manager.SignalHandler.sigterm_handler`` and
``TokenizerManager.sigterm_watchdog``): it logs that it drains, ``/health`` and ``/health_generate`` answer 503
from then on (new requests are still accepted), and it looks at the requests it still holds every few seconds,
logging how many are left, until there are none; then it stops its children and exits 0.

SGLang's watchdog notices the signal within 5 s and looks every 5 s; the emulator looks at once and then every
``--emulator-drain-interval`` seconds (0.5 by default, 5 to match SGLang). A SIGTERM sent to the whole process group
(the children too) kills the children at once, in SGLang as here: the requests they held never finish, and the
drain ends when it finds the children gone.
"""

from __future__ import annotations

import signal

SIGTERM_LINE = ("SIGTERM received. signum=%r frame=None. Draining requests and shutting down..."
                % signal.Signals.SIGTERM)
HEALTH_DURING_SHUTDOWN = "Health check request received during shutdown. Returning 503."


def remaining_line(rids):
    """SGLang's line at each look of the drain."""
    return "Gracefully exiting... Remaining number of requests %d. Remaining requests remaining_rids=%r." % (
        len(rids), list(rids))


def drain(in_flight, children_alive, log, sleep, interval):
    """Wait until no client request is in flight, looking at once and then every ``interval`` seconds.

    in_flight() -> the ids of the client requests still held; children_alive() -> whether every child still runs;
    log(msg, level) writes a line. Returns "drained", or "children_gone" when a child died meanwhile."""
    log(SIGTERM_LINE, "warning")
    while True:
        rids = sorted(in_flight())
        if not children_alive():
            return "children_gone"
        log(remaining_line(rids), "info")
        if not rids:
            return "drained"
        sleep(interval)

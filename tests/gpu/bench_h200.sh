#!/usr/bin/env bash
# playbooks/bench.yml on the lent H200 (or the H100 the device gives for it) against real SGLang 0.5.17 (TEST-ONLY; runs
# on the device as root). Ran on an H100: tests/data/h100-bench/.
#
# Here first:  bash tests/gpu/build_playbook_carry.sh CHECKOUT     (the server's carry, .sgl)
#              bash tests/gpu/build_bench_carry.sh CHECKOUT        (the benchmark's carry, .sglb)
# Then:        run(command="bash tests/gpu/playbook_h200.sh a", carry=[".sgl"], timeout_s=600)
#              run(command="bash tests/gpu/bench_h200.sh", carry=[".sglb"], timeout_s=600)
# (the second right after the first, while the machine is still warm: part a leaves SGLang installed and serving the
# random test models, the controller's ansible-core in /opt/eagle-ctl; the two carries do not fit one call's 64 MiB.)
#
# Every run is `ansible-playbook ... -i inventory/h200 -i tests/gpu/inventory-h200 --limit localhost -v`, from
# the checkout the device tool sent, like tests/gpu/playbook_h200.sh's:
#   bench_check  playbooks/bench.yml --check (says what it would do: no client, no restart)
#   bench        playbooks/bench.yml -e @tests/gpu/bench-h200.yml: the client's missing packages from the bench
#                wheelhouse, then SGLang's own client (sglang.benchmark.serving) at concurrency 1, 4, 16, 64 on both
#                sides (the baseline on a server the role restarts with speculation off, then back: same fingerprint)
#   report       playbooks/report.yml (the timeline alone)
# Random weights: the draft guesses nothing, the accept length is near 1 and speculation can only cost; the report
# says so on every figure (sglang_bench_label "random weights", sglang_bench_note).
#
# What comes back ($OUT/h200-bench/, also packed into $OUT/evidence_bench.tar.gz after every run, so a timeout still
# returns it), to be copied to tests/data/<card>-bench/ (the card the device gave: tests/data/h100-bench/) with a README:
#   reports/localhost/<time>/{bench.json,summary.json,timeline.json,report.html}   the raw figures and the report
#   console/<run>.console.txt   each run's console, stamped per line;   runs.jsonl   rc, seconds, PIDs, GPU MiB
#   nvidia-smi and ps after each run; the API key grep (the runs set one: it must be in no file that came back).
set -uo pipefail
T0=$(date +%s.%N)
budget=${BENCH_H200_BUDGET_S:-575}
P=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)   # the checkout the device tool sent
C="$P/.sglb"                                           # the carry
OUT=${OUT:-/tmp/out}
EV="$OUT/h200-bench"
RUNDIR=/var/lib/eagle-deploy/run
KEY=sk-h200-bench-5c0e9a17d3b2
mkdir -p "$EV/console" "$EV/results"
pack() { tar -czf "$OUT/evidence_bench.tar.gz" -C "$OUT" h200-bench 2>/dev/null; }
CONSOLE_DIR=$EV/console RESULTS_DIR=$EV/results
# The key reaches ansible-playbook in a 0600 file, never on its command line.
PLAY_EXTRA=(-e sglang_report_dir="$EV/reports" -e @/root/bench-key.yml)
SHOW_RE='^[0-9.]+ (fatal|failed):|c=[0-9]+:|report:|deployment is as it was|would run'
PS_RE='sglang|benchmark'
# shellcheck source=tests/gpu/play_lib.sh
. "$P/tests/gpu/play_lib.sh"

if [ ! -x /opt/sglang/venv/bin/python ] || [ ! -d /opt/eagle-ctl ] || [ -z "$(server_pid)" ]; then
    log "this machine has no serving SGLang of part a (fresh machine?): run playbook_h200.sh a first, then this at once"
    pack; exit 1
fi
log "project commit $(cat "$C/COMMIT"), server pid $(server_pid), GPU $(gpu_mib) MiB"
# The key reaches ansible-playbook in a 0600 file, never on its command line.
( umask 077; printf 'sglang_server_api_key: %s\n' "$KEY" > /root/bench-key.yml )
rm -rf /srv/bench-wheels && tar -xf "$C/bench-wheels.tar" -C /srv || { log "UNPACK FAILED"; pack; exit 1; }
log "bench wheelhouse: $(ls /srv/bench-wheels | tr '\n' ' ')"

# The key: the server gets one (a restart once, by fingerprint), so that the run proves it reaches no file.
# BENCH_H200_ONLY=1: a second call on the same warm machine (the server already keyed): the bench alone.
if [ -z "${BENCH_H200_ONLY:-}" ]; then
    play keyed playbooks/serve_eagle3.yml || { pack; exit 1; }
    play bench_check playbooks/bench.yml --check -e @tests/gpu/bench-h200.yml
fi
play bench playbooks/bench.yml -e @tests/gpu/bench-h200.yml
log "bench ended rc=$?"
[ "$(left)" -gt 60 ] && play report playbooks/report.yml
{ echo "grep -rl for the key under $EV (console, reports, results):"; grep -rl -- "$KEY" "$EV" || echo "(no file)"; } \
    | tee "$EV/results/apikey_grep.txt"
log "end"
pack

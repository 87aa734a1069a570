# shellcheck shell=bash
# What tests/gpu/playbook_h200.sh and tests/gpu/bench_h200.sh share (TEST-ONLY; sourced, runs on the device as root).
#
# The caller sets, before sourcing: T0, budget (seconds of the call), P (the checkout), EV (the evidence dir), RUNDIR,
# CONSOLE_DIR and RESULTS_DIR (where each run's console, nvidia-smi and ps go), SHOW_RE (console lines echoed after a
# run), PS_RE (processes kept in the ps listing), PLAY_EXTRA (an array of ansible-playbook arguments every run gets),
# and defines pack (packs the evidence into $OUT). PLAY_INV (an array) may replace the inventory arguments (default:
# inventory/h200 with the device as its host localhost).

left() { python3 -c "import time; print(int($budget - (time.time() - $T0)))"; }
log() { echo "[$(date -u +%H:%M:%S.%N | cut -c1-12) left $(left) s] $*" | tee -a "$EV/driver.log"; }
gpu_mib() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1 | tr -d ' '; }
server_pid() { cat "$RUNDIR/sglang.pid" 2>/dev/null | tr -d ' \n' || true; }

export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 LC_ALL=C.UTF-8 LANG=C.UTF-8 ANSIBLE_FORCE_COLOR=0 ANSIBLE_NOCOLOR=1
export ANSIBLE_CONFIG="$P/ansible.cfg"
[[ -v PLAY_INV ]] || PLAY_INV=(-i inventory/h200 -i tests/gpu/inventory-h200 --limit localhost)
# inventory/h200 asks 120000 MiB free of GPU 0 (an H200 has 143771). The device may lend an H100 (81559 MiB) for an
# H200: there every run asks 85 % of the card instead (the preflight's check is the same, its threshold fits the card;
# the driver log says so). Nothing else of the inventory changes.
CARD_MIB=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1 | tr -d ' ')
CARD_EXTRA=()
if [[ "$CARD_MIB" =~ ^[0-9]+$ ]] && (( CARD_MIB < 130000 )); then
    CARD_EXTRA=(-e "sglang_server_min_free_gpu_memory_mib=$(( CARD_MIB * 85 / 100 ))")
fi

# play NAME PLAYBOOK [ansible-playbook args...]: one run of the playbook on the device itself (ansible-core from
# /opt/eagle-ctl), its console stamped per line into $CONSOLE_DIR/NAME.console.txt, a line of $EV/runs.jsonl (rc,
# seconds, PIDs and GPU MiB before and after, the recap), nvidia-smi and ps after it, the supervisor's status file and
# log as the run left them ($RESULTS_DIR/NAME.status.json, NAME.supervisor.log), the evidence packed.
play() {
    local name=$1 book=$2; shift 2
    local pid0 mib0 t0 t1 rc recap limit console="$CONSOLE_DIR/$name.console.txt"
    limit=$(( $(left) - 15 ))
    if (( limit < 30 )); then log "run $name: not started, ${limit} s left"; return 124; fi
    pid0=$(server_pid); mib0=$(gpu_mib)
    log "run $name: $book ${CARD_EXTRA[*]} $* (server pid ${pid0:-none}, GPU ${mib0} MiB)"
    t0=$(date +%s.%N)
    (cd "$P" && timeout --signal=TERM "$limit" python3 -c \
        'import sys; sys.path.insert(0, "/opt/eagle-ctl"); sys.argv[0] = "ansible-playbook"; from ansible.cli.playbook import main; main()' \
        "$book" "${PLAY_INV[@]}" -v "${CARD_EXTRA[@]}" "${PLAY_EXTRA[@]}" "$@" 2>&1) \
        | python3 -u -c 'import sys, time
for line in sys.stdin:
    sys.stdout.write("%.3f %s" % (time.time(), line)); sys.stdout.flush()' > "$console"
    rc=${PIPESTATUS[0]}
    t1=$(date +%s.%N)
    recap=$(grep -E "^[0-9.]+ [^ ]+ +: ok=" "$console" | sed 's/^[0-9.]* //; s/  */ /g' | paste -sd ';' -)
    log "run $name: rc=$rc in $(python3 -c "print(round($t1 - $t0, 1))") s; $recap; server pid $(server_pid); GPU $(gpu_mib) MiB"
    grep -E "$SHOW_RE" "$console" | cut -c1-400 | head -20
    python3 - "$name" "$rc" "$t0" "$t1" "$pid0" "$(server_pid)" "$mib0" "$(gpu_mib)" "$recap" >> "$EV/runs.jsonl" <<'PY'
import json, sys
n, rc, t0, t1, p0, p1, m0, m1, recap = sys.argv[1:]
print(json.dumps({"run": n, "rc": int(rc), "start": float(t0), "end": float(t1), "seconds": round(float(t1) - float(t0), 2),
                  "pid_before": p0 or None, "pid_after": p1 or None, "gpu_mib_before": m0, "gpu_mib_after": m1, "recap": recap}))
PY
    nvidia-smi > "$RESULTS_DIR/$name.nvidia-smi.txt" 2>&1
    # the supervisor's status (its verdict, written at `updated`) and its own lines, before the next run replaces them
    # (never sglang.watcher.json: it holds the secrets)
    cp "$RUNDIR/sglang.status.json" "$RESULTS_DIR/$name.status.json" 2>/dev/null || true
    cp "$RUNDIR/sglang.supervisor.log" "$RESULTS_DIR/$name.supervisor.log" 2>/dev/null || true
    ps -eo user,pid,ppid,sid,etimes,rss,args --sort=pid | grep -E "$PS_RE" | grep -v grep > "$RESULTS_DIR/$name.ps.txt"
    pack
    return "$rc"
}

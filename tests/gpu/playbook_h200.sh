#!/usr/bin/env bash
# playbooks/serve_eagle3.yml itself on the lent H200, in production shape (TEST-ONLY; runs on the device as root).
#
# Here first:  bash tests/gpu/build_playbook_carry.sh CHECKOUT      (CHECKOUT: the checkout the device tool sends)
# Then:        run(command="bash tests/gpu/playbook_h200.sh a", carry=[".sgl"], timeout_s=600)
#              run(command="bash tests/gpu/playbook_h200.sh b", carry=[".sgl"], timeout_s=600)
# (b right after a, while the machine is still warm: the server a left running is b's starting point; on a fresh
# machine b first brings it up again with one run of its own, named bringup.)
#
# Every run is `ansible-playbook playbooks/serve_eagle3.yml -i inventory/h200 -i tests/gpu/inventory-h200
# --limit localhost -v`, from the checkout the device tool sent (clean: the commit in .sgl/COMMIT), with ansible-core from the carry:
#   a: fresh  (bare host: service user, offline install from the wheelhouse, patch, CUDA graphs on, smoke)
#      noop, noop2 (unchanged re-runs: changed=0, same PID), noop_check (the same with --check --diff)
#      arg    (one server argument changed: mem-fraction-static 0.2 -> 0.22: one restart, GPU memory back first)
#      noop_arg (unchanged re-run after it: its argument check was paid by arg)
#   b: the incident: tests/gpu/incident_variant.py turns the installed eagle_worker_v2.py into the incident's
#      variant; incident_off (sglang_patch_enabled=false: the smoke's first decode dies), incident_on (patch on:
#      one restart, serves), incident_noop; apikey (a key set, then grep the log dir for it); stop (stop.yml).
#      Runs of b use tests/gpu/incident.yml (--skip-server-warmup: SGLang's own warm-up decodes 8 tokens, which
#      would hit the incident's AttributeError before the server ever reports healthy).
#   c: on a fresh machine: c_install (the install role only), the variant, c_incident_off with
#      tests/gpu/incident-sync.yml (also --disable-overlap-schedule, so that the first decode is the smoke's), c_stop.
# On a lent host of two or more GPUs (kind nvidia-h200-x2 or larger; never run yet: no such kind was lent), with
# run(..., kind="nvidia-h200-x2"):
#   t: tp 2 with EAGLE-3 and CUDA graphs: t_fresh, t_noop (changed=0), t_arg (one restart, every GPU's memory back
#      first), then kill -9 of TP rank 1's scheduler while serving: the supervisor's verdict (class) and the rank's
#      process named in its status file, every rank stopped, every GPU at 0 MiB (t_after_kill.txt); t_stop.
#   n: two ranks as two nodes on one host (tests/gpu/inventory-h200-pair: node0 and node1, one GPU each, --nnodes 2):
#      n_fresh, n_noop, then n_rank1_dies: a forced restart during which rank 1's server is killed while it loads
#      (its log shows the load begun): the run fails at once naming rank 1, both ranks stopped (n_after.txt); n_stop.
# Evidence (console of each run stamped per line, server logs stamped per line by a 2 ms poller, nvidia-smi, pids,
# the supervisor's status file and log after each run, runs.jsonl; part b also figures.jsonl from
# tests/gpu/playbook_figures.py) is packed into $OUT/evidence_<part>.tar.gz after every run, so a timeout still returns it.
set -uo pipefail
part=${1:?usage: playbook_h200.sh a|b|c|w|t|n}
T0=$(date +%s.%N)
budget=${PLAYBOOK_H200_BUDGET_S:-575}
P=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)   # the checkout the device tool sent
C="$P/.sgl"                                           # the carry
OUT=${OUT:-/tmp/out}
EV=/var/tmp/h200-ev
LOGDIR=/var/log/sglang
RUNDIR=/var/lib/eagle-deploy/run                       # sglang_install_run_dir's default
mkdir -p "$EV" "$OUT"
pack() { tar -czf "$OUT/evidence_$part.tar.gz" -C / "${EV#/}" "${LOGDIR#/}" 2>/dev/null; }
CONSOLE_DIR=$EV RESULTS_DIR=$EV PLAY_EXTRA=()
SHOW_RE='^[0-9.]+ (fatal|failed):|msg: (server|smoke|restart)|crash class|hint:|restart \(|server sglang:'
PS_RE='^sglang|sglang'
# shellcheck source=tests/gpu/play_lib.sh
. "$P/tests/gpu/play_lib.sh"


setup() {
    log "setup on $(hostname): $(nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader)"
    log "project commit $(cat "$C/COMMIT")"
    rm -rf /srv/wheelhouse /srv/controller
    mkdir -p /srv && tar -xJf "$C/wheelhouse.tar.xz" -C /srv || { log "UNPACK FAILED"; return 1; }
    log "wheelhouse: $(ls /srv/wheelhouse | wc -l) wheels, $(du -sm /srv/wheelhouse | cut -f1) MiB"
    python3 -m pip install -q --no-index --no-deps --no-compile --target /opt/eagle-ctl /srv/controller/*.whl || return 1
    # Models: transformers 5.12.1 + tokenizers 0.22.2 from the wheelhouse (what the server will load them with).
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/mkdeps \
        /srv/wheelhouse/transformers-5.12.1-*.whl /srv/wheelhouse/tokenizers-0.22.2-*.whl || return 1
    PYTHONPATH=/tmp/mkdeps python3 "$P/tests/gpu/mk_models.py" /data/models/h200-test | tail -1 | tee "$EV/models.json"
    chmod -R go+rX /data/models/h200-test
    python3 -c "import json, sys; sys.exit(0 if json.load(open('$EV/models.json'))['tokenizer_ok'] else 1)" \
        || { log "no tokenizer: the role's smoke sends text"; return 1; }
    log "controller: $(PYTHONPATH=/opt/eagle-ctl python3 -c 'import ansible.release as r; print("ansible-core", r.__version__)')"
}

# Stamp every new line of every server log with the wall clock (2 ms poll), from where the files end now.
start_stamper() {
    python3 - "$LOGDIR" >> "$EV/log_stamps.tsv" <<'PY' &
import glob, os, sys, time
d = sys.argv[1]
pos = {f: os.path.getsize(f) for f in glob.glob(d + "/*_r*.log")}
while True:
    for f in glob.glob(d + "/*_r*.log"):
        try:
            with open(f, "rb") as fh:
                fh.seek(pos.get(f, 0)); data = fh.read()
        except OSError:
            continue
        cut = data.rfind(b"\n") + 1
        if cut:
            now = time.time()
            for line in data[:cut].splitlines():
                print("%.3f\t%s\t%s" % (now, os.path.basename(f), line.decode("utf-8", "replace").replace("\t", " ")[:400]))
            sys.stdout.flush()
            pos[f] = pos.get(f, 0) + cut
    time.sleep(0.002)
PY
    STAMPER=$!
}

diagnose_imports() {
    log "import check of what CUDA-graph capture imports (venv python, as the service user)"
    runuser -u sglang -- /opt/sglang/venv/bin/python -c '
import importlib, traceback
for m in ("deep_gemm", "sglang.srt.layers.attention.dsa_backend", "sglang.srt.layers.attention.deepseek_v4_backend",
          "sglang.srt.layers.attention.flashmla_backend"):
    try:
        importlib.import_module(m); print("ok", m)
    except BaseException as e:
        print("FAIL", m, type(e).__name__, e); traceback.print_exc()
' > "$EV/import_check.txt" 2>&1
    tail -20 "$EV/import_check.txt"
}

INCIDENT=(-e @tests/gpu/incident.yml)
ARG=(-e sglang_server_mem_fraction_static=0.22)
KEY=sk-h200-test-7d41c2e9b5

case "$part" in
a)
    rm -rf "$EV"; mkdir -p "$EV"
    setup || { pack; exit 1; }
    start_stamper
    if ! play fresh playbooks/serve_eagle3.yml; then
        diagnose_imports; pack; kill "$STAMPER"; exit 1
    fi
    play noop playbooks/serve_eagle3.yml
    play noop2 playbooks/serve_eagle3.yml
    play noop_check playbooks/serve_eagle3.yml --check --diff
    [ "$(left)" -gt 150 ] && play arg playbooks/serve_eagle3.yml "${ARG[@]}"
    [ "$(left)" -gt 60 ] && play noop_arg playbooks/serve_eagle3.yml "${ARG[@]}"
    ;;
b)
    if [ ! -x /opt/sglang/venv/bin/python ]; then
        log "fresh machine: setting up again and bringing the server up as run a left it"
        rm -rf "$EV"; mkdir -p "$EV"
        setup || { pack; exit 1; }
        start_stamper
        play bringup playbooks/serve_eagle3.yml "${ARG[@]}" || { pack; exit 1; }
    else
        start_stamper
    fi
    ewv2=$(/opt/sglang/venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/sglang/srt/speculative/eagle_worker_v2.py
    cp "$ewv2" "$EV/eagle_worker_v2.before_variant.py"
    python3 "$P/tests/gpu/incident_variant.py" "$ewv2" | tee "$EV/incident_variant.json"
    cp "$ewv2" "$EV/eagle_worker_v2.variant.py"
    play incident_off playbooks/serve_eagle3.yml "${ARG[@]}" "${INCIDENT[@]}" -e sglang_patch_enabled=false
    log "incident_off ended rc=$? (a failure is what this run must show)"
    cp "$ewv2" "$EV/eagle_worker_v2.patch_off.py"
    play incident_on playbooks/serve_eagle3.yml "${ARG[@]}" "${INCIDENT[@]}"
    cp "$ewv2" "$EV/eagle_worker_v2.patch_on.py"
    [ "$(left)" -gt 100 ] && play incident_noop playbooks/serve_eagle3.yml "${ARG[@]}" "${INCIDENT[@]}"
    if [ "$(left)" -gt 120 ]; then
        play apikey playbooks/serve_eagle3.yml "${ARG[@]}" "${INCIDENT[@]}" -e "sglang_server_api_key=$KEY"
        { echo "grep -rl for the key under $LOGDIR:"; grep -rl -- "$KEY" "$LOGDIR" || echo "(no file)";
          echo "lines holding it:"; grep -rc -- "$KEY" "$LOGDIR" | grep -v ':0$' || true;
          echo "consoles of the runs holding it:"; grep -l -- "$KEY" "$EV"/*.console.txt || echo "(none)"; } | tee "$EV/apikey_grep.txt"
        grep -rho -- ".\{60\}$KEY.\{20\}" "$LOGDIR" | head -3 | tee -a "$EV/apikey_grep.txt"
    fi
    play stop playbooks/stop.yml
    sleep 2
    { nvidia-smi --query-gpu=memory.used,memory.total --format=csv; nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv;
      echo "processes of user sglang:"; pgrep -u sglang -a || echo "(none)"; } | tee "$EV/after_stop.txt"
    # crash_to_failure, crash_to_verdict, verdict_to_result of every run, on the device's own clock
    python3 "$P/tests/gpu/playbook_figures.py" "$EV" > "$EV/figures.jsonl" 2>&1
    grep -E '"(incident_off|incident_on)"' "$EV/figures.jsonl" | cut -c1-400
    ;;
w)
    # The host watcher program (the systemd launcher's ExecStart) with real SGLang: the playbook brings the server up
    # (detached: no systemd here) with an API key, its argv and environment are saved, stop.yml stops it, then
    # tests/gpu/watcher_h200.py runs the watcher as systemd would (a NOTIFY_SOCKET it listens on): READY=1 after a
    # real generation, then kill -9 of the scheduler -> exit 69 with the class; the key in no file of the log dir.
    rm -rf "$EV"; mkdir -p "$EV"
    setup || { pack; exit 1; }
    start_stamper
    play w_fresh playbooks/serve_eagle3.yml -e "sglang_server_api_key=$KEY" -e sglang_server_launcher=detached \
        || { diagnose_imports; pack; exit 1; }
    python3 - "$RUNDIR/sglang.json" "$EV/server_before_stop.json" <<'PY'
import json, sys
st = json.load(open(sys.argv[1]))
env = dict(x.split("=", 1) for x in open("/proc/%d/environ" % st["pid"]).read().split("\0") if "=" in x)
env.pop("EAGLE_DEPLOY_RUN", None)
json.dump({"cmdline": st["cmdline"], "env": env, "port": st["port"]}, open(sys.argv[2], "w"))
print("saved argv", st["cmdline"][:4], "env keys", sorted(env))
PY
    play w_stop playbooks/stop.yml
    log "watcher run: real SGLang under the watcher program"
    timeout "$(( $(left) - 20 ))" python3 "$P/tests/gpu/watcher_h200.py" "$EV" "$P" "$RUNDIR" "$LOGDIR" "$KEY" 2>&1 | tee "$EV/watcher_driver.txt" | tail -60
    pgrep -u sglang -a > "$EV/w_after.txt" || echo "(no process of user sglang)" >> "$EV/w_after.txt"
    ;;
t)
    # Tensor parallel 2 on one host (issue: the playbook on several GPUs, item 1). GPUs 0 and 1.
    TP=(-e sglang_server_tp_size=2)
    gpus_mib() { nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits | tr -d ' ' | paste -sd ';' -; }
    rm -rf "$EV"; mkdir -p "$EV"
    setup || { pack; exit 1; }
    log "GPUs: $(nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv,noheader | paste -sd ';' -)"
    start_stamper
    play t_fresh playbooks/serve_eagle3.yml "${TP[@]}" || { diagnose_imports; pack; exit 1; }
    play t_noop playbooks/serve_eagle3.yml "${TP[@]}"
    [ "$(left)" -gt 200 ] && play t_arg playbooks/serve_eagle3.yml "${TP[@]}" "${ARG[@]}"
    log "GPU MiB by index while serving: $(gpus_mib)"
    ps -eo pid,ppid,args | grep -E "sglang::" | grep -v grep | tee "$EV/t_ranks.txt"
    victim=$(pgrep -u sglang -f 'sglang::scheduler.*TP1' | head -1)
    [ -n "$victim" ] || victim=$(pgrep -u sglang -f 'sglang::scheduler' | sort -n | sed -n 2p)
    log "kill -9 of TP rank 1's scheduler: pid ${victim:-none}"
    if [ -n "$victim" ]; then
        kill -9 "$victim"
        t_kill=$(date +%s.%N)
        for _ in $(seq 1 240); do
            verdict=$(python3 -c "import json; print(json.load(open('$RUNDIR/sglang.status.json')).get('verdict'))" 2>/dev/null)
            [ -n "$verdict" ] && [ "$verdict" != ready ] && [ "$verdict" != None ] && break
            sleep 0.25
        done
        log "verdict ${verdict:-none} $(python3 -c "import time; print(round(time.time() - $t_kill, 2))") s after the kill"
        cp "$RUNDIR/sglang.status.json" "$EV/t_status_after_kill.json" 2>/dev/null
        for _ in $(seq 1 120); do
            pgrep -u sglang > /dev/null || break
            sleep 0.5
        done
        sleep 2
        { echo "seconds after the kill: $(python3 -c "import time; print(round(time.time() - $t_kill, 2))")";
          echo "GPU MiB by index: $(gpus_mib)"; nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv;
          echo "processes of user sglang:"; pgrep -u sglang -a || echo "(none)"; } | tee "$EV/t_after_kill.txt"
    fi
    play t_stop playbooks/stop.yml "${TP[@]}"
    ;;
n)
    # Two ranks as two nodes on one host (issue: the playbook on several GPUs, item 2): inventory-h200-pair.
    PLAY_INV=(-i inventory/h200 -i tests/gpu/inventory-h200 -i tests/gpu/inventory-h200-pair --limit h200_pair)
    RUNDIR=/var/lib/eagle-deploy/run-node0
    pack() { tar -czf "$OUT/evidence_$part.tar.gz" -C / "${EV#/}" var/log/sglang-node0 var/log/sglang-node1 2>/dev/null; }
    rm -rf "$EV"; mkdir -p "$EV"
    setup || { pack; exit 1; }
    LOGDIR=/var/log/sglang-node1 start_stamper
    stamper1=$STAMPER
    LOGDIR=/var/log/sglang-node0 start_stamper
    play n_fresh playbooks/serve_eagle3.yml || { pack; exit 1; }
    play n_noop playbooks/serve_eagle3.yml
    # Rank 1's server killed while it loads, in a forced restart of the pair: the run must fail at once naming rank 1.
    # (the attempt's new log file, newer than the mark; its leader is the launch_server of node1's config)
    touch "$EV/n_mark"
    ( for _ in $(seq 1 1200); do
          f=$(find /var/log/sglang-node1 -name 'sglang_r*.log' -newer "$EV/n_mark" 2>/dev/null | head -1)
          if [ -n "$f" ] && grep -q "Load weight begin" "$f" 2>/dev/null; then
              pid=$(pgrep -u sglang -f 'sglang.launch_server --config /etc/sglang-node1/' | head -1)
              [ -n "$pid" ] && kill -9 "$pid" && echo "$(date +%s.%N) killed rank 1's server $pid ($f)" >> "$EV/n_kill.txt"
              break
          fi
          sleep 0.1
      done ) &
    killer=$!
    mark=$(date +%s.%N)
    play n_rank1_dies playbooks/serve_eagle3.yml -e sglang_server_force_restart=true
    log "n_rank1_dies ended rc=$? (a failure naming rank 1 is what this run must show)"
    kill "$killer" 2>/dev/null
    cat "$EV/n_kill.txt" 2>/dev/null
    grep -E "rank 1|node1|never joined|crash class" "$EV/n_rank1_dies.console.txt" | cut -c1-300 | head -12
    sleep 2
    { echo "since the run began: $(python3 -c "import time; print(round(time.time() - $mark, 2))") s";
      nvidia-smi --query-gpu=index,memory.used --format=csv; echo "processes of user sglang:"; pgrep -u sglang -a || echo "(none)"; } \
        | tee "$EV/n_after.txt"
    play n_stop playbooks/stop.yml
    kill "$stamper1" 2>/dev/null
    ;;
c)
    # The incident with the synchronous scheduler, on a fresh machine: install only, the variant, then patch off.
    rm -rf "$EV"; mkdir -p "$EV"
    setup || { pack; exit 1; }
    start_stamper
    play c_install playbooks/serve_eagle3.yml --tags sglang_install --skip-tags always || { pack; exit 1; }
    ewv2=$(/opt/sglang/venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/sglang/srt/speculative/eagle_worker_v2.py
    python3 "$P/tests/gpu/incident_variant.py" "$ewv2" | tee "$EV/incident_variant.json"
    play c_incident_off playbooks/serve_eagle3.yml -e @tests/gpu/incident-sync.yml -e sglang_patch_enabled=false
    log "c_incident_off ended rc=$? (a failure is what this run must show)"
    play c_stop playbooks/stop.yml
    { nvidia-smi --query-gpu=memory.used,memory.total --format=csv; echo "processes of user sglang:"; pgrep -u sglang -a || echo "(none)"; } \
        | tee "$EV/c_after_stop.txt"
    ;;
esac
kill "$STAMPER" 2>/dev/null
log "end of part $part"
pack

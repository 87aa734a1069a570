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
# Evidence (console of each run stamped per line, server logs stamped per line by a 2 ms poller, nvidia-smi, pids,
# runs.jsonl) is packed into $OUT/evidence_<part>.tar.gz after every run, so a timeout still returns it.
set -uo pipefail
part=${1:?usage: playbook_h200.sh a|b|c|w}
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

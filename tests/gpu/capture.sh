#!/usr/bin/env bash
# Run 1 on the H200: capture raw nvidia-smi outputs (idle and busy), run the real gpu_facts module in both
# states, and measure how fast GPU memory comes back after SIGKILL/SIGTERM (bench/gpu_release.py).
# Usage (repo root, wheels in .whl/):  OUT=/some/dir bash tests/gpu/capture.sh
# Dry run without a GPU: PATH=<dir with fake nvidia-smi>:$PATH SITE=<site with ansible> DEVICE=none bash ...
set -u
OUT=${OUT:?set OUT}
SITE=${SITE:-/tmp/site}
DEVICE=${DEVICE:-cuda}
GIB=${GIB:-20}
C=$OUT/cap
mkdir -p "$C/idle" "$C/busy" "$C/errors"
exec > >(tee "$OUT/capture.log") 2>&1
PY=$(command -v python3)
if [ ! -x "$SITE/bin/ansible" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl || exit 1
fi
export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH} LANG=C.UTF-8 LC_ALL=C.UTF-8 PYTHONUNBUFFERED=1
ANS=("$SITE/bin/ansible" localhost -i localhost, -c local -e "ansible_python_interpreter=$PY" -M library)
GQ=--query-gpu=index,uuid,name,memory.total,memory.used,memory.free
AQ=--query-compute-apps=pid,process_name,gpu_uuid,used_memory
F=--format=csv,noheader,nounits

step() { echo; echo "=== $(date -u +%T.%N) $*"; }
smi() {  # smi DIR NAME ARGS... : stdout, stderr, rc
  local d=$1 n=$2; shift 2
  nvidia-smi "$@" >"$d/$n.stdout" 2>"$d/$n.stderr"; echo $? >"$d/$n.rc"
  echo "--- nvidia-smi $* -> rc=$(cat "$d/$n.rc")"; cat "$d/$n.stdout" "$d/$n.stderr"
}

step environment
{ uname -a; "$PY" --version; "$PY" -c 'import torch; print("torch", torch.__version__, torch.cuda.is_available())';
  env | grep -E 'NCCL|NVLS|MULTICAST|NVSHMEM|CUDA_VISIBLE' | sort; } | tee "$C/environment.txt"
"$SITE/bin/ansible" --version | head -3
nvidia-smi -q | head -30 | tee "$C/nvidia-smi-q-header.txt"

step idle
smi "$C/idle" query-gpu "$GQ" "$F"
smi "$C/idle" query-compute-apps "$AQ" "$F"
nvidia-smi >"$C/idle/nvidia-smi.txt" 2>&1
"${ANS[@]}" -m gpu_facts | tee "$C/idle/gpu_facts.txt"
"${ANS[@]}" -m gpu_facts -a "wait_memory_below_mib=1024 wait_timeout=5" | tee "$C/idle/gpu_facts_wait.txt"

step errors
smi "$C/errors" no-such-gpu "$GQ" "$F" -i 7
smi "$C/errors" bad-field --query-gpu=index,bogus_field "$F"
smi "$C/errors" apps-bad-field --query-compute-apps=pid,bogus_field "$F"

step "busy: holder with $GIB GiB"
rm -f /tmp/holder.ready
"$PY" tests/gpu/holder.py --gib "$GIB" --device "$DEVICE" --ready-file /tmp/holder.ready --api-key sk-test-SECRET \
  >"$C/busy/holder.log" 2>&1 &
HOLDER=$!
for _ in $(seq 600); do [ -s /tmp/holder.ready ] && break; sleep 0.1; done
sleep 1
echo "holder pid $HOLDER ready: $(cat /tmp/holder.ready 2>/dev/null)"
smi "$C/busy" query-gpu "$GQ" "$F"
smi "$C/busy" query-compute-apps "$AQ" "$F"
nvidia-smi >"$C/busy/nvidia-smi.txt" 2>&1
"${ANS[@]}" -m gpu_facts | tee "$C/busy/gpu_facts.txt"
"${ANS[@]}" -m gpu_facts -a "fail_on_foreign=true foreign_limit_mib=1024" | tee "$C/busy/gpu_facts_fail_on_foreign.txt"
"${ANS[@]}" -m gpu_facts -a "wait_memory_below_mib=1024 wait_timeout=2" | tee "$C/busy/gpu_facts_wait_timeout.txt"
kill -KILL "$HOLDER"; wait "$HOLDER" 2>/dev/null
"${ANS[@]}" -m gpu_facts -a "wait_memory_below_mib=1024 wait_timeout=30 poll_interval=0.05" \
  | tee "$C/busy/gpu_facts_wait_after_kill.txt"

step "busy tree: holder with $GIB GiB and one child with 2 GiB"
mkdir -p "$C/busy-tree"; rm -f /tmp/holder.ready
setsid "$PY" tests/gpu/holder.py --gib "$GIB" --children 1 --child-gib 2 --device "$DEVICE" \
  --ready-file /tmp/holder.ready >"$C/busy-tree/holder.log" 2>&1 &
HOLDER=$!
for _ in $(seq 600); do [ -s /tmp/holder.ready ] && break; sleep 0.1; done
sleep 2
smi "$C/busy-tree" query-gpu "$GQ" "$F"
smi "$C/busy-tree" query-compute-apps "$AQ" "$F"
kill -KILL -- "-$HOLDER"; wait "$HOLDER" 2>/dev/null
sleep 1

step "release timing, NVML polling"
"$PY" bench/gpu_release.py --device "$DEVICE" --gib "$GIB" --signals KILL TERM --repeat 3 \
  --json-out "$C/release_nvml.json"
step "release timing, nvidia-smi polling, holder with 2 children of 2 GiB"
"$PY" bench/gpu_release.py --device "$DEVICE" --gib "$GIB" --children 2 --child-gib 2 --signals KILL TERM \
  --repeat 2 --smi --json-out "$C/release_smi_tree.json"

step done
tar -C "$OUT" -czf "$OUT/capture.tgz" cap && rm -rf "$C"
ls -la "$OUT"

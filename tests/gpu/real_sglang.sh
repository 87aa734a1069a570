#!/usr/bin/env bash
# Real SGLang 0.5.17 + EAGLE-3 on the lent H200, driven by the project's modules (TEST-ONLY).
# On this machine first:  bash tests/gpu/build_carry.sh
# Then one device call:   run(command="bash tests/gpu/real_sglang.sh", carry=[".sgl"], timeout_s=600)
# Steps, most important first, each only if the time left allows it (one call may run 600 s):
#   patch     role sglang_patch (early_init_patch) on the real eagle_worker_v2.py -> patch.json (at_risk ...)
#   argscheck sglang_args_check method=sglang_parser config_refused=argv against the real 0.5.17 parser; its
#             config_argv (--disable-cuda-graph) goes after --config FILE in every launch below, as the role does
#   serve     wait_for_model state=started (ready), /generate through EAGLEWorkerV2, /get_server_info, the
#             smoke burst, state=watched, nvidia-smi, state=stopped, nvidia-smi  -> serve_*.json, generate.json
#   kill      a fresh server, kill -9 of its sglang::scheduler child, state=watched -> child_died, then stopped
#   oom       --mem-fraction-static 0.999: the module must fail fast with cuda_oom (or kv_pool_oom)
#   lowmem    --mem-fraction-static 0.0005: no room for the KV pool -> kv_pool_oom
# Evidence (server logs, log lines stamped by a 2 ms poller, module JSON, nvidia-smi) is packed into
# $OUT/evidence.tar.gz after every step, so a timeout still returns what was done.
set -uo pipefail
T0=$(date +%s.%N)
el() { python3 -c "import time; print('%.1f' % (time.time() - $T0))"; }
log() { echo "[t=$(el) $(date -u +%H:%M:%S.%N | cut -c1-12)] $*"; }
budget=${REAL_SGLANG_BUDGET_S:-570}
repo=$(pwd)
ev=/tmp/ev
# A machine still warm from an earlier call may hold that call's server: end its process group (ours, by PID).
if [ -f /tmp/sglang/run/sglang.pid ]; then
    old=$(grep -o '[0-9]*' /tmp/sglang/run/sglang.pid | head -1)
    [ -n "$old" ] && kill -9 -- "-$old" 2>/dev/null; sleep 2
fi
rm -rf "$ev" /tmp/sglang /tmp/sgl-venv
mkdir -p "$ev" /tmp/sglang/log /tmp/sglang/run /tmp/sglang/etc "${OUT:=/tmp/out}"
# wait_for_model refuses a run dir that is not root-owned (or owned by its user) and 0755: make it so.
chmod 0755 /tmp/sglang /tmp/sglang/run; [ "$(id -u)" = 0 ] && chown root:root /tmp/sglang/run
stat -c '%U %a %n' /tmp/sglang/run
pack() { tar -czf "$OUT/evidence.tar.gz" -C /tmp ev sglang/log 2>/dev/null; }
left() { python3 -c "import time; print(int($budget - (time.time() - $T0)))"; }

export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TVM_FFI_CACHE_DIR=/tmp/tvmffi TRITON_CACHE_DIR=/tmp/triton LC_ALL=C.UTF-8 LANG=C.UTF-8
log "start $(date -u) on $(hostname)"; nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv
log "project snapshot commit $(cat .sgl/project/COMMIT)"

# The virtualenv a host would have (bin/python a symlink, so the server's command line is the argv that
# wait_for_model launched). The carried site dir IS its site-packages (the modules at HEAD look for SGLang
# only there, never through .pth paths); a .pth adds the device's torch venv after it.
python3 -m venv --without-pip /tmp/sgl-venv
sp=$(/tmp/sgl-venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
rmdir "$sp" && tar -xJf .sgl/site.tar.xz -C "$(dirname "$sp")" && mv "$(dirname "$sp")/site" "$sp" || { log "UNPACK FAILED"; exit 1; }
log "unpacked $(du -sm "$sp" | cut -f1) MiB into $sp"
torch_sp=$(python3 -c "import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))")
printf '%s\n' "$torch_sp" > "$sp/00_eagle_deploy_carry.pth"
/tmp/sgl-venv/bin/python -c "import ansible, transformers, tokenizers, torch; from importlib.metadata import version as v; print('ansible-core', ansible.__version__ if hasattr(ansible, '__version__') else v('ansible-core'), 'sglang', v('sglang'), 'transformers', transformers.__version__, 'tokenizers', tokenizers.__version__, 'torch', torch.__version__, 'sglang-kernel', v('sglang-kernel'), 'flashinfer', v('flashinfer-python'))"
mk=$(/tmp/sgl-venv/bin/python tests/gpu/mk_models.py /tmp/m | tail -1); echo "$mk" | tee "$ev/models.json"
tok=$(echo "$mk" | python3 -c "import json,sys; print(str(json.load(sys.stdin)['tokenizer_ok']).lower())")
log "models built, tokenizer_ok=$tok"

# Stamp every new line of every server log with the wall clock (2 ms poll): the ready line's time.
python3 - > "$ev/log_stamps.tsv" <<'PY' &
import glob, os, sys, time
pos = {}
while True:
    for f in glob.glob("/tmp/sglang/log/*_r*.log"):
        try:
            with open(f, "rb") as fh:
                fh.seek(pos.get(f, 0)); data = fh.read()
        except OSError:
            continue
        cut = data.rfind(b"\n") + 1
        if cut:
            now = time.time()
            for line in data[:cut].splitlines():
                line = line.decode("utf-8", "replace").replace("\t", " ")
                print("%.3f\t%s\t%s" % (now, os.path.basename(f), line[:300]))
            sys.stdout.flush()
            pos[f] = pos.get(f, 0) + cut
    time.sleep(0.002)
PY
STAMPER=$!

snap="$repo/.sgl/project"
export ANSIBLE_LIBRARY="$snap/library" ANSIBLE_ACTION_PLUGINS="$snap/action_plugins" ANSIBLE_MODULE_UTILS="$snap/module_utils" ANSIBLE_ROLES_PATH="$snap/roles"
# the project as the collection eagle.deploy: the action plugins' shared code and module_utils on the controller
export ANSIBLE_COLLECTIONS_PATH="$snap/collections:$HOME/.ansible/collections:/usr/share/ansible/collections"
: > /tmp/empty_ansible.cfg; export ANSIBLE_CONFIG=/tmp/empty_ansible.cfg ANSIBLE_STDOUT_CALLBACK=ansible.builtin.default ANSIBLE_CALLBACK_RESULT_FORMAT=yaml
export ANSIBLE_PYTHON_INTERPRETER=/tmp/sgl-venv/bin/python ANSIBLE_LOCALHOST_WARNING=false ANSIBLE_INVENTORY_UNPARSED_WARNING=false
common=(-e "venv=/tmp/sgl-venv" -e "snapshot=$snap" -e "tokenizer_ok=$tok" -e "ev=$ev"
        -e "patched_file=$sp/sglang/srt/speculative/eagle_worker_v2.py")
play() {  # play STEP [extra args...]
    local step=$1; shift
    log "step $step begins (left $(left) s)"
    /tmp/sgl-venv/bin/python -m ansible.cli.playbook -i localhost, -c local tests/gpu/real_sglang.yml \
        --tags "$step" -e "step=$step" "${common[@]}" "$@" 2>&1 | tee "$ev/ansible_$step.txt"
    local rc=${PIPESTATUS[0]}
    log "step $step ends rc=$rc"
    nvidia-smi --query-gpu=memory.used --format=csv,noheader > "$ev/gpu_after_$step.txt"
    pack
    return $rc
}

play patch
nvidia-smi > "$ev/nvidia-smi_before.txt"
play argscheck   # config_refused=argv: the serve steps read config_argv back from argscheck.json
play serve -e load_timeout=$(( $(left) - 60 ))
[ "$(left)" -gt 150 ] && play kill -e load_timeout=$(( $(left) - 40 ))
[ "$(left)" -gt 100 ] && play oom -e mem_fraction=0.999 -e '{"expect_classes": ["cuda_oom", "kv_pool_oom"]}' -e load_timeout=$(( $(left) - 30 ))
[ "$(left)" -gt 80 ] && play lowmem -e mem_fraction=0.0005 -e '{"expect_classes": ["kv_pool_oom", "cuda_oom"]}' -e load_timeout=$(( $(left) - 20 ))
kill "$STAMPER" 2>/dev/null
nvidia-smi > "$ev/nvidia-smi_end.txt"; ps -eo pid,ppid,args | grep -i "[s]glang" > "$ev/ps_end.txt"
pack
log "end"

#!/usr/bin/env bash
# Build the carry for the real-GPU run on the lent H200 (TEST-ONLY; see tests/data/h200-sglang/README.md).
#
#   bash tests/gpu/build_carry.sh        # prints the carry's size; run it right before each device call
#
# The device has no network but has Python 3.12, torch 2.11.0+cu130, triton 3.6 and the packages listed in
# /work/.library/device/KINDS.md. SGLang 0.5.17 is the newest release whose pins match that torch. This script
#   1. downloads (pip download --no-deps, binary only, cp312 manylinux_2_34..1 x86_64) SGLang 0.5.17 and every
#      wheel of the pinned list below: what SGLang needs to launch (EAGLE-3, triton attention, pytorch sampling,
#      no grammar backend) that the device lacks or has in a version SGLang cannot use (transformers 5.12.1,
#      tokenizers 0.22.2: 0.5.17 does not import with the device's transformers 5.17), plus ansible-core so the
#      device runs the project's modules through ansible-playbook exactly as a host does;
#   2. unpacks them into one site dir and slims it: no FA3 (sgl_kernel/flash_ops), no flashmla/infllm/sm100
#      kernel libraries (only the Hopper sm90 common_ops stay), no xgrammar static archive, no SGLang Rust
#      extensions (gRPC / server / multimodal _core), no bytecode;
#   3. packs it as .sgl/site.tar.xz (.sgl/ is ignored through .git/info/exclude);
#   4. snapshots library/, module_utils/ and roles/sglang_patch/ at HEAD (git show, never the working tree,
#      which other engineers may be editing) into .sgl/project/, with the commit in .sgl/project/COMMIT.
# Wheels are cached in .cache/sgl-wheels (gitignored, not carried); the pack is rebuilt only when this
# pins or the slimming change. Needs PyPI (or the machine's pip mirror) when cold.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/../.." && pwd)"
python="${EAGLE_PYTHON:-${repo}/.venv/bin/python}"
cache="${repo}/.cache/sgl-wheels"
carry="${repo}/.sgl"
limit_mib=56

# Pinned: SGLang 0.5.17 and what it needs that the device lacks. Left out on purpose (optional for this run,
# guarded imports in 0.5.17): flash-attn-4, nvidia-cutlass-dsl, nvidia-mathdx, humming-kernels, tilelang,
# helion, quack-kernels, sgl-deep-gemm, tokenspeed-mla, torchao, torch-memory-saver, kernels, datasets,
# modelscope, outlines, llguidance, mistral-common, smg-grpc-servicer, anthropic, openai-harmony, py-spy,
# blobfile, torchcodec, cuda-python (the device has cuda-bindings), cryptography (ansible-playbook on
# localhost needs no vault).
wheels=(
    sglang==0.5.17
    sglang-kernel==0.4.5
    flashinfer-python==0.6.15.post1
    apache-tvm-ffi==0.1.11
    cuda-tile==1.7.0
    nccl4py==0.6.0
    transformers==5.12.1
    tokenizers==0.22.2
    compressed-tensors==0.20.1
    loguru==0.7.3
    gguf==0.19.0
    xgrammar==0.2.1
    fastapi==0.165.0
    starlette==1.10.0
    pydantic==2.14.4
    pydantic-core==2.50.5
    annotated-types==0.8.0
    typing-inspection==0.4.5
    typing-extensions==4.16.0
    uvicorn==0.55.0
    watchfiles==1.3.0
    python-multipart==0.0.34
    openai==2.6.1
    jiter==0.19.0
    distro==1.9.0
    sniffio==1.3.1
    orjson==3.13.0
    msgspec==0.23.0
    pyzmq==27.3.0
    pybase64==1.5.1
    setproctitle==1.3.8
    partial-json-parser==0.2.1.1.post7
    interegular==0.3.3
    easydict==1.14
    zstandard==0.25.0
    soundfile==0.13.1
    cffi==2.1.1
    pycparser==3.12
    opentelemetry-api==1.45.2
    dill==0.4.0
    jsonschema==4.25.1
    jsonschema-specifications==2025.9.1
    referencing==0.36.2
    rpds-py==0.27.1
    ipython==9.18.1
    ipython-pygments-lexers==1.1.1
    jedi==0.20.1
    parso==0.8.7
    traitlets==5.16.1
    decorator==5.2.1
    matplotlib-inline==0.2.2
    pexpect==4.9.0
    ptyprocess==0.7.0
    prompt-toolkit==3.0.53
    wcwidth==0.9.4
    stack-data==0.6.3
    asttokens==3.0.2
    executing==2.3.0
    pure-eval==0.2.4
    ansible-core==2.19.14
    resolvelib==1.2.1
)
platforms=(--platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
           --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
           --platform manylinux1_x86_64 --platform any)

grep -qx '/.sgl/' "${repo}/.git/info/exclude" 2>/dev/null || echo '/.sgl/' >> "${repo}/.git/info/exclude"
mkdir -p "${cache}" "${carry}"

# Rebuilt when the pins or the slimming change (bump slim_version with the rm lines below).
slim_version=1
stamp="$(printf '%s\n' "${wheels[@]}" "slim ${slim_version}" | sha256sum | cut -d' ' -f1)"
if [[ -s "${carry}/site.tar.xz" && "$(cat "${carry}/.stamp" 2>/dev/null)" == "${stamp}" ]]; then
    echo "pack ${carry}/site.tar.xz up to date"
else
    t0=${SECONDS}
    "${python}" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
        --python-version 3.12 --implementation cp "${platforms[@]}" -d "${cache}" "${wheels[@]}" \
        2> >(grep -v "^WARNING: Location .* is ignored" >&2)
    site="$(mktemp -d)/site"
    mkdir -p "${site}"
    # One wheel per pin: unzip exactly the files the pins name (the cache may hold other versions).
    "${python}" - "${cache}" "${site}" "${wheels[@]}" <<'PY'
import glob, os, re, sys, zipfile
cache, site, pins = sys.argv[1], sys.argv[2], sys.argv[3:]
norm = lambda s: re.sub(r"[-_.]+", "_", s).lower()
for pin in pins:
    name, version = pin.split("==")
    hits = [w for w in glob.glob(os.path.join(cache, "*.whl"))
            if norm(os.path.basename(w).split("-")[0]) == norm(name) and os.path.basename(w).split("-")[1] == version]
    if len(hits) != 1:
        sys.exit("expected one wheel for %s in %s, found %s" % (pin, cache, hits))
    zipfile.ZipFile(hits[0]).extractall(site)
print("unpacked %d wheels" % len(pins))
PY
    # Slim: what this run never loads.
    rm -f "${site}"/sgl_kernel/flash_ops*.so "${site}"/sgl_kernel/flashmla_ops*.so "${site}"/sgl_kernel/infllm_ops*.so
    rm -rf "${site}"/sgl_kernel/sm100 "${site}"/xgrammar/lib/libxgrammar.a
    rm -f "${site}"/sglang/srt/grpc/_core.*.so "${site}"/sglang/srt/server/_core.*.so "${site}"/sglang/srt/multimodal/_core.*.so
    find "${site}" -name __pycache__ -type d -prune -exec rm -rf {} +
    chmod -R u+w,go+rX "${site}"
    # Deterministic archive: sorted names, fixed owner and mtime.
    tar --sort=name --owner=0 --group=0 --numeric-owner --mtime='2026-12-01 00:00Z' \
        -C "$(dirname "${site}")" -cf - site | xz -T0 -9 > "${carry}/site.tar.xz.tmp"
    mv "${carry}/site.tar.xz.tmp" "${carry}/site.tar.xz"
    echo "site dir $(du -sm "${site}" | cut -f1) MiB unpacked"
    rm -rf "$(dirname "${site}")"
    echo "${stamp}" > "${carry}/.stamp"
    echo "built ${carry}/site.tar.xz in $((SECONDS - t0)) s"
fi

# The project's modules as a host gets them, at HEAD (not the working tree).
rm -rf "${carry}/project"
mkdir -p "${carry}/project"
git -C "${repo}" archive HEAD library module_utils roles/sglang_patch | tar -x -C "${carry}/project"
git -C "${repo}" rev-parse HEAD > "${carry}/project/COMMIT"

pack_b=$(stat -c %s "${carry}/site.tar.xz")
tree_b=$(git -C "${repo}" ls-files -z --cached --others --exclude-standard | (cd "${repo}" && xargs -0 stat -c %s 2>/dev/null) | awk '{s+=$1} END {print s+0}')
carry_b=$(du -sb "${carry}" | cut -f1)
echo "pack: $((pack_b / 1048576)).$(( (pack_b % 1048576) * 10 / 1048576 )) MiB (${pack_b} bytes); carry .sgl: ${carry_b} bytes; tree: ${tree_b} bytes"
echo "project snapshot: commit $(cat "${carry}/project/COMMIT")"
total=$((carry_b + tree_b))
if (( pack_b > limit_mib * 1048576 || total > 64 * 1048576 )); then
    echo "too big: pack must stay <= ${limit_mib} MiB and carry + tree <= 64 MiB (now ${total} bytes)" >&2
    exit 1
fi
echo "carry + tree: ${total} bytes of 67108864"

# smoke.yml's burst program (roles/sglang_server/files/smoke_burst.py at HEAD), taught to send token ids when the
# run has no tokenizer (--skip-tokenizer-init): the requests, threads and checks are the role's own.
git -C "${repo}" show HEAD:roles/sglang_server/files/smoke_burst.py > "${carry}/project/smoke_burst.py"
"${python}" - "${carry}/project" <<'PY'
import sys
d = sys.argv[1]
s = open(d + "/smoke_burst.py").read()
a = '    headers = {"Content-Type": "application/json"}\n'
b = 'text = got.get("text") or ""'
assert s.count(a) == 1 and s.count(b) == 1, "the role's burst script changed; update build_carry.sh"
s = s.replace(a, '    if req.get("input_ids"):\n        body = {"input_ids": [1] + [5 + (i * 7 + j) % 900 for j in range(6 * (i + 1))],'
                 ' "sampling_params": body["sampling_params"]}\n' + a)
s = s.replace(b, 'text = got.get("text") or got.get("output_ids") or ""')
open(d + "/burst.py", "w").write(s)
PY

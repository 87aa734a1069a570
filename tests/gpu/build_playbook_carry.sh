#!/usr/bin/env bash
# Build the carry for the playbook run on the lent H200 (TEST-ONLY; see tests/data/h200-playbook/README.md).
#
#   bash tests/gpu/build_playbook_carry.sh CHECKOUT     # CHECKOUT: the checkout the device tool sends
#
# The device tool sends one checkout plus the ignored folders named in `carry`; this script fills CHECKOUT/.sgl/
# (ignored through CHECKOUT's .git/info/exclude) with
#   wheelhouse.tar.xz  wheelhouse/: SGLang (sglang_install_version of inventory/h200) and every pin of
#                      sglang_install_extra_packages in tests/gpu/inventory-h200/hosts.yml, downloaded with
#                      `pip download --no-deps` (binary, cp312, manylinux_2_34..1 x86_64) and slimmed of what this
#                      run never loads (FA3 flash_ops, flashmla/infllm/sm100 kernel libraries of sglang-kernel,
#                      xgrammar's static archive, SGLang's Rust extensions, deep_gemm's CUDA headers for its JIT, jedi's
#                      typeshed stubs, bytecode); each slimmed wheel keeps its name, its RECORD lists what is left, and it is
#                      stored uncompressed so that xz packs the whole house;
#                      controller/: ansible-core and resolvelib, for the controller (the device runs the play on
#                      itself; its python3 has jinja2, PyYAML and packaging);
#   COMMIT             the commit of CHECKOUT, whose tree is the project on the device (it must be clean: the
#                      script refuses uncommitted changes).
# Wheels are cached in .cache/sgl-wheels of this worktree (gitignored). Needs PyPI when cold.
set -euo pipefail

dest="${1:?usage: build_playbook_carry.sh CHECKOUT}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/../.." && pwd)"
python="${EAGLE_PYTHON:-${repo}/.venv/bin/python}"
cache="${repo}/.cache/sgl-wheels"
carry="${dest}/.sgl"
controller=(ansible-core==2.19.14 resolvelib==1.2.1)

exclude="$(git -C "${dest}" rev-parse --git-common-dir)/info/exclude"
case "${exclude}" in /*) ;; *) exclude="${dest}/${exclude}" ;; esac
mkdir -p "$(dirname "${exclude}")" "${cache}" "${carry}"
grep -qx '/.sgl/' "${exclude}" 2>/dev/null || echo '/.sgl/' >> "${exclude}"

mapfile -t pins < <("${python}" - "${repo}" <<'PY'
import sys, yaml
repo = sys.argv[1]
version = yaml.safe_load(open(repo + "/inventory/h200/group_vars/sglang_servers.yml"))["sglang_install_version"]
host = yaml.safe_load(open(repo + "/tests/gpu/inventory-h200/hosts.yml"))["all"]["children"]["sglang_servers"]["hosts"]["localhost"]
print("sglang==" + version)
print("\n".join(host["sglang_install_extra_packages"]))
PY
)
echo "${#pins[@]} pins for the wheelhouse, ${#controller[@]} for the controller"

platforms=(--platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
           --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
           --platform manylinux1_x86_64 --platform any)
"${python}" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp "${platforms[@]}" -d "${cache}" "${pins[@]}" "${controller[@]}" \
    2> >(grep -v "^WARNING: Location .* is ignored" >&2)

# Rebuilt only when the pins or the slimming change (bump slim_version with the drop list below).
slim_version=2
stamp="$(printf '%s\n' "${pins[@]}" "${controller[@]}" "slim ${slim_version}" | sha256sum | cut -d' ' -f1)"
if [[ -s "${carry}/wheelhouse.tar.xz" && "$(cat "${carry}/.wheelhouse.stamp" 2>/dev/null)" == "${stamp}" ]]; then
    echo "wheelhouse ${carry}/wheelhouse.tar.xz up to date"
else
stage="$(mktemp -d)"
trap 'rm -rf "${stage}"' EXIT
mkdir -p "${stage}/wheelhouse" "${stage}/controller"
"${python}" - "${cache}" "${stage}" "${#pins[@]}" "${pins[@]}" "${controller[@]}" <<'PY'
import base64, glob, hashlib, os, re, sys, zipfile
cache, stage, npins, reqs = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
norm = lambda s: re.sub(r"[-_.]+", "_", s).lower()
# What this run never loads (same slimming as tests/gpu/build_carry.sh, plus deep_gemm's JIT headers and jedi's typeshed stubs).
drop = [r"^sgl_kernel/(flash_ops|flashmla_ops|infllm_ops)[^/]*\.so$", r"^sgl_kernel/sm100/",
        r"^xgrammar/lib/libxgrammar\.a$", r"^sglang/srt/(grpc|server|multimodal)/_core\.[^/]*\.so$",
        r"^deep_gemm/include/", r"^jedi/third_party/typeshed/", r"/__pycache__/", r"\.pyc$"]
dropped = 0
for i, req in enumerate(reqs):
    name, version = req.split("==")
    hits = [w for w in glob.glob(os.path.join(cache, "*.whl"))
            if norm(os.path.basename(w).split("-")[0]) == norm(name) and os.path.basename(w).split("-")[1] == version]
    if len(hits) != 1:
        sys.exit("expected one wheel for %s in %s, found %s" % (req, cache, hits))
    out = os.path.join(stage, "wheelhouse" if i < npins else "controller", os.path.basename(hits[0]))
    with zipfile.ZipFile(hits[0]) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as dst:
        names = [n for n in src.namelist() if not any(re.search(p, n) for p in drop)]
        dropped += len(src.namelist()) - len(names)
        keep = set(names)
        for n in names:
            data = src.read(n)
            if n.endswith(".dist-info/RECORD"):
                lines = [l for l in data.decode().splitlines() if l.split(",")[0] in keep or l.split(",")[0] == n]
                data = ("\n".join(lines) + "\n").encode()
            info = zipfile.ZipInfo(n, date_time=(2026, 12, 1, 0, 0, 0))
            info.external_attr = src.getinfo(n).external_attr
            dst.writestr(info, data, zipfile.ZIP_STORED)
print("repacked %d wheels, %d files left out" % (len(reqs), dropped))
PY
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime='2026-12-01 00:00Z' -C "${stage}" -cf - wheelhouse controller \
    | xz -T0 -9 > "${carry}/wheelhouse.tar.xz.tmp"
mv "${carry}/wheelhouse.tar.xz.tmp" "${carry}/wheelhouse.tar.xz"
echo "wheelhouse: $(du -sm "${stage}/wheelhouse" | cut -f1) MiB of wheels, packed $(stat -c %s "${carry}/wheelhouse.tar.xz") bytes"
echo "${stamp}" > "${carry}/.wheelhouse.stamp"
fi

# The project itself is the checkout the device tool sends (its tracked files): it must be the commit named here.
if [[ -n "$(git -C "${dest}" status --porcelain --untracked-files=normal)" ]]; then
    echo "${dest} has changes that are not committed: commit them first (the device runs the tree as it is)" >&2
    exit 1
fi
rm -rf "${carry}/project"
git -C "${dest}" rev-parse HEAD > "${carry}/COMMIT"

tree_b=$(git -C "${dest}" ls-files -z --cached --others --exclude-standard | (cd "${dest}" && xargs -0 stat -c %s 2>/dev/null) | awk '{s+=$1} END {print s+0}')
carry_b=$(du -sb "${carry}" | cut -f1)
total=$((carry_b + tree_b))
echo "project: commit $(cat "${carry}/COMMIT"); carry ${carry_b} bytes + tree ${tree_b} bytes = ${total} of 67108864"
if (( total > 64 * 1048576 )); then
    echo "too big: carry + tree must stay <= 64 MiB" >&2
    exit 1
fi

#!/usr/bin/env bash
# Build the carry of the benchmark run on the lent H200 (TEST-ONLY; tests/gpu/bench_h200.sh).
#
#   bash tests/gpu/build_bench_carry.sh CHECKOUT     # CHECKOUT: the checkout the device tool sends
#
# Fills CHECKOUT/.sglb/ (ignored through CHECKOUT's .git/info/exclude) with
#   bench-wheels.tar  what SGLang's benchmark client imports and the H200's SGLang venv lacks (tests/gpu/bench-h200.yml
#                     sglang_bench_requirements): aiohttp and its dependencies, requests, tqdm (cp312 manylinux, pip
#                     download --no-deps), and a stub of Hugging Face datasets (tests/gpu/bench_shims: the client
#                     imports datasets.load_dataset even for random ids; pyarrow does not fit 64 MiB);
#   COMMIT            the commit of CHECKOUT, whose tree is the project on the device (clean, or refused).
# The server's own carry (.sgl, tests/gpu/build_playbook_carry.sh) goes with the call that brings the server up;
# this one with the call right after, on the same warm machine. Wheels are cached in .cache/sgl-wheels.
set -euo pipefail

dest="${1:?usage: build_bench_carry.sh CHECKOUT}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/../.." && pwd)"
python="${EAGLE_PYTHON:-${repo}/.venv/bin/python}"
cache="${repo}/.cache/sgl-wheels"
carry="${dest}/.sglb"
pins=(aiohttp==3.14.5 aiohappyeyeballs==2.7.1 aiosignal==1.4.0 attrs==26.1.0 frozenlist==1.8.0 multidict==7.2.1
      propcache==0.5.4 yarl==1.25.1 idna==3.20 requests==2.34.2 urllib3==2.8.0 charset-normalizer==3.5.3
      certifi==2026.10.19.post1 tqdm==4.70.1)

exclude="$(git -C "${dest}" rev-parse --git-common-dir)/info/exclude"
case "${exclude}" in /*) ;; *) exclude="${dest}/${exclude}" ;; esac
mkdir -p "$(dirname "${exclude}")" "${cache}" "${carry}"
grep -qx '/.sglb/' "${exclude}" 2>/dev/null || echo '/.sglb/' >> "${exclude}"

platforms=(--platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any)
"${python}" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp "${platforms[@]}" -d "${cache}" "${pins[@]}" \
    2> >(grep -v "^WARNING: Location .* is ignored" >&2)

stage="$(mktemp -d)"
trap 'rm -rf "${stage}"' EXIT
mkdir -p "${stage}/bench-wheels"
"${python}" - "${cache}" "${stage}/bench-wheels" "${pins[@]}" <<'PY'
import glob, os, re, shutil, sys
cache, out, reqs = sys.argv[1], sys.argv[2], sys.argv[3:]
norm = lambda s: re.sub(r"[-_.]+", "_", s).lower()
for req in reqs:
    name, version = req.split("==")
    hits = [w for w in glob.glob(os.path.join(cache, "*.whl"))
            if norm(os.path.basename(w).split("-")[0]) == norm(name) and os.path.basename(w).split("-")[1] == version
            and ("cp312" in w or "py3-none" in w or "abi3" in w or "py2.py3" in w)]
    if not hits:
        sys.exit("no wheel for %s in %s" % (req, cache))
    shutil.copy(sorted(hits)[0], out)
PY
# The datasets stub, with the same wheel writer as molecule/sglang-cpu's shims.
"${python}" - "${repo}" "${stage}/bench-wheels" <<'PY'
import importlib.util, pathlib, sys
repo, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
spec = importlib.util.spec_from_file_location("build_wheels", repo / "molecule/sglang-cpu/shims/build_wheels.py")
bw = importlib.util.module_from_spec(spec); spec.loader.exec_module(bw)
print(bw.build(repo / "tests/gpu/bench_shims/datasets_stub", "datasets", "0.0.0+eaglestub", "datasets", out).name)
PY
tar -cf "${carry}/bench-wheels.tar" -C "${stage}" bench-wheels
if [[ -n "$(git -C "${dest}" status --porcelain --untracked-files=normal)" ]]; then
    echo "${dest} has changes that are not committed: commit them first (the device runs the tree as it is)" >&2
    exit 1
fi
rm -rf "${carry}/project"
git -C "${dest}" rev-parse HEAD > "${carry}/COMMIT"
du -sh "${carry}"/* | sed 's/^/carry: /'

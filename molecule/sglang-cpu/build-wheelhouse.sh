#!/usr/bin/env bash
# Build the offline wheelhouse of the sglang-cpu test host on the controller (TEST-ONLY):
#   .cache/molecule/wheels-cpu/   sglang 0.5.23, its CPU runtime dependencies (requirements-cpu.txt,
#                                 CPU torch 2.13.0 from the machine's wheel dir), the shim wheels
#   .cache/molecule/wheels-cpu/lock.txt   every wheel but sglang, pinned: the role installs them
#                                 with sglang in one offline `pip install --no-deps` run.
# Idempotent: skipped when the inputs (this script, requirements-cpu.txt, shims/) are unchanged.
# Prints "changed" when it built something. Needs PyPI (or the machine's pip mirror) when cold.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/../.." && pwd)"
out="${EAGLE_MOLECULE_CACHE:-${repo}/.cache/molecule}/wheels-cpu"
python="${EAGLE_PYTHON:-${repo}/.venv/bin/python}"
sglang_version="0.5.23"

stamp="$(cat "${BASH_SOURCE[0]}" "${here}/requirements-cpu.txt" \
    $(find "${here}/shims" -type f -name '*.py' | sort) | sha256sum | cut -d' ' -f1)"
if [[ -s "${out}/lock.txt" && "$(cat "${out}/.stamp" 2>/dev/null)" == "${stamp}" ]]; then
    echo "wheelhouse ${out} up to date"
    exit 0
fi

t0=${SECONDS}
tmp="${out}.tmp"
rm -rf "${tmp}"
mkdir -p "${tmp}"
"${python}" "${here}/shims/build_wheels.py" "${tmp}" >/dev/null
"${python}" -m pip download --quiet --no-deps --only-binary=:all: --dest "${tmp}" "sglang==${sglang_version}" \
    2> >(grep -v "^WARNING: Location .* is ignored" >&2)
# pip's cache keeps a rebuild cheap; --find-links "${tmp}" gives the shims to the resolver.
# (The grep drops the noise of this machine's pip.conf mirrors; pip's exit status is kept.)
"${python}" -m pip wheel --quiet --wheel-dir "${tmp}" --find-links "${tmp}" \
    --requirement "${here}/requirements-cpu.txt" 2> >(grep -v "^WARNING: Location .* is ignored" >&2)
"${python}" - "${tmp}" <<'PY'
import pathlib, sys
wheels = sorted(pathlib.Path(sys.argv[1]).glob("*.whl"))
pins = {}
for w in wheels:
    name, version = w.name.split("-")[:2]
    if name.lower() == "sglang":
        continue
    if name in pins and pins[name] != version:
        sys.exit(f"two versions of {name} in the wheelhouse: {pins[name]}, {version}")
    pins[name] = version
for must in ("torch", "torchvision", "sgl_kernel", "transformers"):
    if must not in pins:
        sys.exit(f"{must} is missing from the wheelhouse")
(pathlib.Path(sys.argv[1]) / "lock.txt").write_text("".join(f"{n}=={v}\n" for n, v in sorted(pins.items())))
PY
echo "${stamp}" > "${tmp}/.stamp"
rm -rf "${out}"
mv "${tmp}" "${out}"
echo "changed: built ${out} ($(ls "${out}"/*.whl | wc -l) wheels, $(du -sh "${out}" | cut -f1)) in $((SECONDS - t0)) s"

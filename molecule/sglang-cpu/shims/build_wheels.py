#!/usr/bin/env python3
"""Build the TEST-ONLY shim wheels (sgl-kernel and torchvision stubs) into OUTDIR.

Pure-Python wheels written with zipfile: no build backend, no network. Usage: build_wheels.py OUTDIR
"""

from __future__ import annotations

import base64
import hashlib
import pathlib
import sys
import zipfile

HERE = pathlib.Path(__file__).resolve().parent
SHIMS = {
    # directory: (distribution name, version, top-level package)
    "sgl_kernel_stub": ("sgl_kernel", "0.0.0+eaglestub", "sgl_kernel"),
    "torchvision_stub": ("torchvision", "0.28.0+eaglestub", "torchvision"),
}
# Fixed timestamp: the same sources give the same wheel bytes.
EPOCH = (2020, 1, 1, 0, 0, 0)


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build(src: pathlib.Path, dist: str, version: str, package: str, outdir: pathlib.Path) -> pathlib.Path:
    files: dict[str, bytes] = {}
    for path in sorted((src / package).rglob("*.py")):
        files[path.relative_to(src).as_posix()] = path.read_bytes()
    # The machinery both stubs share, vendored into each (a wheel carries its package alone).
    files[f"{package}/_stub.py"] = (HERE / "stubmodule.py").read_bytes()
    info = f"{dist}-{version}.dist-info"
    files[f"{info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {dist.replace('_', '-')}\nVersion: {version}\n"
        "Summary: TEST-ONLY stub for the eagle-deploy sglang-cpu molecule scenario\n"
    ).encode()
    files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: eagle-deploy\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files[f"{info}/top_level.txt"] = f"{package}\n".encode()
    record = [_record_line(name, data) for name, data in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = outdir / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zinfo = zipfile.ZipInfo(name, EPOCH)
            zinfo.external_attr = 0o644 << 16
            zf.writestr(zinfo, data)
    return wheel


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    outdir = pathlib.Path(argv[1])
    outdir.mkdir(parents=True, exist_ok=True)
    for directory, (dist, version, package) in SHIMS.items():
        print(build(HERE / directory, dist, version, package, outdir))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

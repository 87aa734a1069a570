# Copyright: (c) eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A PEP 517 build backend for this one pure-Python package, standard library only.

pip's isolated build would otherwise download setuptools or flit_core first; with this backend
`pip install tests/emulator` and `pip wheel tests/emulator` work offline (an offline wheelhouse, a test host with
no index). The wheel holds the package's files as they read (links into module_utils/ become plain files), its
metadata and the console script; entries are written in a fixed order with a fixed date, so the same sources give
the same bytes.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import io
import os
import re
import sys
import tarfile
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "sglang_emulator"
FIXED_DATE = (1980, 1, 1, 0, 0, 0)


def _project():
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        raise RuntimeError("building the sglang-emulator package needs Python 3.11 or later (tomllib)")
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as handle:
        project = tomllib.load(handle)["project"]
    with open(os.path.join(ROOT, PACKAGE, "__init__.py"), encoding="utf-8") as handle:
        project["version"] = re.search(r'^VERSION = "([^"]+)"', handle.read(), re.M).group(1)
    return project


def _read(path):
    with open(path, "rb") as handle:
        return handle.read()


def _package_files():
    """(path in the archive, absolute path) of the package's .py files, sorted."""
    files = []
    for name in sorted(os.listdir(os.path.join(ROOT, PACKAGE))):
        if name.endswith(".py"):
            files.append(("%s/%s" % (PACKAGE, name), os.path.join(ROOT, PACKAGE, name)))
    return files


def _sources_stamp():
    """SHA-256 of the path, size and mtime of every file the wheel is built from, and of this file."""
    digest = hashlib.sha256()
    paths = [os.path.join(ROOT, "pyproject.toml"), os.path.abspath(__file__)] + [p for _, p in _package_files()]
    for path in paths:
        st = os.stat(path)
        digest.update(("%s %d %d\n" % (path, st.st_size, st.st_mtime_ns)).encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


def _metadata(project):
    lines = ["Metadata-Version: 2.1", "Name: %s" % project["name"], "Version: %s" % project["version"],
             "Summary: %s" % project["description"], "Requires-Python: %s" % project["requires-python"],
             "License: %s" % project["license"]["text"]]
    return "\n".join(lines) + "\n"


def _dist_name(project):
    return "%s-%s" % (project["name"].replace("-", "_"), project["version"])


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    project = _project()
    dist = _dist_name(project)
    info = "%s.dist-info" % dist
    entries = []
    for arcname, path in _package_files():
        entries.append((arcname, _read(path)))
    scripts = "".join("%s = %s\n" % item for item in sorted(project.get("scripts", {}).items()))
    entries += [
        ("%s/METADATA" % info, _metadata(project).encode()),
        ("%s/WHEEL" % info, b"Wheel-Version: 1.0\nGenerator: eagle-deploy wheel_backend\nRoot-Is-Purelib: true\n"
                            b"Tag: py3-none-any\n"),
        ("%s/entry_points.txt" % info, ("[console_scripts]\n" + scripts).encode()),
    ]
    record = []
    for arcname, data in entries:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (arcname, digest, len(data)))
    record.append("%s/RECORD,," % info)
    entries.append(("%s/RECORD" % info, ("\n".join(record) + "\n").encode()))
    name = "%s-py3-none-any.whl" % dist
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as wheel:
        for arcname, data in entries:
            item = zipfile.ZipInfo(arcname, FIXED_DATE)
            item.external_attr = 0o644 << 16
            item.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(item, data)
    return name


def build_sdist(sdist_directory, config_settings=None):
    project = _project()
    dist = _dist_name(project)
    name = "%s.tar.gz" % dist
    files = [("pyproject.toml", os.path.join(ROOT, "pyproject.toml")),
             ("_build/wheel_backend.py", os.path.abspath(__file__))] + _package_files()
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as sdist:
        for arcname, data in [("PKG-INFO", _metadata(project).encode())] + [
                (arc, _read(path)) for arc, path in files]:
            item = tarfile.TarInfo("%s/%s" % (dist, arcname))
            item.size, item.mode, item.mtime = len(data), 0o644, 0
            sdist.addfile(item, io.BytesIO(data))
    return name


def main(argv):
    """``python wheel_backend.py DIR``: build the wheel into DIR (created if needed) and print its path.

    The rehearsal inventory calls this on the controller to get a wheel it can pin: pip would reinstall a source
    directory on every run, but leaves an installed wheel of the same version alone. The file is replaced
    atomically, so concurrent builds never show a half-written wheel."""
    out = os.path.abspath(argv[1])
    os.makedirs(out, exist_ok=True)
    # Every host of a play asks at once (the lookup runs in each fork), and so do the test workers: one builds, the
    # others wait on this lock and then find its stamp. Without it, two builders removed each other's stamps.
    with open(os.path.join(out, ".lock"), "a", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _built_or_build(out)


def _built_or_build(out):
    """The wheel's path in ``out``: the one the stamp of these sources names, else a new build (under the lock)."""
    # The inventory asks on every run: sources unchanged since the last build (their paths, sizes and mtimes, and
    # this file's) and its wheel still there, the path is printed without building again.
    stamp = os.path.join(out, ".built-" + _sources_stamp())
    try:
        with open(stamp, encoding="utf-8") as handle:
            built = handle.read().strip()
    except OSError:
        built = ""
    if built and "/" not in built and os.path.isfile(os.path.join(out, built)):
        print(os.path.join(out, built))
        return 0
    tmp = tempfile.mkdtemp(prefix=".build-", dir=out)
    try:
        name = build_wheel(tmp)
        os.replace(os.path.join(tmp, name), os.path.join(out, name))
    finally:
        for left in os.listdir(tmp):
            os.unlink(os.path.join(tmp, left))
        os.rmdir(tmp)
    for old in os.listdir(out):
        if old.startswith(".built-"):
            os.unlink(os.path.join(out, old))
    with open(stamp + ".tmp", "w", encoding="utf-8") as handle:
        handle.write(name + "\n")
    os.replace(stamp + ".tmp", stamp)
    print(os.path.join(out, name))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

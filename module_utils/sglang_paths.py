# -*- coding: utf-8 -*-
# Copyright: eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where an installed SGLang is, and which version, read from the file system (standard library only).

The one way the modules find SGLang (``sglang_info``, ``sglang_args_check``; ``wait_for_model`` hashes files with
``file_sha256``): the site-packages directories of a virtualenv are read from its ``pyvenv.cfg`` and
``lib/pythonX.Y``; a distribution's version comes from the metadata its installer wrote there
(``<name>-<version>.dist-info/METADATA``, or ``PKG-INFO`` of a legacy ``.egg-info``), SGLang's package from the
``sglang`` directory next to it. Nothing is imported and no process is started. For a Python that is not a
virtualenv's, the caller asks that interpreter once for its import path with ``SITE_DIRS_SCRIPT`` (it imports
nothing of SGLang).
"""

from __future__ import annotations

import glob
import hashlib
import os
import re

PACKAGE = "sglang"
# The file the early-init patch edits (SGLang >= 0.5.4), relative to the package directory.
EAGLE_WORKER_V2 = os.path.join("srt", "speculative", "eagle_worker_v2.py")

# Printed by any Python: the directories its imports search (sys.path, PYTHONPATH included), as JSON, without
# importing anything beyond the standard library.
SITE_DIRS_SCRIPT = (
    "import json, os, sys\n"
    "print(json.dumps([p for p in sys.path if p and os.path.isdir(p)]))\n"
)

_NAME_RE = re.compile(r"[-_.]+")


def canonical_name(name):
    """PEP 503 name: ``SGLang_Router`` and ``sglang-router`` are the same distribution."""
    return _NAME_RE.sub("-", name).lower()


def venv_of(python):
    """The virtualenv whose ``bin/python`` this is (it holds ``pyvenv.cfg``), or None. Links are not resolved:
    a venv's python is usually a link to the system interpreter."""
    venv = os.path.dirname(os.path.dirname(os.path.abspath(python)))
    return venv if os.path.isfile(os.path.join(venv, "pyvenv.cfg")) else None


def _venv_python_version(venv):
    """``3.11`` from pyvenv.cfg's ``version``/``version_info`` line, or None."""
    try:
        with open(os.path.join(venv, "pyvenv.cfg"), encoding="utf-8") as handle:
            for line in handle:
                key, sep, value = line.partition("=")
                if sep and key.strip() in ("version", "version_info"):
                    match = re.match(r"\s*(\d+)\.(\d+)", value)
                    if match:
                        return "%s.%s" % match.groups()
    except OSError:
        pass
    return None


def venv_site_dirs(venv):
    """The venv's site-packages directories that exist, the one of its own Python version first."""
    found = sorted(glob.glob(os.path.join(glob.escape(venv), "lib*", "python3*", "site-packages")))
    version = _venv_python_version(venv)
    if version:
        own = [d for d in found if os.path.basename(os.path.dirname(d)) == "python" + version]
        found = own + [d for d in found if d not in own]
    return found


def read_metadata(path):
    """Name and Version from a core metadata file, dist-info METADATA or egg-info PKG-INFO (RFC 822 headers up to
    the first blank line)."""
    meta = {}
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            if not line.strip():
                break
            key, sep, value = line.partition(":")
            if sep and key in ("Name", "Version") and key not in meta:
                meta[key] = value.strip()
    return meta


def _metadata_file(path):
    """The core metadata file of a ``.dist-info`` or ``.egg-info`` entry (an egg-info may be that file itself)."""
    if path.endswith(".dist-info"):
        return os.path.join(path, "METADATA")
    return os.path.join(path, "PKG-INFO") if os.path.isdir(path) else path


def find_distribution(site_dir, name=PACKAGE):
    """(version, metadata dir) of distribution ``name`` installed in site_dir, or (None, None).

    Installers name the entry ``<name>-<version>.dist-info`` (``<name>-<version>[-pyX.Y].egg-info`` for legacy
    installs) with the name's ``-`` written as ``_``; the ``Name`` header inside decides. A dist-info wins over an
    egg-info of the same name, as it does for Python's importlib.metadata."""
    want = canonical_name(name)
    try:
        entries = sorted(os.listdir(site_dir), key=lambda e: (not e.endswith(".dist-info"), e))
    except OSError:
        return None, None
    for entry in entries:
        if not entry.endswith((".dist-info", ".egg-info")) or canonical_name(entry.split("-", 1)[0]) != want:
            continue
        path = os.path.join(site_dir, entry)
        try:
            meta = read_metadata(_metadata_file(path))
        except OSError:
            continue
        if canonical_name(meta.get("Name", "")) == want and meta.get("Version"):
            return meta["Version"], path
    return None, None


def file_sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def locate(site_dirs, name=PACKAGE):
    """What is installed of SGLang in these site directories (the first that holds its dist-info or package).

    Returns a dict: installed (a version was found), version, site_packages, package_dir, dist_info,
    eagle_worker_v2 (path, None when the file is absent: SGLang < 0.5.4) and eagle_worker_v2_sha256."""
    info = {"installed": False, "version": None, "site_packages": None, "package_dir": None, "dist_info": None,
            "eagle_worker_v2": None, "eagle_worker_v2_sha256": None}
    for site_dir in site_dirs:
        version, dist_info = find_distribution(site_dir, name)
        package_dir = os.path.join(site_dir, name)
        if not os.path.isdir(package_dir):
            package_dir = None
        if version is None and package_dir is None:
            continue
        info.update(installed=version is not None, version=version, site_packages=site_dir,
                    package_dir=package_dir, dist_info=dist_info)
        break
    if info["package_dir"]:
        path = os.path.join(info["package_dir"], EAGLE_WORKER_V2)
        if os.path.isfile(path):
            info["eagle_worker_v2"] = path
            info["eagle_worker_v2_sha256"] = file_sha256(path)
    return info

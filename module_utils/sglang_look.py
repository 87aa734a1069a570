# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The look of ``sglang_info`` beyond the install (standard library only): whether the early-init patch is in place,
the server-argument check's kept verdict, the GPUs and who holds them, and the systemd unit, each computed by the code
the role's own module would run (:mod:`early_init`, :mod:`sglang_args` with ``cache_only``, :mod:`sglang_gpus`,
:mod:`sglang_unit`), so that a re-run that changes nothing looks at the host in one call and skips those modules.

Every section only reads. What a section cannot tell for sure reports ``in_place: false`` (with ``why``), and the
role then runs its own module, which decides (and refuses) as it always does.
"""

from __future__ import annotations

import hashlib
import os
import sys

from ansible.module_utils.early_init import PatchError, plan
from ansible.module_utils.sglang_args import SGLangArgsChecker
from ansible.module_utils.sglang_gpus import GpuFacts
from ansible.module_utils.sglang_proc import safe_name
from ansible.module_utils.sglang_unit import (
    CHECK_PROPS, UNIT_DIRS, enable_problem, parse_show, read_regular, systemd_here, unit_facts, unit_files_on_disk,
    unit_loaded, unit_name, unit_refusal,
)
from ansible.module_utils import sglang_proc

# sglang_info's unit option.
UNIT_OPTIONS = dict(
    name=dict(type="str", required=True),
    run_dir=dict(type="path", required=True),
    launcher=dict(type="str", default="auto", choices=["auto", "systemd", "detached"]),
    unit_dir=dict(type="path", default="/etc/systemd/system"),
)


def venv_python_version(venv):
    """(major, minor) of the Python a virtualenv was made with, from its pyvenv.cfg; None when it cannot be told."""
    try:
        with open(os.path.join(venv, "pyvenv.cfg"), encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    for line in lines:
        key, sep, value = line.partition("=")
        if sep and key.strip() in ("version_info", "version"):
            parts = value.strip().split(".")
            if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
                return int(parts[0]), int(parts[1])
    return None


def look_patch(found, spec):
    """Whether eagle_worker_v2.py is already as early_init_patch would leave it, by the patch's own code, only where
    this Python parses as the virtualenv's would (same major.minor). found: sglang_info's result so far."""
    path = found.get("eagle_worker_v2")
    out = {"path": path, "in_place": False}
    if not path:
        out["why"] = "no eagle_worker_v2.py found" if found.get("installed") else "SGLang not installed"
        return out
    venv = found.get("venv")
    have = venv_python_version(venv) if venv else None
    if have != tuple(sys.version_info[:2]):
        out["why"] = ("the virtualenv's Python (%s) is not this one (%d.%d): early_init_patch checks the file with it"
                      % ("%d.%d" % have if have else "unknown", sys.version_info[0], sys.version_info[1]))
        return out
    try:
        planned = plan(path, spec["class_name"], spec["method"], spec["attributes"], spec["state"])
    except PatchError as exc:
        out["why"] = "early_init_patch would refuse: %s" % exc
        return out
    for key in ("inserted", "sha256", "at_risk", "first_raising_line"):
        out[key] = planned[key]
    out["in_place"] = not planned["changed"]
    if planned["changed"]:
        out["why"] = "the file would change"
    return out


class _Refused(Exception):
    def __init__(self, msg, result):
        super().__init__(msg)
        self.result = result


def look_args(module, params):
    """sglang_args_check's result for params (its options, checked and defaulted) from its kept verdict, never a fresh
    check and never a failure: what that module refuses on the face of its inputs (a secret among the arguments, a name
    that is no plain file name) is reported as ``error`` with ``cached: false``, for the role's own checks and its
    sglang_args_check call to refuse with their own words."""
    checker = SGLangArgsChecker(module, params=params, cache_only=True)

    def refuse(msg, **extra):
        raise _Refused(msg, dict(checker.result, **extra))

    checker.fail = refuse
    try:
        return checker.run()
    except _Refused as exc:
        return dict(exc.result, cached=False, error=str(exc))


def look_gpus(module, spec):
    """gpu_facts' result for spec (its look options), never a failure: the look is tagged always and runs before the
    install, so a GPU the query cannot read, or foreign memory over the limit, is reported (``error``;
    ``foreign_refusal``, the message gpu_facts fails with under fail_on_foreign) for the role to act on in its
    preflight, where gpu_facts would have failed."""
    def refuse(msg, **result):
        raise _Refused(msg, result)

    params = dict(spec, fail_on_foreign=False, wait_memory_below_mib=None, wait_timeout=0, poll_interval=0)
    try:
        out = GpuFacts(module, params=params, fail=refuse).facts()
    except _Refused as exc:
        out = dict(exc.result, error=str(exc))
    out.pop("changed", None)
    return out


def file_sha256(text):
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest() if text is not None else None


def look_unit(spec, systemctl, booted=systemd_here, euid=os.geteuid, unit_dirs=None):
    """The launcher that ``auto`` resolves to and, for systemd, whether our unit is there as this deployment's, loaded
    and enabled, with its text's SHA-256 (the role compares it with its template rendered from RV(unit_facts)).
    systemctl(*args) -> (rc, out, err)."""
    wanted = spec["launcher"]
    is_booted, why_not = booted()
    launcher = wanted
    if wanted == "auto":
        launcher = "systemd" if is_booted and euid() == 0 else "detached"
    out = {"launcher": launcher, "in_place": False}
    if launcher == "detached":
        out["in_place"] = True
        return out
    if not is_booted or euid() != 0:
        out["why"] = why_not or "not root"
        return out
    name, run_dir, unit_dir = spec["name"], spec["run_dir"], spec["unit_dir"]
    if not safe_name(name):
        out["why"] = "name %r is no plain file name" % name
        return out
    unit = unit_name(name)
    path = os.path.join(unit_dir, unit)
    facts = unit_facts(name, run_dir, unit_dir, sys.executable)
    out.update(unit=unit, unit_facts=facts)
    if any(c in run_dir for c in "\n\r"):
        out["why"] = "run_dir has a line break"
        return out
    rc, text, err = systemctl("show", "-p", ",".join(CHECK_PROPS), unit)
    if rc != 0:
        out["why"] = "systemctl show %s failed (rc=%s): %s" % (unit, rc, (err or "").strip()[-300:])
        return out
    show = parse_show(text)
    dirs = unit_dirs if unit_dirs is not None else (
        [unit_dir] + [d for d in UNIT_DIRS if os.path.normpath(d) != os.path.normpath(unit_dir)])
    on_disk = unit_files_on_disk(unit, dirs)
    refusal = unit_refusal(unit, show, on_disk, path, sglang_proc.deployment_name(name, run_dir),
                           os.path.realpath(run_dir))
    ours = read_regular(path)
    enabled = show.get("UnitFileState") == "enabled" and enable_problem(unit_dir, unit, path) is None
    out.update(exists=ours is not None, sha256=file_sha256(ours), loaded=unit_loaded(show, path), enabled=enabled)
    if refusal:
        out["why"] = refusal
    elif ours is None or not out["loaded"] or not enabled:
        out["why"] = "the unit is not there, not loaded as it is on disk, or not enabled"
    else:
        out["in_place"] = True  # as far as the look can tell: the role also compares sha256 with its template
    return out

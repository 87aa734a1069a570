# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The look of ``sglang_info`` beyond the install (standard library only): whether the early-init patch is in place,
the server-argument check's kept verdict, the GPUs and who holds them, and the systemd unit, each computed by the code
the role's own module would run (:mod:`early_init_plan`, :mod:`sglang_server_args` with ``cache_only``, :mod:`sglang_gpus`,
:mod:`sglang_unit_facts`), so that a re-run that changes nothing looks at the host in one call and skips those modules.

Every section only reads. What a section cannot tell for sure reports ``in_place: false`` (with ``why``), and the
role then runs its own module, which decides (and refuses) as it always does.
"""

from __future__ import annotations

import hashlib
import os
import sys

from ansible.module_utils.early_init_plan import PatchError, plan
from ansible.module_utils.sglang_server_args import SGLangArgsChecker
from ansible.module_utils.sglang_gpus import GpuFacts
from ansible.module_utils.sglang_proc import safe_name
from ansible.module_utils.sglang_module_options import argument_spec
from ansible.module_utils.sglang_unit_facts import (
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
    program_dir=dict(type="path"),
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
    this Python parses the file as the virtualenv's does: the same major version, and a minor version no older than
    the virtualenv's (a newer parser reads older source to the same tree; an older one may not read newer syntax).
    So a controller on Python 3.12 (ansible-core 2.21) keeps a rehearsal venv of 3.11. found: sglang_info's result
    so far."""
    path = found.get("eagle_worker_v2")
    out = {"path": path, "in_place": False}
    if not path:
        out["why"] = "no eagle_worker_v2.py found" if found.get("installed") else "SGLang not installed"
        return out
    venv = found.get("venv")
    have = venv_python_version(venv) if venv else None
    if have is None or have[0] != sys.version_info[0] or have[1] > sys.version_info[1]:
        out["why"] = ("the virtualenv's Python (%s) is newer than this one (%d.%d) or unknown: early_init_patch checks "
                      "the file with it"
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
    facts = unit_facts(name, run_dir, unit_dir, sys.executable, spec.get("program_dir"))
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


# What the role gives the look for the keep (the server role's _sglang_server_keep_request): wait_for_model's options
# for its launch, less argv and the fingerprint's files and data, which follow from the argument check (below).
KEEP_EXTRA = dict(
    command=dict(type="list", elements="str", required=True),
    config_path=dict(type="path", required=True),
    expected_version=dict(type="str", required=True),
)
# wait_for_model's no_log options come as sglang_info's own no_log options (keep_<name>), masked from the start.
KEEP_SECRETS = ("api_key", "secret_environment", "redact")


def keep_params(module, spec, secrets, args):
    """keep_options checked against wait_for_model's argument spec and KEEP_EXTRA, with their defaults: (params, None),
    or (None, what is wrong)."""
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

    given = dict(spec, **{k: v for k, v in secrets.items() if v is not None})
    extra = ArgumentSpecValidator(KEEP_EXTRA).validate({k: given.pop(k, None) for k in KEEP_EXTRA})
    if extra.error_messages:
        return None, "keep: %s" % "; ".join(extra.error_messages)
    given.update(keep_options(extra.validated_parameters, args))
    checked = ArgumentSpecValidator(argument_spec()).validate(given)
    module.no_log_values.update(checked._no_log_values)  # pylint: disable=protected-access
    if checked.error_messages:
        return None, "keep: %s (the options of wait_for_model)" % "; ".join(checked.error_messages)
    return checked.validated_parameters, None


def keep_options(spec, args):
    """wait_for_model's options (state started) for the server the role would launch, given the look's argument check
    ``args``: argv is the command, ``--config`` and what SGLang refuses in its config file; the fingerprint covers the
    config file, the patched eagle_worker_v2.py and the SGLang version (the server role's _sglang_server_argv,
    _sglang_server_fingerprint_files and _sglang_server_fingerprint_data, which read the same argument check)."""
    config = spec["config_path"]
    return dict(
        state="started",
        argv=list(spec["command"]) + ["--config", config] + list(args.get("config_argv") or []),
        fingerprint_files=[config] + ([args["eagle_worker_v2"]] if args.get("eagle_worker_v2") else []),
        fingerprint_data={"sglang_version": args.get("sglang_version") or spec["expected_version"]},
    )


class _CheckModeModule(object):
    """What ModelWaiter uses of an AnsibleModule, in check mode: the look's module for commands and warnings."""

    check_mode = True

    def __init__(self, module, params):
        self.params = params
        self._module = module
        self.warnings = []

    def warn(self, text):
        self.warnings.append(text)

    def run_command(self, *args, **kwargs):
        return self._module.run_command(*args, **kwargs)

    def get_bin_path(self, *args, **kwargs):
        return self._module.get_bin_path(*args, **kwargs)


def look_keep(module, spec, secrets, args, waiter=None):
    """Whether wait_for_model would keep the running server as it is, asked of its own code (ModelWaiter) in check
    mode: ours, the same fingerprint, its supervisor program current and watching, and answering its health check.
    ``kept: false`` with ``why`` otherwise (the role's own wait_for_model call then decides, and refuses, as always).
    Never a failure, never a signal, nothing written. ``spec``: the role's keep request (sglang_info's O(keep)), with
    ``secrets`` (its no_log options, by wait_for_model's names), checked against wait_for_model's own options;
    ``args``: this look's argument check, whose kept verdict gives argv."""
    from ansible.module_utils.sglang_input_checks import WaitError
    from ansible.module_utils.sglang_progress import operator_text
    from ansible.module_utils import sglang_run

    out = {"kept": False}
    if not args.get("cached"):
        out["why"] = "the argument check's verdict is not kept for these inputs"
        return out
    params, wrong = keep_params(module, spec, secrets, args)
    if wrong:
        out["why"] = wrong
        return out
    w = (waiter or sglang_run.ModelWaiter)(_CheckModeModule(module, params))
    try:
        result = w.run()
    except (WaitError, OSError) as exc:
        out["why"] = operator_text("wait_for_model would refuse: %s" % exc)
        return out
    finally:
        w.runlock.unlock()
    facade = w.module
    # A warning is something the run would say or do (put a supervisor program back): not nothing to do.
    kept = (not result.get("changed") and not result.get("failed") and result.get("phase") == "ready"
            and result.get("restart_reason") is None and result.get("supervisor") != "gone" and not facade.warnings
            and not result.get("judged_failed"))
    out.update(kept=kept, pid=result.get("pid"), fingerprint=result.get("fingerprint"),
               launcher=result.get("launcher"), log_path=result.get("log_path"), attempt=result.get("attempt"))
    if not kept:
        judged = result.get("judged_failed") and "its last smoke test failed (%s): it is tested again" % (
            result["judged_failed"])
        out["why"] = operator_text(judged or result.get("msg") or result.get("restart_reason")
                                   or "; ".join(facade.warnings) or "not kept")
    return out

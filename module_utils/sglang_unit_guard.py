# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""wait_for_model with ``launcher: systemd``: the unit of our name is this deployment's, or the run is refused.

Module side only. The unit itself is the role's template (``roles/sglang_server/tasks/unit.yml``); this file
checks it before anything is written or stopped (check mode too, :func:`check_unit`, from validate), again right
before systemd acts on it (:func:`check_unit_still_ours`), and runs the ``systemctl`` calls that must succeed
(:func:`must`). Functions of the options, the run dir and the Host.
"""

from __future__ import annotations

import os
import sys

from ansible.module_utils import sglang_proc
from ansible.module_utils import sglang_unit_facts
from ansible.module_utils.sglang_input_checks import WaitError
from ansible.module_utils.sglang_reports import findings
from ansible.module_utils.sglang_unit_facts import (
    CHECK_PROPS, UNIT_DIRS, enable_problem, launch_problem, parse_show, unit_facts, unit_files_on_disk, unit_loaded,
    unit_name, unit_owner, unit_refusal,
)


def unit_path(p):
    return os.path.join(p["unit_dir"], unit_name(p["name"]))


def our_deployment(p, run_dir):
    """(deployment, run dir's real path): what our unit's second line records (sglang_unit_facts.deployment_line)."""
    return sglang_proc.deployment_name(p["name"], run_dir), os.path.realpath(run_dir)


def check_unit(p, run_dir, host, check):
    """Before anything is written or stopped (check mode too): the unit of our name may only be our own
    deployment's. systemd is asked (FragmentPath, DropInPaths, Transient, LoadState) and every unit dir it reads
    is looked at on disk (a file it has not loaded yet); then whatever would make the role's ``systemctl enable``
    fail. Returns (report: ``unit`` and what the role's unit template needs, RV(unit_facts); our unit's text before
    this run, None: none). A launch (state=started, not check mode) also needs the unit there, written by the
    role's unit tasks and loaded by systemd: the module writes none."""
    unit, path = unit_name(p["name"]), unit_path(p)
    if any(c in run_dir for c in "\n\r"):
        raise WaitError("run_dir %r has a line break: the unit records its run dir on one line; choose another "
                        "run_dir. Nothing was stopped or launched." % run_dir)
    rc, out, err = host.systemctl("show", "-p", ",".join(CHECK_PROPS), unit)
    if rc != 0:
        raise WaitError("systemctl show %s failed (rc=%s): %s. Nothing was stopped or launched."
                        % (unit, rc, (err or "").strip()[-300:]))
    dirs = host.unit_dirs
    if dirs is None:
        dirs = [p["unit_dir"]] + [d for d in UNIT_DIRS if os.path.normpath(d) != os.path.normpath(p["unit_dir"])]
    show = parse_show(out)
    found = unit_files_on_disk(unit, dirs)
    why = unit_refusal(unit, show, found, path, *our_deployment(p, run_dir))
    if why:
        raise WaitError(why)
    for dropin, keys in sglang_unit_facts.vendor_dropins(unit, show, found):
        host.say(sglang_unit_facts.accepted_words(dropin, keys))
    before = dict(found).get(path)  # our own unit's text (None: there is none)
    with findings() as report:
        facts = unit_facts(p["name"], run_dir, p["unit_dir"], sys.executable, p.get("program_dir"))
        facts.update(exists=before is not None, loaded=unit_loaded(show, path))
        report.update(unit=unit, unit_facts=facts)
        if p["state"] != "started":
            return report, before
        why = enable_problem(p["unit_dir"], unit, path)
        if why is None and not check:
            why = launch_problem(unit, path, before, show, facts["exec_start"])
        if why:
            raise WaitError(why)
        return report, before


def check_unit_still_ours(p, run_dir, what):
    """Right before systemd acts on our unit (start, stop, disable): its file carries our mark and our deployment.
    Anything else is refused, naming the file."""
    path = unit_path(p)
    text = sglang_unit_facts.read_regular(path)
    owner = unit_owner(text) if text is not None else None
    if owner != our_deployment(p, run_dir):
        raise WaitError("%s is not this deployment's unit (%s): refusing to %s it. Choose another name for this "
                        "deployment (name), or remove that unit yourself. Nothing was stopped or launched." % (
                            path, "not a regular file" if text is None else "not written by eagle-deploy"
                            if owner is None else "it belongs to run_dir %s" % owner[1], what))


def must(systemctl, *args):
    """``systemctl *args`` (the Host's), which must succeed."""
    rc, _out, err = systemctl(*args)
    if rc != 0:
        raise WaitError("systemctl %s failed (rc=%s): %s" % (" ".join(args), rc, (err or "").strip()[-300:]))

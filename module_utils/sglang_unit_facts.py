# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The systemd launcher's pieces that need no module: what the role's unit template needs (``unit_facts``), whose unit
a file of our name is (``unit_owner``, ``unit_refusal``), what a launch needs of the unit (``launch_problem``),
``systemctl`` (injectable), whether systemd runs this host, whether the caller is still there, and where the
supervisor program the unit runs is (``supervisor_dir``, installed by the role). The unit itself is the role's template
(``roles/sglang_server/templates/sglang.service.j2``, written by ``roles/sglang_server/tasks/unit.yml``).

Standard library only (``wait_for_model`` is their one user).
"""

from __future__ import annotations

import os
import re
import select
import stat
import sys

from ansible.module_utils import sglang_proc
from ansible.module_utils.sglang_program import SUPERVISOR_DIR, argv

# The mark on a unit eagle-deploy wrote (a comment line of its header): the role's template writes UNIT_MARK; the
# module itself wrote OLD_UNIT_MARK (first line) before the unit became a template. A unit with either is ours when its
# deployment line (or, older still, its ExecStart) names this deployment: the role's template takes it over.
UNIT_MARK = "# Written by eagle-deploy (role sglang_server, tasks/unit.yml)."
OLD_UNIT_MARK = "# Written by eagle-deploy (wait_for_model)."
UNIT_MARKS = (UNIT_MARK, OLD_UNIT_MARK)
WATCHER_DIR = "watcher"  # where the module itself installed the supervisor before the role did (a legacy unit names it)
LEGACY_PROGRAM = "sglang_watcher.py"  # that program's file name on hosts (module_utils/sglang_supervisor.py's old name)
SHOW_EVERY = 1.0  # s between two looks at the unit (systemctl show) while waiting on the watcher's status file
# The watcher ends a start at `timeout` after its launch; the module stops waiting this much later (its backstop).
SERVICE_TIMEOUT_MARGIN = 30.0
UNIT_PROPS = ("ActiveState", "SubState", "Result", "MainPID", "NRestarts", "ExecMainStatus", "StatusText",
              "InvocationID", "UnitFileState")
# What the module asks systemd about a unit of our name before anything is written or stopped (unit_refusal), and
# whether systemd has loaded our unit file as it is on disk (launch_problem).
CHECK_PROPS = ("FragmentPath", "DropInPaths", "Transient", "LoadState", "UnitFileState", "ActiveState",
               "NeedDaemonReload")
# Every directory systemd (as PID 1, system manager) reads units and drop-ins from, highest priority first
# (systemd.unit(5), "System Unit Search Path"; /lib/systemd/system where /lib is not /usr/lib). A unit of our
# name in any of them, or a drop-in for it, is looked for on disk too: systemd may not have loaded it yet.
UNIT_DIRS = ("/etc/systemd/system.control", "/run/systemd/system.control", "/run/systemd/transient",
             "/run/systemd/generator.early", "/etc/systemd/system", "/run/systemd/system", "/run/systemd/generator",
             "/usr/local/lib/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system",
             "/run/systemd/generator.late")
# Where a distribution ships its units (systemd.unit(5)): a drop-in for every service there (<type>.d, such as
# Fedora's /usr/lib/systemd/system/service.d/10-timeout-abort.conf) is accepted, named in a warning, when it sets only
# HARMLESS_KEYS: keys that run no code and change nothing of the server's process (how a stop or start that timed out
# ends, the documentation). Anything else that reaches our unit is refused, naming the file.
VENDOR_DIRS = ("/usr/lib/systemd/system", "/lib/systemd/system")
HARMLESS_KEYS = {"Service": ("TimeoutAbortSec", "TimeoutStopFailureMode", "TimeoutStartFailureMode"),
                 "Unit": ("Documentation",)}
# A line of the unit's header: which deployment (sglang_proc.deployment_name, the run dir's real path) owns it.
DEPLOYMENT_PREFIX = "# eagle-deploy deployment: "


def unit_name(name):
    return "sglang-%s.service" % name


def deployment_line(name, run_dir):
    """The unit's header line that names the deployment (name + run dir) that owns it."""
    return "%s%s run_dir=%s" % (DEPLOYMENT_PREFIX, sglang_proc.deployment_name(name, run_dir), os.path.realpath(run_dir))


def supervisor_dir(run_dir, program_dir=None):
    """The supervisor program the unit runs: the directory the role sglang_server installed it in (wait_for_model's
    ``program_dir``, default ``<run_dir>/supervisor``; sglang_program)."""
    return program_dir or os.path.join(run_dir, SUPERVISOR_DIR)


def unit_facts(name, run_dir, unit_dir, python, program_dir=None):
    """What the role's unit template (roles/sglang_server/templates/sglang.service.j2) takes from the module, so that
    the role computes none of it itself: the unit's name and path, the deployment line (the run dir's hash, as
    sglang_proc.deployment_name makes it) and ExecStart's words (the module's python, ``-I -B``, the supervisor
    program's directory, the run dir, the name: sglang_program.argv)."""
    unit = unit_name(name)
    program = supervisor_dir(run_dir, program_dir)
    return {"name": unit, "path": os.path.join(unit_dir, unit), "deployment_line": deployment_line(name, run_dir),
            "python": python, "program": program, "run_dir": run_dir,
            "exec_start": argv(python, program, run_dir, name)}


def exec_words(value):
    """The words of an ExecStart= value as eagle-deploy writes it: each double-quoted, with systemd's escapes
    (backslash, quote) and specifiers (``%%``)."""
    words = []
    for m in re.finditer(r'"((?:[^"\\]|\\.)*)"', value):
        words.append(re.sub(r"\\(.)", r"\1", m.group(1)).replace("%%", "%"))
    return words


def unit_header(text):
    """The comment lines (``#``, ``;``) at the top of a unit file, before its first section or setting."""
    header = []
    for line in text.split("\n"):
        if not line.startswith(("#", ";")):
            break
        header.append(line)
    return header


def unit_owner(text):
    """(deployment, run_dir) recorded in a unit's text, or None when eagle-deploy did not write it (no mark of ours,
    UNIT_MARKS, among the comment lines of its header) or the record is not one clear line. The role's template
    writes ``ansible_managed`` as comment lines, the mark, then the deployment line; the module of earlier versions
    wrote its mark (OLD_UNIT_MARK) on the first line and the deployment line on the second. A unit the module wrote
    before the deployment line was added names its run dir and name in ExecStart (``<python> -I
    <run_dir>/watcher/sglang_watcher.py <run_dir> <name>``): its deployment is read from there."""
    header = unit_header(text)
    if not any(line.startswith(UNIT_MARKS) for line in header):
        return None
    records = [line for line in header if line.startswith(DEPLOYMENT_PREFIX)]
    if len(records) > 1:
        return None
    if records:
        deployment, sep, run_dir = records[0][len(DEPLOYMENT_PREFIX):].partition(" run_dir=")
        return (deployment, run_dir) if sep and deployment and run_dir else None
    if not header[0].startswith(OLD_UNIT_MARK):
        return None  # the template always writes the deployment line
    words = unit_exec_start(text) or []
    if len(words) == 5 and words[1] == "-I" and words[2] == os.path.join(words[3], WATCHER_DIR, LEGACY_PROGRAM):
        return sglang_proc.deployment_name(words[4], words[3]), os.path.realpath(words[3])
    return None


def dropin_dirs(unit):
    """The drop-in directory names systemd reads for ``unit``: its own ``<unit>.d``, one per dash prefix
    (``sglang-.service.d`` for every sglang-* unit) and the type's ``service.d`` (systemd.unit(5))."""
    base, dot, suffix = unit.rpartition(".")
    names = ["%s.d" % unit]
    parts = base.split("-")
    for i in range(len(parts) - 1, 0, -1):
        names.append("%s-.%s.d" % ("-".join(parts[:i]), suffix))
    names.append("%s.d" % suffix)
    return names


def read_regular(path, limit=1 << 16):
    """A regular file's text (never through a symlink), or None (a symlink, not a regular file, unreadable)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, limit).decode("utf-8", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def unit_files_on_disk(unit, dirs):
    """[(path, text)] of what systemd would read for ``unit`` from ``dirs``: a unit file of that name in each (text:
    its content, None when it is not a regular file: a symlink (masked, linked) or unreadable) and every drop-in
    (``*.conf`` in each of dropin_dirs(unit); text None). Reads only."""
    found = []
    for d in dirs:
        path = os.path.join(d, unit)
        if os.path.lexists(path):
            found.append((path, read_regular(path)))
        for name in dropin_dirs(unit):
            ddir = os.path.join(d, name)
            try:
                entries = sorted(os.listdir(ddir))
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError:
                found.append((ddir, None))  # a drop-in dir we cannot read: it may hold anything
                continue
            found.extend((os.path.join(ddir, e), None) for e in entries if e.endswith(".conf"))
    return found


def vendor_dir(directory):
    """Whether ``directory`` is where the distribution ships units: VENDOR_DIRS, or ``usr/lib/systemd/system`` under
    another root directory (an image's tree)."""
    d = os.path.normpath(directory)
    return d in VENDOR_DIRS or d.endswith(VENDOR_DIRS[0])


def harmless_keys(text):
    """The ``section.key`` names a drop-in's text sets when it sets only HARMLESS_KEYS (an empty list: nothing), or
    None when it sets anything else or is not plain ``key=value`` lines (a continued line, an ``.include``)."""
    keys, section = [], None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.endswith("\\"):
            return None
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
            continue
        key, eq, _value = line.partition("=")
        if not eq or key.strip() not in HARMLESS_KEYS.get(section, ()):
            return None
        keys.append("%s.%s" % (section, key.strip()))
    return keys


def vendor_dropin(unit, path):
    """The keys of ``path`` when it is a distribution's drop-in for every unit of ``unit``'s type (``service.d`` in a
    vendor_dir) that sets only HARMLESS_KEYS: a regular file (no link) of root's (or this user's) that nobody else
    can write, in such a directory; else None."""
    ddir = os.path.dirname(path)
    if (os.path.basename(ddir) != dropin_dirs(unit)[-1] or not vendor_dir(os.path.dirname(ddir))
            or not path.endswith(".conf")):
        return None
    try:
        for what in (path, ddir):
            st = os.lstat(what)
            if st.st_uid not in (0, os.geteuid()) or st.st_mode & 0o022:
                return None
    except OSError:
        return None
    text = read_regular(path)
    return harmless_keys(text) if text is not None else None


def vendor_dropins(unit, show, found):
    """[(path, keys)] of the drop-ins that reach ``unit`` (on disk: unit_files_on_disk(); or loaded: DropInPaths of
    systemctl show) and are accepted as a distribution's harmless ones (vendor_dropin)."""
    paths = [path for path, _text in found if is_dropin(path)] + (show.get("DropInPaths") or "").split()
    out = []
    for path in paths:
        keys = vendor_dropin(unit, path)
        if keys is not None and path not in dict(out):
            out.append((path, keys))
    return out


def dropin_words(unit, path):
    """Why a drop-in that reaches ``unit`` is refused."""
    why = "%s is a drop-in for %s that eagle-deploy did not write (it writes none)" % (path, unit)
    ddir = os.path.dirname(path)
    if os.path.basename(ddir) == dropin_dirs(unit)[-1] and vendor_dir(os.path.dirname(ddir)):
        why += (", and not a distribution's that sets only %s (a root-owned regular file nobody else can write)"
                % ", ".join(sorted("%s.%s" % (sec, key) for sec, keys in HARMLESS_KEYS.items() for key in keys)))
    return why


def accepted_words(path, keys):
    """The warning that names a distribution's harmless drop-in accepted for our unit."""
    return ("%s, a distribution's drop-in for every service, reaches this unit too: accepted, it sets only %s "
            "(no code, nothing of the server's process)" % (path, ", ".join(keys) or "nothing"))


def is_dropin(path):
    """A drop-in file (in a ``*.d`` dir) or a drop-in dir itself."""
    return path.endswith(".d") or os.path.basename(os.path.dirname(path)).endswith(".d")


def unit_refusal(unit, show, found, our_path, deployment, run_dir):
    """Why the unit ``unit`` cannot be written, started or stopped by this deployment, or None when it may.

    show: ``systemctl show -p CHECK_PROPS unit`` (parse_show); found: unit_files_on_disk(); our_path: where the role
    writes it (unit_dir); deployment, run_dir: ours (sglang_proc.deployment_name, the run dir's real path). It may:
    nothing of that
    name anywhere, or only our own file (our mark, our deployment) at our_path, loaded from there, without drop-ins
    and not transient. Otherwise the message names each file and says what to fix."""
    problems = {}  # path -> why (each file named once)
    fix = "choose another name for this deployment (name), or remove that unit yourself"
    other = None
    ours_on_disk = False
    accepted = dict(vendor_dropins(unit, show, found))  # a distribution's drop-in for every service, harmless
    for path, text in found:
        if path in accepted:
            continue
        if is_dropin(path):
            problems[path] = dropin_words(unit, path)
            continue
        if path != our_path:
            problems[path] = "%s is a unit of that name that eagle-deploy did not write" % path
            continue
        owner = unit_owner(text) if text is not None else None
        if text is None:
            problems[path] = "%s is not a regular file (a symlink: masked or linked, or unreadable)" % path
        elif owner is None:
            problems[path] = ("%s exists and was not written by eagle-deploy (its header has no line %r)"
                              % (path, UNIT_MARK))
        elif owner != (deployment, run_dir):
            other = owner
            problems[path] = ("%s belongs to another deployment of this name: run_dir %s (deployment %s), not this "
                              "one's run_dir %s" % (path, owner[1], owner[0], run_dir))
        else:
            ours_on_disk = True
    fragment = show.get("FragmentPath") or ""
    if show.get("Transient") == "yes":  # (says more than the disk's "did not write" of the same file)
        problems[fragment or unit] = ("%s is a transient unit (systemd-run --unit) that eagle-deploy did not make, "
                                      "its file %s" % (unit, fragment or "?"))
    elif show.get("LoadState") == "masked":
        problems[fragment or unit] = "%s is masked (%s)" % (unit, fragment or "?")
    elif fragment and fragment != our_path:
        problems.setdefault(fragment, "systemd loads %s from %s, a unit eagle-deploy did not write" % (unit, fragment))
    elif not ours_on_disk and show.get("ActiveState") not in (None, "", "inactive", "failed"):
        problems.setdefault(fragment or unit, "%s is %s but its file %s is gone: stop it yourself (systemctl stop %s)"
                            % (unit, show.get("ActiveState"), fragment or "?", unit))
    for path in (show.get("DropInPaths") or "").split():
        if path not in accepted:
            problems.setdefault(path, dropin_words(unit, path))
    if not problems:
        return None
    if other is not None and len(problems) == 1:
        fix = ("two deployments of one name cannot share %s: choose another name for this deployment (name), or stop "
               "and remove the other one first (playbooks/stop.yml with run_dir %s)" % (unit, other[1]))
    elif all(is_dropin(p) for p in problems):
        fix = "remove the drop-in(s) and run systemctl daemon-reload, or choose another name for this deployment (name)"
    return "%s cannot be this deployment's unit: %s. Fix: %s. Nothing was stopped or launched." % (
        unit, "; ".join(problems[p] for p in problems), fix)


def enable_problem(unit_dir, unit, path):
    """What would make the role's ``systemctl enable`` of ``unit`` (its file ``path`` in ``unit_dir``) fail or enable
    another unit, known before anything is written: a unit dir this user cannot write, a ``multi-user.target.wants``
    that is no directory, a link of that name there to another file. None when there is nothing."""
    if not os.path.isdir(unit_dir) or not os.access(unit_dir, os.W_OK | os.X_OK):
        return ("unit_dir %s is not a directory this user can write: systemd's unit dir is needed for %s. Nothing was "
                "stopped or launched." % (unit_dir, unit))
    wants = os.path.join(unit_dir, "multi-user.target.wants")
    if os.path.lexists(wants) and (os.path.islink(wants) or not os.path.isdir(wants)):
        return ("%s is not a directory: systemctl enable %s would fail there. Fix it. Nothing was stopped or launched."
                % (wants, unit))
    link = os.path.join(wants, unit)
    if os.path.lexists(link) and (not os.path.islink(link) or os.path.join(wants, os.readlink(link)) != path):
        return ("%s is there and does not link to %s: systemctl enable %s would fail (or enable another unit). Remove "
                "it. Nothing was stopped or launched." % (link, path, unit))
    return None


def unit_loaded(show, path):
    """Whether systemd has loaded the unit from ``path`` as the file is now (no daemon-reload pending)."""
    return (show.get("LoadState") == "loaded" and show.get("FragmentPath") == path
            and show.get("NeedDaemonReload") != "yes")


def unit_exec_start(text):
    """The words of the unit text's ExecStart (exec_words), or None when it has none."""
    for line in (text or "").split("\n"):
        if line.startswith("ExecStart="):
            return exec_words(line[len("ExecStart="):])
    return None


def launch_problem(unit, path, text, show, exec_start=None):
    """Why the module cannot start ``unit`` (after unit_refusal found nothing of that name but ours), or None. The
    module writes no unit: the role's unit tasks (roles/sglang_server/tasks/unit.yml) template it, reload systemd and
    enable it. text: our file's text (None: there is none); show: ``systemctl show -p CHECK_PROPS``; exec_start:
    the ExecStart this run would template (unit_facts): systemd runs the program the unit names, so it must be the
    one this run checks (sglang_program.check), whatever Python runs it."""
    if text is None:
        return ("%s does not exist: with launcher systemd the unit is written by the role sglang_server "
                "(tasks/unit.yml: its template, systemctl daemon-reload, enable). Run the role, or include_role "
                "sglang_server with tasks_from: unit.yml, before this task. Nothing was stopped or launched." % path)
    if not unit_loaded(show, path):
        return ("systemd has not loaded %s as it is on disk (LoadState=%s, FragmentPath=%s, NeedDaemonReload=%s): run "
                "systemctl daemon-reload (the handler of the role's tasks/unit.yml does). Nothing was stopped or "
                "launched." % (path, show.get("LoadState") or "?", show.get("FragmentPath") or "-",
                               show.get("NeedDaemonReload") or "?"))
    have = unit_exec_start(text)
    if exec_start is not None and (have is None or have[1:] != list(exec_start)[1:]):
        return ("%s runs %s, not the supervisor program this run checks (%s): run the role sglang_server's "
                "tasks/unit.yml (it templates the unit from unit_facts), or set program_dir to the unit's. Nothing was "
                "stopped or launched." % (path, " ".join(have or ["nothing"]), " ".join(exec_start)))
    return None


def parse_show(text):
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key] = value
    return out


class Systemctl(object):
    """systemctl, injectable so unit tests run no process."""

    def __init__(self, module):
        self.module = module
        self.path = None

    def __call__(self, *args):
        if self.path is None:
            self.path = self.module.get_bin_path("systemctl", required=True)
        return self.module.run_command([self.path] + list(args))

    def show(self, unit):
        rc, out, _err = self("show", unit, "-p", ",".join(UNIT_PROPS))
        return parse_show(out) if rc == 0 else {}


class CallerWatch(object):
    """Whether whoever reads this module's result is gone: the read end of our stdout (a pipe to sshd, or to
    Ansible's worker on a local connection) closed, or our parent changed (the connection's shell died)."""

    def __init__(self):
        self.parent = os.getppid()

    def __call__(self):
        if os.getppid() != self.parent:
            return True
        try:
            poller = select.poll()
            poller.register(sys.stdout.fileno(), 0)  # no events asked: only POLLERR/POLLHUP come back
            return any(ev & (select.POLLERR | select.POLLHUP) for _fd, ev in poller.poll(0))
        except (OSError, ValueError, AttributeError):
            return False


def systemd_here():
    """Whether systemd is the init system running this host (sd_booted(3)), and why not."""
    if not os.path.isdir("/run/systemd/system"):
        return False, "no /run/systemd/system: systemd is not PID 1 here"
    return True, None

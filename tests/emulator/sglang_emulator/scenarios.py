# Copyright: (c) eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the ``eagle`` scenario reads from the INSTALLED SGLang, and what it then does.

The installed ``eagle_worker_v2.py`` is read with the deployment's own rule (``init_order``, the analysis the
early-init patch reports as ``at_risk``): ``EAGLEWorkerV2.__init__`` fails at its first statement that can
raise (the draft worker cannot initialise here), the failure is swallowed, and the first decode request reads
``self.spec_disable_batch_threshold``. It dies with the AttributeError unless a statement before that one
assigned the attribute, which is what the patch does.
"""

from __future__ import annotations

import os
import re
import site
import sysconfig

from sglang_emulator import EAGLE_ALGORITHMS, EAGLE_ATTRIBUTE, EAGLE_CLASS, EAGLE_FILE
from sglang_emulator.init_order import method_init_order
from sglang_emulator.logs import emu
from sglang_emulator.sglang_paths import file_sha256, locate


class ScenarioError(Exception):
    """The scenario cannot run here; the message says why and what to do."""


def find_sglang_root(explicit=None):
    """Directory of the installed ``sglang`` package (explicit: that directory or its parent), found on the file
    system without importing it, as the deployment finds it. None when absent."""
    if explicit:
        for cand in (explicit, os.path.join(explicit, "sglang")):
            if os.path.isfile(os.path.join(cand, EAGLE_FILE)):
                return os.path.abspath(cand)
        return None
    paths = sysconfig.get_paths()
    dirs = [paths["purelib"], paths["platlib"]] + list(getattr(site, "getsitepackages", lambda: [])())
    return locate(list(dict.fromkeys(dirs)))["package_dir"]


def installed_sglang_version():
    """The version of the SGLang installed next to the emulator (its dist-info), or SGLang's own fallback
    ``0.0.0.dev0`` when there is none: what its ``/v1/loads`` reports as ``version``."""
    paths = sysconfig.get_paths()
    dirs = [paths["purelib"], paths["platlib"]] + list(getattr(site, "getsitepackages", lambda: [])())
    return locate(list(dict.fromkeys(dirs)))["version"] or "0.0.0.dev0"


def analyse_eagle_worker(source, filename="eagle_worker_v2.py", class_name=EAGLE_CLASS, attr=EAGLE_ATTRIBUTE):
    """Whether ``self.<attr>`` is assigned in ``<class>.__init__`` before its first statement that can raise.

    Returns a dict: class_found, init_found, assigned_before (bool), raising_lineno, raising_source."""
    order = method_init_order(source, class_name, "__init__", filename=filename)
    return {"class_found": order["class_found"], "init_found": order["method_found"],
            "assigned_before": attr in order["assigned_early"], "raising_lineno": order["first_raising_line"],
            "raising_source": order["first_raising_source"]}


def _def_lineno(path, pattern, default):
    try:
        with open(path, encoding="utf-8") as handle:
            for lineno, line in enumerate(handle, 1):
                if re.match(pattern, line):
                    return lineno
    except OSError:
        pass
    return default


def eagle_plan(root):
    """Read the installed eagle_worker_v2.py and decide what the eagle scenario does."""
    path = os.path.join(root, EAGLE_FILE)
    with open(path, "rb") as handle:
        data = handle.read()
    analysis = analyse_eagle_worker(data.decode("utf-8"), filename=path)
    analysis.update({"path": path, "sha256": file_sha256(path), "root": root})
    analysis["will_crash"] = not analysis["assigned_before"]
    sched = os.path.join(root, "srt", "managers", "scheduler.py")
    analysis["lines"] = {
        "run_scheduler_process": _def_lineno(sched, r"^def run_scheduler_process\(", 6310) + 40,
        "event_loop_overlap": _def_lineno(sched, r"^    def event_loop_overlap\(", 2061) + 20,
        "run_batch": _def_lineno(sched, r"^    def run_batch\(", 4614) + 60,
        "forward_batch_generation": _def_lineno(path, r"^    def forward_batch_generation\(", 1416) + 30,
    }
    return analysis


def prepare_eagle(args):
    """The eagle scenario's plan (None: no EAGLE algorithm, nothing to emulate), announced on the log."""
    if args.speculative_algorithm not in EAGLE_ALGORITHMS:
        emu("eagle scenario without --speculative-algorithm EAGLE/EAGLE3 (got %s): nothing to emulate, "
            "running as normal" % args.speculative_algorithm)
        return None
    root = find_sglang_root(args.emulator_sglang_root)
    if root is None:
        raise ScenarioError(
            "eagle scenario needs the installed sglang package to read %s; not found (%s). Install sglang next to "
            "the emulator or pass --emulator-sglang-root DIR (the sglang package directory)."
            % (EAGLE_FILE, args.emulator_sglang_root or "no sglang in this interpreter's site-packages"))
    try:
        plan = eagle_plan(root)
    except (OSError, SyntaxError, UnicodeDecodeError) as exc:
        raise ScenarioError("eagle scenario cannot read %s: %s" % (os.path.join(root, EAGLE_FILE), exc))
    if not plan["init_found"] or plan["raising_lineno"] is None:
        raise ScenarioError("%s: no %s.__init__ with a statement that can raise; cannot emulate"
                            % (plan["path"], EAGLE_CLASS))
    emu("eagle: read %s sha256=%s; %s.__init__ first raising statement: line %d `%s`; "
        "self.%s assigned before it: %s -> %s"
        % (plan["path"], plan["sha256"], EAGLE_CLASS, plan["raising_lineno"], plan["raising_source"],
           EAGLE_ATTRIBUTE, "yes" if plan["assigned_before"] else "no",
           "path=unpatched: the first decode will crash" if plan["will_crash"] else "path=patched: decode works"))
    return plan

"""The role's part for the tests that call a module directly: install eagle-deploy's programs (the supervisor, the
model fetch program) as the roles' tasks/program.yml do - their files/ copied with the links to module_utils followed,
files 0644, directories 0755, owned by the user running the tests (root, or the module's own user)."""
from __future__ import annotations

import os
import shutil

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SUPERVISOR = os.path.join(REPO, "roles", "sglang_server", "files", "supervisor")
FETCH = os.path.join(REPO, "roles", "sglang_model", "files", "fetch")


def install(source, directory):
    """Copy the program ``source`` (a role's files/ dir) to ``directory`` as the role would; returns ``directory``."""
    for dirpath, dirnames, filenames in os.walk(source):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        target = os.path.join(directory, os.path.relpath(dirpath, source))
        os.makedirs(target, exist_ok=True)
        os.chmod(target, 0o755)
        for f in sorted(filenames):
            if f.endswith(".pyc"):
                continue
            dst = os.path.join(target, f)
            shutil.copyfile(os.path.join(dirpath, f), dst)  # follows the links to module_utils
            os.chmod(dst, 0o644)
    return directory


def install_supervisor(run_dir, directory=None):
    """The supervisor program where wait_for_model looks by default (``<run_dir>/supervisor``)."""
    return install(SUPERVISOR, directory or os.path.join(run_dir, "supervisor"))


def install_fetch_program(state_dir, directory=None):
    """The model fetch program where sglang_model looks by default (``<state_dir>/fetch-program``)."""
    return install(FETCH, directory or os.path.join(state_dir, "fetch-program"))

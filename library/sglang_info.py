#!/usr/bin/python
# -*- coding: utf-8 -*-

# Copyright: eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_info
short_description: Find the SGLang installed in a virtualenv, without importing it
description:
  - Reads where SGLang is installed for a virtualenv (or a Python interpreter) and which version it is, from the
    C(sglang-<version>.dist-info/METADATA) file in its site-packages, and hashes
    C(sglang/srt/speculative/eagle_worker_v2.py), the file the early-init patch edits.
  - SGLang is not imported (on a GPU host that takes a long time and starts CUDA) unless O(import_check=true).
  - For a virtualenv nothing is run at all; for a Python that is not a virtualenv's, that interpreter is asked once
    for its site directories (standard library only).
  - A virtualenv that does not exist yet (check mode on a fresh host) is not an error; RV(installed) is then false.
version_added: "1.0.0"
author:
  - eagle-deploy contributors
options:
  venv:
    description:
      - The virtualenv that holds SGLang, for example C(/opt/sglang/venv-0.5.23).
    type: path
  python:
    description:
      - The Python of that virtualenv (its parent's parent is the virtualenv when it holds C(pyvenv.cfg)), or any
        other interpreter, which is then asked for its site directories.
    type: path
  import_check:
    description:
      - Also run C(python -B -c "import sglang") and report whether it succeeds (RV(importable), RV(import_error)).
        Slow on a GPU host; writes no bytecode.
    type: bool
    default: false
  timeout:
    description:
      - Seconds allowed for the import with O(import_check=true).
    type: int
    default: 300
notes:
  - Read-only; runs the same in check mode.
attributes:
  check_mode:
    support: full
    details: Only reads files (and, with O(import_check=true), imports SGLang in a process that writes no bytecode).
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Find the installed SGLang
  ansible.legacy.sglang_info:
    venv: /opt/sglang/venv-0.5.23
  register: sglang

- name: Show it
  ansible.builtin.debug:
    msg: "SGLang {{ sglang.version }} in {{ sglang.package_dir }}"
  when: sglang.installed

- name: Also check that it imports (slow on a GPU host)
  ansible.legacy.sglang_info:
    python: /opt/sglang/venv/bin/python
    import_check: true
"""

RETURN = r"""
installed:
  description: Whether SGLang's dist-info was found (a version is known).
  returned: always
  type: bool
  sample: true
version:
  description: The installed SGLang version, from its dist-info; null when not installed.
  returned: always
  type: str
  sample: 0.5.23
venv:
  description: The virtualenv (null when O(python) is not a virtualenv's).
  returned: always
  type: str
  sample: /opt/sglang/venv-0.5.23
python:
  description: The virtualenv's python (or O(python)).
  returned: always
  type: str
  sample: /opt/sglang/venv-0.5.23/bin/python
site_packages:
  description: The site-packages directory that holds SGLang; null when not installed.
  returned: always
  type: str
  sample: /opt/sglang/venv-0.5.23/lib/python3.11/site-packages
package_dir:
  description: The C(sglang) package directory; null when not installed.
  returned: always
  type: str
  sample: /opt/sglang/venv-0.5.23/lib/python3.11/site-packages/sglang
eagle_worker_v2:
  description: Path of C(sglang/srt/speculative/eagle_worker_v2.py); null when absent (SGLang < 0.5.4) or not installed.
  returned: always
  type: str
  sample: /opt/sglang/venv-0.5.23/lib/python3.11/site-packages/sglang/srt/speculative/eagle_worker_v2.py
eagle_worker_v2_sha256:
  description: SHA-256 of that file as it is now (patched or not); null when absent.
  returned: always
  type: str
  sample: 9f2c1e0d4b8a7c6e5f4d3c2b1a0918273645546372819aabbccddeeff0011223
importable:
  description: Whether C(import sglang) succeeded.
  returned: when O(import_check=true)
  type: bool
  sample: false
import_error:
  description: The last line of the import's error output.
  returned: when O(import_check=true) and the import failed
  type: str
  sample: "ModuleNotFoundError: No module named 'torch'"
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_paths import PACKAGE, SITE_DIRS_SCRIPT, locate, venv_of, venv_site_dirs


class SGLangInfoError(Exception):
    """A failure: the message says what happened and what to do."""

    def __init__(self, msg, extra):
        super().__init__(msg)
        self.msg = msg
        self.extra = extra


class SGLangInfo:
    """Find SGLang for one virtualenv or interpreter; ``runner`` runs a command (module.run_command)."""

    def __init__(self, params, runner):
        self.params = params
        self.runner = runner

    def fail(self, msg, **extra):
        raise SGLangInfoError(msg, extra)

    def site_dirs(self, venv, python):
        if venv is not None:
            return venv_site_dirs(venv)
        rc, out, err = self.runner([python, "-c", SITE_DIRS_SCRIPT])
        if rc != 0:
            self.fail("%s could not list its site directories (rc=%s): %s" % (python, rc, (err or out).strip()[-300:]), rc=rc)
        try:
            dirs = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            self.fail("%s printed no site directories: %r" % (python, out[-300:]))
        return [d for d in dirs if os.path.isdir(d)]

    def import_check(self, python):
        rc, out, err = self.runner(
            [python, "-B", "-c", "import %s" % PACKAGE], timeout=self.params["timeout"])
        if rc == 0:
            return {"importable": True}
        lines = [line for line in (err or out).splitlines() if line.strip()]
        return {"importable": False, "import_error": lines[-1].strip() if lines else "exit status %s" % rc}

    def run(self):
        venv = self.params["venv"]
        python = self.params["python"]
        if venv is None:
            venv = venv_of(python)
        elif python is None:
            python = os.path.join(venv, "bin", "python")
        result = {"venv": venv, "python": python}
        if not os.path.exists(python):
            # Nothing installed yet (check mode on a fresh host, or a typo: the caller decides).
            result.update(locate([]))
            if self.params["import_check"]:
                result.update(importable=False, import_error="%s does not exist" % python)
            result.pop("dist_info")
            return result
        result.update(locate(self.site_dirs(venv, python)))
        result.pop("dist_info")
        if self.params["import_check"]:
            result.update(self.import_check(python))
        return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            venv=dict(type="path"),
            python=dict(type="path"),
            import_check=dict(type="bool", default=False),
            timeout=dict(type="int", default=300),
        ),
        mutually_exclusive=[("venv", "python")],
        required_one_of=[("venv", "python")],
        supports_check_mode=True,
    )

    def runner(cmd, timeout=None):
        if timeout:
            timeout_bin = module.get_bin_path("timeout")
            if timeout_bin:
                cmd = [timeout_bin, str(timeout)] + cmd
        return module.run_command(cmd, environ_update={"PYTHONDONTWRITEBYTECODE": "1"})

    try:
        result = SGLangInfo(module.params, runner).run()
    except SGLangInfoError as exc:
        module.fail_json(msg=exc.msg, **exc.extra)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()

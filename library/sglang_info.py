#!/usr/bin/python
# -*- coding: utf-8 -*-

# Copyright: eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_info
short_description: Find the SGLang installed in a virtualenv, without importing it, and look at what a deployment needs
description:
  - Reads where SGLang is installed for a virtualenv (or a Python interpreter) and which version it is, from the
    C(sglang-<version>.dist-info/METADATA) file in its site-packages, and hashes
    C(sglang/srt/speculative/eagle_worker_v2.py), the file the early-init patch edits.
  - SGLang is not imported (on a GPU host that takes a long time and starts CUDA) unless O(import_check=true).
  - For a virtualenv nothing is run at all; for a Python that is not a virtualenv's, that interpreter is asked once
    for its site directories (standard library only).
  - A virtualenv that does not exist yet (check mode on a fresh host) is not an error; RV(installed) is then false.
  - In the same call it can look at what the other steps of a deployment decide on, each with the code of the module
    that step runs, so that a re-run that changes nothing makes one look per host (C(playbooks/serve_eagle3.yml)).
    O(patch) - whether C(eagle_worker_v2.py) is already as M(ansible.legacy.early_init_patch) would leave it.
    O(args_check) - the verdict M(ansible.legacy.sglang_args_check) kept for these very inputs (never a fresh
    check). O(gpus) - what M(ansible.legacy.gpu_facts) reads. O(unit) - whether the systemd unit of the deployment is
    there as this deployment's, loaded and enabled.
version_added: "1.0.0"
author:
  - eagle-deploy contributors (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
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
  model_dirs:
    description:
      - Model checkpoint directories to look at in the same call; each must hold
        C(config.json). Reported in RV(model_dirs), never a failure here (the caller decides).
    type: list
    elements: path
    default: []
  requirements:
    description:
      - pip requirements to look for in the virtualenv (the install role's), in the forms pip takes, C(name),
        C(name[extras]==version) (also C(===version), and C(==version.*) for a prefix), C(name[extras] @ URL) and
        a bare wheel path or URL. Versions compare as PEP 440 says (C(==1.0) is met by C(1.0.0)).
      - A wheel (a path, or a C(file:), C(http:) or C(https:) URL whose last part is a wheel file name) is in
        place when its distribution is installed with the version of its file name, the test pip makes before it
        leaves an installed distribution alone. The name before C(@) must be the wheel's own.
      - A requirement that only pip can decide (other version specifiers, environment markers, a VCS URL, a
        source directory or archive, which pip must build to learn its version) is reported in RV(drift), so that
        the caller runs pip.
      - Installed distributions are read from their C(.dist-info/METADATA) or C(.egg-info) (C(PKG-INFO)).
    type: list
    elements: str
    default: []
  user:
    description:
      - A service account expected to exist, C({name, group, home, shell}); any difference is reported in RV(drift).
    type: dict
  paths:
    description:
      - Paths expected in place, each a dict with C(path), C(state) (V(directory) or V(link)), C(owner), C(group),
        and C(mode) for a directory or C(src) (the link's target) for a link. Any difference is reported in
        RV(drift).
    type: list
    elements: dict
    default: []
  site_dirs:
    description:
      - Directories the virtualenv is expected to see after its own site-packages (for example a host-wide PyTorch
        install), listed one a line, in this order, in the file C(eagle_deploy_site_dirs.pth) of its site-packages
        (what the install role writes). A difference, or the file missing, is reported in RV(drift).
      - A requirement of O(requirements) installed in one of these directories counts as installed, as it does
        for pip in that virtualenv.
      - Null (the default) looks neither at the file nor into those directories.
    type: list
    elements: path
  patch:
    description:
      - The early-init patch to look for in the C(eagle_worker_v2.py) found (the options of
        M(ansible.legacy.early_init_patch) but O(ansible.legacy.early_init_patch#module:path) and
        O(ansible.legacy.early_init_patch#module:backup)); see RV(patch).
      - Decided only where this Python's major.minor is the virtualenv's (the patch module parses and compiles the
        file with the virtualenv's Python); elsewhere C(in_place) in RV(patch) is false, and the caller runs the module.
    type: dict
    suboptions:
      class_name:
        description: The class whose method is patched.
        type: str
        default: EAGLEWorkerV2
      method:
        description: The method whose top gets the assignments.
        type: str
        default: __init__
      attributes:
        description: Attribute names and their default values (Python literals).
        type: dict
        default: {spec_disable_batch_threshold: "0"}
      state:
        description: Whether the managed block should be there (V(present)) or not (V(absent)).
        type: str
        choices: [present, absent]
        default: present
  args_check:
    description:
      - The options of M(ansible.legacy.sglang_args_check), exactly as that module takes them (its documentation
        says what each means), checked against that module's own argument spec (its defaults filled in; the config
        file's hash stays a no_log value). The look reports the verdict that module kept in its C(cache_dir) for these
        very inputs (C(cached) true in RV(args_check)), computed by the same code with the same key. It never checks fresh -
        with no verdict kept, C(cached) is false and the caller runs the module. An input that module
        refuses on its face (a secret among the arguments, a malformed name) does not fail the look - C(cached) is
        false and C(error) holds that module's message, for the caller's own checks and that module to refuse.
    type: dict
  gpus:
    description:
      - The options of M(ansible.legacy.gpu_facts) that say which GPUs and whose processes (O(gpus.run_dir),
        O(gpus.name), O(gpus.gpu_indices), O(gpus.fail_on_foreign), O(gpus.foreign_limit_mib)); RV(gpus) is that
        module's result. The look never fails on the GPUs (it is the play's first call, before the install, on every
        tag) - foreign GPU memory over the limit is reported in C(gpus.foreign_refusal) (the message that module
        fails with under O(gpus.fail_on_foreign)), a query that failed in C(gpus.error); the caller acts on them.
    type: dict
    suboptions:
      run_dir:
        description: The run dir whose run state names our server's processes.
        type: path
      name:
        description: The deployment's name.
        type: str
        default: sglang
      gpu_indices:
        description: The GPUs looked at (all when not given).
        type: list
        elements: int
      fail_on_foreign:
        description: Taken for that module's key, but the look only reports (C(gpus.foreign_refusal)).
        type: bool
        default: false
      foreign_limit_mib:
        description: Foreign GPU memory allowed per GPU with O(gpus.fail_on_foreign).
        type: int
        default: 0
  models:
    description:
      - The options of M(ansible.legacy.sglang_model), exactly as that module takes them (its documentation says what
        each means), checked against that module's own argument spec (the token stays a no_log value). The look
        reports whether each model is already in place, by that module's own look (its manifest and C(lstat) of every
        file it lists - no hashing, no network); see RV(models). It never fetches.
    type: dict
  unit:
    description:
      - The deployment whose systemd unit C(sglang-<name>.service) to look at; see RV(unit).
    type: dict
    suboptions:
      name:
        description: The deployment's name.
        type: str
        required: true
      run_dir:
        description: The deployment's run dir (the unit records it).
        type: path
        required: true
      launcher:
        description: As M(ansible.legacy.wait_for_model) takes it; V(auto) resolves as it does there.
        type: str
        choices: [auto, systemd, detached]
        default: auto
      unit_dir:
        description: Where the role writes the unit.
        type: path
        default: /etc/systemd/system
      program_dir:
        description:
          - Where the role installed the supervisor program the unit runs, as M(ansible.legacy.wait_for_model) takes
            its C(program_dir) (default C(<run_dir>/supervisor)); part of the unit's C(ExecStart).
        type: path
  keep:
    description:
      - Whether M(ansible.legacy.wait_for_model) with O(ignore:state=started) would keep the running server as it is,
        asked of that module's own code in check mode (nothing is written or signalled; its run lock is taken shared),
        the recorded server is ours, its fingerprint is the one these options give, its supervisor program is current
        (the one installed in its C(program_dir) is the one this eagle-deploy ships)
        and watching, and it answers its health check; see RV(keep).
      - The options of M(ansible.legacy.wait_for_model) for the launch, exactly as that module takes them and checked
        against its own argument spec, less O(ignore:argv), O(ignore:fingerprint_files), O(ignore:fingerprint_data) and
        the secrets (O(keep_api_key), O(keep_secret_environment), O(keep_redact)); instead C(command) (the server's
        command, a list), C(config_path) (its C(--config) file) and C(expected_version) (the SGLang version when the
        argument check found none). argv is C(command), C(--config config_path) and the options the installed SGLang
        refuses in its config file (C(config_argv) of RV(args_check)); the fingerprint covers C(config_path), the
        C(eagle_worker_v2.py) found and the SGLang version, as the server role gives them to wait_for_model.
      - Needs O(args_check) and its kept verdict (C(cached) of RV(args_check)); without it C(kept) of RV(keep) is false.
    type: dict
  keep_api_key:
    description: O(keep)'s O(ignore:api_key) (the health check's bearer token), a no_log option.
    type: str
  keep_secret_environment:
    description: O(keep)'s O(ignore:secret_environment) (part of the fingerprint), a no_log option.
    type: dict
  keep_redact:
    description: O(keep)'s O(ignore:redact) (part of the fingerprint), a no_log option.
    type: list
    elements: str
notes:
  - Read-only; runs the same in check mode.
  - O(requirements), O(user) and O(paths) let one call tell whether an installation is already as wanted
    (RV(in_place)), so that the tasks which would converge it can be skipped on a no-op re-run.
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

- name: Find it and look at the model dirs in the same call
  ansible.legacy.sglang_info:
    python: /opt/sglang/venv/bin/python
    model_dirs: [/data/models/Kimi-K2.5-INT4, /data/models/Kimi-K2.5-EAGLE3]
  register: sglang

- name: Fail unless every model dir holds config.json
  ansible.builtin.assert:
    that: sglang.model_dirs | rejectattr('state', 'equalto', 'ok') | list | length == 0

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
model_dirs:
  description:
    - One entry per O(model_dirs) item, in order. C(state) is V(ok) (a directory holding C(config.json)),
      V(missing) (the path does not exist), V(not_a_directory), or V(no_config_json) (the directory exists
      without C(config.json)); C(config_json) is the full path of the C(config.json) looked for; C(real_path) is
      the directory the path names on the host, links and C(..) resolved (two names of one directory have the same).
  returned: always
  type: list
  elements: dict
  sample: [{"path": "/data/models/Kimi-K2.5-INT4", "state": "no_config_json",
            "config_json": "/data/models/Kimi-K2.5-INT4/config.json", "real_path": "/data/models/Kimi-K2.5-INT4"}]
drift:
  description: What differs from O(requirements), O(user) and O(paths), one line each; empty when all is in place.
  returned: always
  type: list
  elements: str
  sample: ["sglang==0.5.23: not installed (0.5.20)", "/opt/sglang: mode 0700, want 0755"]
in_place:
  description: Whether RV(drift) is empty.
  returned: always
  type: bool
  sample: true
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
patch:
  description:
    - The patch's look. C(path) - the C(eagle_worker_v2.py) found (null where none); C(in_place) - whether it is
      already as the patch module would leave it; C(why) - why not, where it is not; and, where the patch was
      computed, C(inserted), C(sha256) (of the file as the patch leaves it), C(at_risk), C(first_raising_line), as
      the patch module returns them.
  returned: when O(patch) is given
  type: dict
  sample: {path: /opt/sglang/venv-0.5.23/lib/python3.11/site-packages/sglang/srt/speculative/eagle_worker_v2.py,
           in_place: true, inserted: [spec_disable_batch_threshold], at_risk: [spec_disable_batch_threshold],
           first_raising_line: 84, sha256: 3f0c}
args_check:
  description:
    - M(ansible.legacy.sglang_args_check)'s result for O(args_check), from its kept verdict (C(cached) true), or
      C(cached) false with C(cache_miss) saying why and nothing checked.
  returned: when O(args_check) is given
  type: dict
  sample: {cached: true, method: sglang_parser, config_argv: [], config_file_in_place: true, sglang_version: 0.5.23}
gpus:
  description:
    - M(ansible.legacy.gpu_facts)'s result for O(gpus) (C(gpus), C(processes), C(foreign), C(foreign_refusal), ...);
      where the query failed, what there is of it and C(error), the message that module would fail with.
  returned: when O(gpus) is given
  type: dict
  sample: {nvidia_smi: /usr/bin/nvidia-smi, gpus: [], processes: [], foreign: []}
models:
  description:
    - C(in_place) - whether every model of O(models) is in place as M(ansible.legacy.sglang_model) would leave it;
      C(models) - per model C(name), C(path), C(in_place), C(why) (where not), C(commit), C(files), C(bytes).
  returned: when O(models) is given
  type: dict
  sample: {in_place: true, models: [{name: Kimi-K2.5-INT4, path: /data/models/Kimi-K2.5-INT4, in_place: true,
           commit: 0123456789abcdef0123456789abcdef01234567, files: 72, bytes: 547000000000}]}
unit:
  description:
    - C(launcher) - what O(unit.launcher) resolves to; C(in_place) - true for V(detached), and for V(systemd) where the
      unit is there as this deployment's (no foreign unit, drop-in or transient unit of its name), loaded as it is on
      disk and enabled; C(why) - why not. For V(systemd) also C(unit_facts) (what the role's unit template takes, as
      M(ansible.legacy.wait_for_model) returns them), C(exists), C(sha256) (of the unit file's text, which the role
      compares with its template), C(loaded), C(enabled).
  returned: when O(unit) is given
  type: dict
  sample: {launcher: systemd, in_place: true, exists: true, loaded: true, enabled: true, sha256: 9b1e}
keep:
  description:
    - Whether M(ansible.legacy.wait_for_model) would keep the running server as it is (O(keep)). C(kept) - true when
      it would, with nothing to change (not even its supervisor program); C(why) - why not, in the module's own words
      (C(not running), C(fingerprint changed - argv), a refusal); C(pid), C(fingerprint), C(launcher), C(log_path),
      C(attempt) of the recorded server as the module reads them.
  returned: when O(keep) is given
  type: dict
  sample: {kept: true, pid: 4242, fingerprint: 7eeafe32, launcher: detached, log_path: /var/log/sglang/sglang_r1.log,
           attempt: 1}
"""

import grp
import json
import os
import posixpath
import pwd
import re
import stat
from urllib.parse import unquote, urlsplit

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.early_init_plan import PATCH_OPTIONS
from ansible.module_utils.sglang_server_args import ARGUMENT_SPEC, model_dir_state
from ansible.module_utils.sglang_gpus import LOOK_OPTIONS
from ansible.module_utils.sglang_host_look import (
    KEEP_SECRETS, UNIT_OPTIONS, look_args, look_gpus, look_keep, look_patch, look_unit,
)
from ansible.module_utils import sglang_weights
from ansible.module_utils.sglang_paths import (
    PACKAGE, SITE_DIRS_SCRIPT, canonical_name, find_distribution, locate, venv_of, venv_site_dirs,
)

# PEP 508: a name, optional extras, then a version specifier or "@ URL", then optional environment markers.
_REQ_RE = re.compile(r"""^(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(?:\[[^\]]*\])?\s*
                         (?:@\s*(?P<url>\S+)|(?P<spec>[^;@]*))\s*(?:;(?P<marker>.*))?$""", re.X)
# PEP 440 ==/=== with one version (a trailing .* for ==); anything else needs pip's resolver.
_EQ_RE = re.compile(r"^\(?\s*(?P<op>===?)\s*(?P<version>[^\s,;()]+)\s*\)?$")
# PEP 427: {distribution}-{version}(-{build tag})?-{python tag}-{abi tag}-{platform tag}.whl
_WHEEL_PARTS = (5, 6)
_VERSION_RE = re.compile(r"^v?(?:(?P<epoch>\d+)!)?(?P<release>\d+(?:\.\d+)*)(?P<rest>.*)$", re.I)

# The file in a virtualenv's site-packages that lists the host directories it sees (sglang_install_site_dirs).
SITE_DIRS_PTH = "eagle_deploy_site_dirs.pth"


def wheel_name_version(location):
    """(distribution, version) from a wheel's file name at a path or URL (PEP 427), or None when it is no wheel."""
    path = urlsplit(location).path if "://" in location or location.startswith("file:") else location
    base = unquote(posixpath.basename(path))
    if not base.endswith(".whl"):
        return None
    parts = base[:-len(".whl")].split("-")
    if len(parts) not in _WHEEL_PARTS or not all(parts):
        return None
    return parts[0], parts[1].replace("_", "-")


def requirement_want(req):
    """(name, version spec or None) that a requirement asks for, or None when only pip can tell whether it is met.

    The version spec is ``==V``, ``==V.*`` or ``===V``."""
    req = req.strip()
    wheel = wheel_name_version(req)
    if wheel is not None and "@" not in req:
        return wheel[0], "==" + wheel[1]
    m = _REQ_RE.match(req)
    if m is None or m.group("marker") is not None:
        return None
    name = m.group("name")
    if m.group("url") is not None:
        wheel = wheel_name_version(m.group("url"))
        if wheel is None or canonical_name(wheel[0]) != canonical_name(name):
            return None
        return name, "==" + wheel[1]
    spec = m.group("spec").strip()
    if not spec:
        return name, None
    m = _EQ_RE.match(spec)
    if m is None:
        return None
    return name, m.group("op") + m.group("version")


def _pep440_key(version):
    """(epoch, release without trailing zeros, pre/post/dev part without separators, local part with '.' as its
    separator), lower case; None when unparsable."""
    m = _VERSION_RE.match(version.strip())
    if m is None:
        return None
    release = [int(x) for x in m.group("release").split(".")]
    while len(release) > 1 and release[-1] == 0:
        release.pop()
    public, _plus, local = m.group("rest").lower().partition("+")
    return int(m.group("epoch") or 0), tuple(release), re.sub(r"[-_.]", "", public), re.sub(r"[-_]", ".", local)


def version_matches(spec, have):
    """Whether installed version ``have`` meets ``==V``, ``==V.*`` or ``===V`` as PEP 440 says. Forms this cannot
    decide (a local version label on one side only, an unparsable version) do not match: the caller runs pip."""
    if spec.startswith("==="):
        return spec[3:] == have
    want = spec[2:]
    if want == have:
        return True
    if want.endswith(".*"):
        prefix, got = _VERSION_RE.match(want[:-2]), _VERSION_RE.match(have)
        if prefix is None or got is None or prefix.group("rest"):
            return False
        if int(prefix.group("epoch") or 0) != int(got.group("epoch") or 0):
            return False
        wanted = [int(x) for x in prefix.group("release").split(".")]
        release = [int(x) for x in got.group("release").split(".")]
        release += [0] * max(0, len(wanted) - len(release))
        return release[:len(wanted)] == wanted
    a, b = _pep440_key(want), _pep440_key(have)
    return a is not None and a == b


def requirement_drift(req, site_dirs):
    want = requirement_want(req)
    if want is None:
        return "%s: not a form that can be checked without pip" % req
    name, spec = want
    for site_dir in site_dirs:
        have, _where = find_distribution(site_dir, name)
        if have is not None:
            if spec is None or version_matches(spec, have):
                return None
            return "%s: %s %s is installed" % (req, canonical_name(name), have)
    return "%s: not installed" % req


def site_dirs_drift(site_dirs, want):
    """What differs between the virtualenv's eagle_deploy_site_dirs.pth and the directories it should list."""
    if not site_dirs:
        return ["the virtualenv has no site-packages for %s" % SITE_DIRS_PTH] if want else []
    path = os.path.join(site_dirs[0], SITE_DIRS_PTH)
    try:
        with open(path, encoding="utf-8") as handle:
            have = [line.strip() for line in handle if line.strip() and not line.startswith("#")]
    except OSError:
        return ["%s: does not exist" % path] if want else []
    if have != list(want):
        return ["%s: lists %s, want %s" % (path, have, list(want))]
    return []


def _owner_drift(path, st, owner, group):
    out = []
    if owner is not None:
        try:
            uid = pwd.getpwnam(owner).pw_uid
        except KeyError:
            return ["%s: owner %s does not exist" % (path, owner)]
        if st.st_uid != uid:
            out.append("%s: owner uid %d, want %s" % (path, st.st_uid, owner))
    if group is not None:
        try:
            gid = grp.getgrnam(group).gr_gid
        except KeyError:
            return out + ["%s: group %s does not exist" % (path, group)]
        if st.st_gid != gid:
            out.append("%s: group gid %d, want %s" % (path, st.st_gid, group))
    return out


def path_drift(spec):
    """What differs between a path and {path, state: directory|link, owner, group, mode, src}."""
    path, state = spec["path"], spec.get("state", "directory")
    try:
        st = os.lstat(path)
    except OSError:
        return ["%s: does not exist" % path]
    if state == "link":
        if not stat.S_ISLNK(st.st_mode):
            return ["%s: not a link" % path]
        if os.readlink(path) != spec.get("src"):
            return ["%s: points at %s, want %s" % (path, os.readlink(path), spec.get("src"))]
        return _owner_drift(path, st, spec.get("owner"), spec.get("group"))
    if not stat.S_ISDIR(st.st_mode):
        return ["%s: not a directory" % path]
    out = _owner_drift(path, st, spec.get("owner"), spec.get("group"))
    mode = spec.get("mode")
    if mode is not None and stat.S_IMODE(st.st_mode) != int(str(mode), 8):
        out.append("%s: mode %04o, want %s" % (path, stat.S_IMODE(st.st_mode), mode))
    return out


def user_drift(spec):
    name = spec.get("name")
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        return ["user %s does not exist" % name]
    out = []
    group = spec.get("group")
    if group is not None:
        try:
            if grp.getgrnam(group).gr_gid != pw.pw_gid:
                out.append("user %s: primary group gid %d, want %s" % (name, pw.pw_gid, group))
        except KeyError:
            out.append("group %s does not exist" % group)
    for key, have in (("home", pw.pw_dir), ("shell", pw.pw_shell)):
        if spec.get(key) is not None and spec[key] != have:
            out.append("user %s: %s %s, want %s" % (name, key, have, spec[key]))
    return out


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

    def drift(self, site_dirs):
        wanted_dirs = self.params["site_dirs"]
        seen = site_dirs + [d for d in wanted_dirs or [] if d not in site_dirs]
        out = [d for d in (requirement_drift(r, seen) for r in self.params["requirements"] or []) if d]
        if wanted_dirs is not None:
            out.extend(site_dirs_drift(site_dirs, wanted_dirs))
        if self.params["user"]:
            out.extend(user_drift(self.params["user"]))
        for spec in self.params["paths"] or []:
            out.extend(path_drift(spec))
        return out

    def run(self):
        venv = self.params["venv"]
        python = self.params["python"]
        if venv is None:
            venv = venv_of(python)
        elif python is None:
            python = os.path.join(venv, "bin", "python")
        result = {"venv": venv, "python": python,
                  "model_dirs": [model_dir_state(d) for d in self.params["model_dirs"] or []]}
        if not os.path.exists(python):
            # Nothing installed yet (check mode on a fresh host, or a typo: the caller decides).
            result.update(locate([]))
            if self.params["import_check"]:
                result.update(importable=False, import_error="%s does not exist" % python)
            result.pop("dist_info")
            result["drift"] = self.drift([])
            result["in_place"] = not result["drift"]
            return result
        site_dirs = self.site_dirs(venv, python)
        result.update(locate(site_dirs))
        result.pop("dist_info")
        result["drift"] = self.drift(site_dirs)
        result["in_place"] = not result["drift"]
        if self.params["import_check"]:
            result.update(self.import_check(python))
        return result


def args_check_params(module, given):
    """The args_check option checked against sglang_args_check's own argument spec, with its defaults (so that the key
    is the one that module computes); its no_log values (the config file's hash) are masked in this result too."""
    checked = ArgumentSpecValidator(ARGUMENT_SPEC).validate(given)
    module.no_log_values.update(checked._no_log_values)  # pylint: disable=protected-access
    if checked.error_messages:
        module.fail_json(msg="args_check: %s (the options of sglang_args_check)" % "; ".join(checked.error_messages))
    return checked.validated_parameters


def models_params(module, given):
    """The models option checked against sglang_model's own argument spec, with its defaults; the token is masked in
    this result too."""
    checked = ArgumentSpecValidator(sglang_weights.ARGUMENT_SPEC).validate(given)
    module.no_log_values.update(checked._no_log_values)  # pylint: disable=protected-access
    if checked.error_messages:
        module.fail_json(msg="models: %s (the options of sglang_model)" % "; ".join(checked.error_messages))
    return checked.validated_parameters


def main():
    module = AnsibleModule(
        argument_spec=dict(
            venv=dict(type="path"),
            python=dict(type="path"),
            import_check=dict(type="bool", default=False),
            timeout=dict(type="int", default=300),
            model_dirs=dict(type="list", elements="path", default=[]),
            requirements=dict(type="list", elements="str", default=[]),
            user=dict(type="dict"),
            paths=dict(type="list", elements="dict", default=[]),
            site_dirs=dict(type="list", elements="path"),
            patch=dict(type="dict", options=PATCH_OPTIONS),
            args_check=dict(type="dict"),
            gpus=dict(type="dict", options=LOOK_OPTIONS),
            unit=dict(type="dict", options=UNIT_OPTIONS),
            models=dict(type="dict"),
            keep=dict(type="dict"),
            keep_api_key=dict(type="str", no_log=True),
            keep_secret_environment=dict(type="dict", no_log=True),
            keep_redact=dict(type="list", elements="str", no_log=True),
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
    p = module.params
    # The other roles' looks, each by the code of the module it stands in for (module_utils/sglang_host_look.py).
    if p["patch"] is not None:
        result["patch"] = look_patch(result, p["patch"])
    if p["args_check"] is not None:
        result["args_check"] = look_args(module, args_check_params(module, p["args_check"]))
    if p["gpus"] is not None:
        result["gpus"] = look_gpus(module, p["gpus"])
    if p["models"] is not None:
        result["models"] = sglang_weights.look(models_params(module, p["models"]))
    if p["unit"] is not None:
        result["unit"] = look_unit(p["unit"], lambda *args: module.run_command(
            [module.get_bin_path("systemctl", required=True)] + list(args)))
    if p["keep"] is not None:
        secrets = {name: p["keep_" + name] for name in KEEP_SECRETS}
        result["keep"] = look_keep(module, p["keep"], secrets, result.get("args_check") or {})
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()

#!/usr/bin/python
# -*- coding: utf-8 -*-

# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_args_check
short_description: Check SGLang server arguments against the installed SGLang
description:
  - Checks the arguments that will be written into SGLang's C(--config) YAML file against the SGLang
    that is installed in a virtualenv, before the server is (re)started.
  - When C(sglang.srt.server_args) imports in the virtualenv's python, the module asks SGLang itself
    (method C(sglang_parser)) for its option strings and runs C(prepare_server_args) on a temporary
    config file holding the arguments, so values are checked too (choices, types).
  - When SGLang cannot be imported there (for example a C(--no-deps) rehearsal install without torch),
    the module reads the installed sources with C(ast) instead (method C(ast)) and collects every
    C(parser.add_argument("--x", ...)) string of C(sglang/srt/server_args.py) and every CLI field declared
    with C(A[T, ...]) in C(sglang/srt/arg_groups/fields/*.py). Only the option names are checked then.
  - Only exact option strings are accepted. Python's argparse also accepts unambiguous abbreviations
    (C(--speculative-eagle-top) for C(--speculative-eagle-topk)); this module rejects them, so a
    renamed flag in a new SGLang release cannot be silently matched to another one.
  - Rejects secrets (API keys, passwords) in O(args) and O(extra_args); SGLang's API key is passed
    separately and its value never reaches this module.
  - Some SGLang releases refuse options in their C(--config) file that they accept on the command line (SGLang
    0.5.17 refuses every option whose C(argparse) action is neither C(store) nor C(store_true), for example the
    deprecated C(disable-cuda-graph), and plain options that share a destination with such an alias, for example
    C(cuda-graph-max-bs-decode)). The module reads that rule from the installed C(server_args_config_parser.py);
    with O(config_refused=argv) it returns those options as RV(config_refused_args) and, rendered for the command
    line after C(--config <file>), as RV(config_argv), instead of failing.
  - In the same call (the server role's one look at the host before it configures anything) it reports where
    SGLang is (RV(installed), RV(sglang_version), RV(eagle_worker_v2), read as the C(sglang_info) module reads them),
    whether the model dirs of O(model_dirs) hold C(config.json), and whether the config file of O(config_file) is
    already as the caller would write it.
  - With O(cache_dir) a passing verdict is kept in C(<cache_dir>/<name>.argcheck.json) (0600, written atomically by
    the module's user, root), and a later run whose inputs are all as they were uses it without importing SGLang or
    reading its sources (RV(cached)). Its key is everything the verdict depends on, namely this module's own code
    and the Python running it; the interpreter of O(python) (path, real path, the real file's identity and its
    venv's C(pyvenv.cfg)); the SGLang found (version, dist-info, package dir); every option but O(model_dirs) and
    the place, owner and mode of O(config_file), which are looked at fresh on every run (O(config_file.sha256) is
    part of the key); where a probe imports SGLang, the environment variables that steer Python, SGLang, torch and
    CUDA in it; and the files the check read.
  - Those files are the SHA-256 of every C(sglang) file it read (with method V(sglang_parser), every C(sglang) module
    the probe process had imported, found in its C(sys.modules) and in the traceback of a failed import; the sources
    the V(ast) method and the C(--config) rule read), the SHA-256 of every other file the probe opened for reading,
    and the identity (device, inode, size, mode, mtime and ctime, which any write or replacement changes) of every
    other module file it had imported or mapped (standard library, torch, shared objects) and of every directory it
    listed or searched for an import (an installed or removed package shows there). A look re-hashes exactly those
    (no import, no process) and takes the verdict only when all match; otherwise the check runs fresh,
    RV(cache_miss) says why, and a pass is kept again.
  - With O(environment_names), the files the environment check decided with are part of the key too
    (C(srt/environ.py), each file that reads a name, the dist-info's C(RECORD), and the SGLangs of
    O(environment_compare)).
  - Only a pass is kept; a refusal fails the task and is never kept. A cache that someone less privileged could have
    written (C(cache_dir) or anything above it writable by others, not owned by root or the module's user, a
    symlink; the file likewise) is never read, with a warning; the check runs fresh and its pass replaces the file
    when the directory is trusted. A missing O(cache_dir) means no cache.
  - Reads the cache in check mode, never writes it. Otherwise read-only (the kept verdict is bookkeeping, never a
    change).
version_added: "1.0.0"
author:
  - eagle-deploy contributors (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
options:
  python:
    description:
      - Python interpreter of the virtualenv that holds SGLang, for example C(/opt/sglang/venv/bin/python).
    type: path
    required: true
  args:
    description:
      - The server arguments as they will be written into the C(--config) YAML file. Keys are option
        names without the leading dashes, with dashes (C(model-path), C(tp-size)), because SGLang turns
        each key C(k) into C(--k).
      - A C(null) value means "not set" and is skipped. Booleans follow SGLang's rules (C(true) adds a
        C(store_true) flag, C(false) leaves it out).
    type: dict
    required: true
  extra_args:
    description:
      - Free-form extra arguments, checked like O(args). A key may not appear in both.
    type: dict
    default: {}
  secret_args:
    description:
      - Names of options whose values are supplied separately (for example C(api-key)); only checked to
        be known to the installed SGLang. Their values never pass through this module.
    type: list
    elements: str
    default: []
  sglang_root:
    description:
      - Directory of the installed C(sglang) package (the one holding C(srt/server_args.py)).
      - Found in the site-packages of O(python) when omitted (as the C(sglang_info) module finds it), without importing SGLang.
    type: path
  method:
    description:
      - V(auto) uses SGLang's parser when SGLang imports and falls back to V(ast) otherwise.
      - V(sglang_parser) fails when SGLang does not import; V(ast) never imports SGLang.
    type: str
    choices: [auto, sglang_parser, ast]
    default: auto
  timeout:
    description:
      - Seconds allowed for the interpreter that imports SGLang (importing torch can take a while).
    type: int
    default: 300
  config_refused:
    description:
      - What to do with options the installed SGLang knows but refuses in its C(--config) file.
      - V(fail) fails the task and names them (they cannot go into the config file).
      - V(argv) returns them in RV(config_refused_args) and RV(config_argv), for the caller to put on the command
        line after C(--config <file>) and leave out of the file. SGLang's parser (method V(sglang_parser)) then
        checks them as they will be given, C(--config <file>) followed by RV(config_argv).
      - Such options are never secret (keys that look like secrets are refused before this applies).
    type: str
    choices: [fail, argv]
    default: fail
  allow_missing:
    description:
      - When O(python) does not exist, or no SGLang is installed for it (no C(sglang) dist-info in its site-packages;
        check mode on a fresh host) and O(sglang_root) is not given, report RV(installed=false) and check no
        option against SGLang instead of failing. The argument names are still checked for secrets and shape.
    type: bool
    default: false
  model_dirs:
    description:
      - Model checkpoint directories to look at; each must hold C(config.json). Reported in RV(model_dirs) (as the
        C(sglang_info) module reports them), never a failure here (the caller decides).
    type: list
    elements: path
    default: []
  config_file:
    description:
      - The C(--config) file as the caller would write it. RV(config_file_in_place) says whether it is already
        exactly that, so that the caller can leave it alone.
      - Only its hash comes in, as a secret (the file holds the API key); nothing of its content goes out.
    type: dict
    suboptions:
      path:
        description: Path of the config file.
        type: path
        required: true
      sha256:
        description:
          - SHA-256 of the content the caller would write when the installed SGLang refuses none of the options
            in its C(--config) file (RV(config_refused_args) empty). Never logged.
        type: str
        required: true
      owner:
        description: Owner the file must have (a name).
        type: str
        required: true
      group:
        description: Group the file must have (a name).
        type: str
        required: true
      mode:
        description: Permission bits the file must have, octal (V(0600)).
        type: str
        required: true
  environment_names:
    description:
      - Names (never values) of the environment variables the server will get (the server role gives those of
        C(sglang_server_environment) and C(sglang_server_secret_environment)), checked against the variables the
        installed SGLang reads, found in its sources by C(ast) (never imported) - the C(Envs) fields of
        C(sglang/srt/environ.py) and the names read by C(os.environ[...]), C(os.environ.get), C(os.getenv),
        C(get_bool_env_var), C(get_int_env_var) and the like anywhere in the package but its tests (a store, a C(del)
        or a setter such as C(setenv) is no read); an C(SGL_) name also through its C(SGLANG_) twin (SGLang rewrites
        the legacy prefix).
      - One of SGLang's own (C(SGLANG_), C(SGL_)) that the installed SGLang does not read fails the task
        (RV(unknown_environment)); one of another family (C(NCCL_), C(CUDA_), C(TORCH_), ...) that SGLang itself
        does not read is a warning (RV(environment_unread)), since SGLang passes it on to its libraries.
    type: list
    elements: str
    default: []
  environment_compare:
    description:
      - Other SGLangs to compare with when an environment variable is not read by the installed one, so that the
        message says which read it (C(read by 0.5.9, not by 0.5.23)) - C(sglang) package dirs (their version from the
        dist-info beside them), SGLang wheels, or directories of C(sglang-*.whl) wheels (a wheelhouse). Read, never
        installed or imported; the installed version is left out.
      - It words failures only (a warning does not name them), so it is no part of a kept verdict's key.
    type: list
    elements: path
    default: []
  cache_dir:
    description:
      - Where a passing verdict is kept, the deployment's trusted run dir (the server role passes
        C(sglang_server_run_dir)), owned by root (or the module's user), writable by no one else, reached from C(/)
        without a symlink through directories only root can write (a sticky one such as C(/tmp) excepted).
      - Omitted, nothing is kept and every run checks fresh. A directory that does not exist (yet) means no cache.
    type: path
  name:
    description:
      - Name of the deployment; the kept verdict is C(<cache_dir>/<name>.argcheck.json). Letters, digits, C(.),
        C(_), C(-).
    type: str
    default: sglang
attributes:
  check_mode:
    support: full
    details: It checks and reports the same in check mode, and may use a kept verdict, but never writes one.
  diff_mode:
    support: none
  platform:
    platforms: posix
notes:
  - The API key belongs in the config file only (mode 0600); passing it through O(args) or O(extra_args)
    fails, so that it can neither reach a process list nor Ansible's output.
"""

EXAMPLES = r"""
- name: Check the server arguments against the installed SGLang
  ansible.legacy.sglang_args_check:
    python: /opt/sglang/venv/bin/python
    args:
      model-path: /data/models/Kimi-K2.5-INT4
      tp-size: 8
      speculative-algorithm: EAGLE3
      speculative-eagle-topk: 1
    extra_args:
      enable-metrics: true
    secret_args: [api-key]
    # Names only: an SGLANG_ variable this SGLang does not read fails, an NCCL_ one warns.
    environment_names: [SGLANG_HEALTH_CHECK_TIMEOUT, NCCL_CUMEM_ENABLE]
    # Options the installed SGLang refuses in its --config file come back in config_argv.
    config_refused: argv
    # A pass is kept in the run dir; an unchanged re-run uses it without importing SGLang.
    cache_dir: /var/lib/eagle-deploy/run
    name: sglang
  register: __sglang_server_args_check

- name: Check them, look at the model dirs and the config file; SGLang may not be installed yet (check mode)
  ansible.legacy.sglang_args_check:
    python: /opt/sglang/venv/bin/python
    args:
      model-path: /data/models/Kimi-K2.5-INT4
    allow_missing: true
    model_dirs: [/data/models/Kimi-K2.5-INT4]
    config_file:
      path: /etc/sglang/sglang.yaml
      sha256: "{{ lookup('ansible.builtin.template', 'sglang_server.yaml.j2') | hash('sha256') }}"
      owner: sglang
      group: sglang
      mode: "0600"
  register: __sglang_server_args_check

- name: Check names only, never importing SGLang
  ansible.legacy.sglang_args_check:
    python: /opt/sglang/venv/bin/python
    sglang_root: /opt/sglang/venv/lib/python3.11/site-packages/sglang
    method: ast
    args:
      model-path: /data/models/Kimi-K2.5-INT4
"""

RETURN = r"""
installed:
  description: Whether SGLang's dist-info was found for O(python) (as the C(sglang_info) module finds it).
  returned: always
  type: bool
  sample: true
eagle_worker_v2:
  description: Path of C(sglang/srt/speculative/eagle_worker_v2.py) of the SGLang found for O(python); null when
    absent (SGLang < 0.5.4) or not installed.
  returned: always
  type: str
  sample: /opt/sglang/venv-0.5.23/lib/python3.11/site-packages/sglang/srt/speculative/eagle_worker_v2.py
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
config_file_in_place:
  description: Whether O(config_file) is a regular file (not a link) with that owner, group, mode and content, and
    the installed SGLang refuses none of the options in its C(--config) file.
  returned: with O(config_file), unless the check failed
  type: bool
  sample: true
method:
  description: How the option names were found, V(sglang_parser) (SGLang imported) or V(ast) (sources read).
  returned: unless SGLang is not installed and O(allow_missing=true) (then nothing is checked against SGLang)
  type: str
  sample: ast
sglang_root:
  description: Directory of the installed C(sglang) package that was checked.
  returned: when found
  type: str
  sample: /opt/sglang/venv-0.5.23/lib/python3.11/site-packages/sglang
sglang_version:
  description: Version of the installed SGLang, read from its dist-info (not imported).
  returned: when found
  type: str
  sample: 0.5.23
option_count:
  description: Number of option strings the installed SGLang knows.
  returned: when the options could be read
  type: int
  sample: 561
checked_args:
  description: The option strings that were checked, in order.
  returned: always
  type: list
  elements: str
  sample: ["--model-path", "--tp-size"]
values_checked:
  description: Whether the values were checked too (SGLang's own parser ran).
  returned: always
  type: bool
  sample: false
import_error:
  description: Why SGLang could not be imported, when the module fell back to V(ast).
  returned: when SGLang did not import
  type: str
  sample: "ModuleNotFoundError: No module named 'torch'"
unknown_args:
  description: Options the installed SGLang does not know.
  returned: on failure
  type: list
  elements: str
  sample: ["--speculative-eagle-tree"]
abbreviated_args:
  description: Options that are only a prefix of real options, with the options they abbreviate.
  returned: on failure
  type: dict
  sample: {"--speculative-eagle-top": ["--speculative-eagle-topk"]}
suggestions:
  description: Close matches for unknown options.
  returned: on failure
  type: dict
  sample: {"--speculative-num-step": ["--speculative-num-steps"]}
secret_keys:
  description: Keys that look like secrets (API keys, passwords); their values are never shown.
  returned: on failure
  type: list
  elements: str
  sample: ["api-key"]
config_refused_args:
  description: Options (keys of O(args) and O(extra_args)) the installed SGLang knows but refuses in its C(--config)
    file (SGLang 0.5.17 refuses every option whose action is neither C(store) nor C(store_true), for example the
    deprecated C(disable-cuda-graph)); empty where it refuses none.
  returned: always with O(config_refused=argv); on failure with O(config_refused=fail)
  type: list
  elements: str
  sample: ["disable-cuda-graph", "cuda-graph-max-bs-decode"]
config_argv:
  description: The options of RV(config_refused_args) rendered for the command line as SGLang's config reader would
    render them (a flag for C(true), nothing for C(false), C(--no-x) for a false C(BooleanOptionalAction), a list as
    several values); to be given after C(--config <file>). Never holds a secret.
  returned: with O(config_refused=argv)
  type: list
  elements: str
  sample: ["--disable-cuda-graph", "--cuda-graph-max-bs-decode", "64"]
environment_checked:
  description: The names of O(environment_names) that were checked, sorted.
  returned: when the options were checked (not when SGLang is not installed and O(allow_missing=true))
  type: list
  elements: str
  sample: ["NCCL_CUMEM_ENABLE", "SGLANG_HEALTH_CHECK_TIMEOUT"]
environment_unread:
  description: Variables of O(environment_names) of other families than SGLang's own that the installed SGLang
    itself does not read (a warning, not a failure).
  returned: when the options were checked
  type: list
  elements: str
  sample: ["NCCL_NVLS_ENABLE"]
unknown_environment:
  description: Variables of SGLang's own families (C(SGLANG_), C(SGL_)) that the installed SGLang does not read.
  returned: on failure
  type: list
  elements: str
  sample: ["SGLANG_ENABLE_SPEC_V2"]
environment_read_by:
  description: For each of RV(unknown_environment), the versions of O(environment_compare) that read it.
  returned: on failure
  type: dict
  sample: {"SGLANG_ENABLE_SPEC_V2": ["0.5.5", "0.5.9"]}
cached:
  description: Whether the verdict was the one kept from an earlier check of the same inputs (O(cache_dir)); SGLang
    was then neither imported nor read.
  returned: always
  type: bool
  sample: false
cache_miss:
  description:
    - 'Why no kept verdict was used, the first difference found, for example V(no cache_dir), V(no cache),
      V(no cache dir (/var/lib/eagle-deploy/run does not exist)), V(cache not trusted), V(cache unreadable (not JSON)),
      V(interpreter changed), V(sglang version changed), V(args changed), V(config file content changed
      (config_file.sha256)), V(environment changed: CUDA_VISIBLE_DEVICES), V(sglang/srt/server_args.py changed),
      V(directory /opt/sglang/venv/lib/python3.11/site-packages changed), V(no SGLang installed).'
  returned: when RV(cached) is false
  type: str
  sample: sglang/srt/server_args.py changed
parser_error:
  description: What SGLang's own parser said about the arguments.
  returned: when SGLang's parser rejected the arguments
  type: str
  sample: "argument --tp-size: invalid int value: 'eight'"
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_server_args import ARGUMENT_SPEC, SGLangArgsChecker


def new_module():
    return AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)


def main():
    module = new_module()
    module.exit_json(**SGLangArgsChecker(module).run())


if __name__ == "__main__":
    main()

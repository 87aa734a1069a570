# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The server-argument check of ``sglang_args_check`` (and of ``sglang_info``'s ``args_check`` look), standard
library only: where SGLang is, its options (read from its sources, or from its own parser in a probe process), the
check, and its kept verdict (:mod:`sglang_argcheck_cache`).

``sglang_info`` runs the same checker with ``cache_only``: it reports a kept verdict whose every input is as it is now,
and checks nothing fresh (no import, no probe), so that a re-run that changes nothing looks at the host in one call.
"""

from __future__ import annotations

import ast
import difflib
import glob
import grp
import hashlib
import json
import os
import pwd
import re
import stat
import sys
import tempfile

from ansible.module_utils import sglang_argcheck_cache, sglang_envs, sglang_paths
from ansible.module_utils.sglang_paths import SITE_DIRS_SCRIPT, locate, venv_of, venv_site_dirs
from ansible.module_utils.sglang_proc import safe_name

# Runs inside the virtualenv's python (only for the methods that import SGLang; where SGLang is and its version
# are read from the file system, module_utils/sglang_paths.py). It writes its answer to a file: importing SGLang
# can print to stdout.
PROBE_SCRIPT = r"""
import json, os, sys
# `python -c` puts the current directory first on the import path: a `sglang` there never stands in for the
# installed one, and the verdict does not depend on where the module runs.
if sys.path and sys.path[0] in ("", os.getcwd()):
    del sys.path[0]
out = {}
req_path, out_path = sys.argv[1], sys.argv[2]
with open(req_path) as f:
    req = json.load(f)
opened, listed, code, recording = set(), set(), set(), [True]


def audit(event, args):
    # What the check reads (the kept verdict's key): every file opened for reading, every directory listed, the
    # import system's look-ups included.
    try:
        if not recording[0]:
            return
        if event == "open":
            path, mode, flags = args
            if isinstance(path, (str, bytes)) and (
                    (mode is None and not flags & 3) or (isinstance(mode, str) and not set(mode) & set("wax+"))):
                opened.add(os.path.abspath(os.fsdecode(path)))
        elif event in ("os.listdir", "os.scandir") and (not args or isinstance(args[0], (str, bytes, type(None)))):
            path = args[0] if args and args[0] is not None else "."
            listed.add(os.path.abspath(os.fsdecode(path) or "."))
    except Exception:
        pass


def traceback_files(exc, seen=None):
    # An import that failed half-way is gone from sys.modules; its frames still name the files that ran.
    seen = set() if seen is None else seen
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, SyntaxError) and exc.filename:
            code.add(os.path.abspath(exc.filename))
        tb = exc.__traceback__
        while tb is not None:
            if not tb.tb_frame.f_code.co_filename.startswith("<"):  # <string> (this script), <frozen ...>
                code.add(os.path.abspath(tb.tb_frame.f_code.co_filename))
            tb = tb.tb_next
        exc = exc.__cause__ or exc.__context__


if req.get("import"):
    sys.addaudithook(audit)
    import importlib
    importlib.invalidate_caches()  # the path finders list their directories again, where the hook sees it
    try:
        import argparse, io, contextlib
        from sglang.srt.server_args import ServerArgs, prepare_server_args
    except BaseException as exc:
        out["import_error"] = "%s: %s" % (type(exc).__name__, exc)
        traceback_files(exc)
    else:
        parser = argparse.ArgumentParser(prog="sglang serve")
        ServerArgs.add_cli_args(parser)
        out["options"] = sorted({s for a in parser._actions for s in a.option_strings})
        if req.get("config_path"):
            err = io.StringIO()
            try:
                with contextlib.redirect_stderr(err):
                    prepare_server_args(["--config", req["config_path"]] + req.get("argv", []))
            except SystemExit as exc:
                lines = [l for l in err.getvalue().splitlines() if l.strip()]
                out["parser_error"] = lines[-1] if lines else "parser exited with %s" % exc.code
            except BaseException as exc:
                out["parser_error"] = "%s: %s" % (type(exc).__name__, exc)
            else:
                out["parsed"] = True
    recording[0] = False
    for m in list(sys.modules.values()):
        f = getattr(m, "__file__", None)
        if isinstance(f, str):
            code.add(os.path.abspath(f))
    mapped = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                fields = line.rstrip("\n").split(None, 5)
                if len(fields) == 6 and fields[5].startswith("/"):
                    mapped.add(fields[5])
    except OSError:
        pass
    for p in sys.path:
        if p:
            listed.add(os.path.abspath(p))
            try:  # site.py read these before the hook: what they add to the import path
                opened.update(os.path.join(os.path.abspath(p), n) for n in os.listdir(p) if n.endswith(".pth"))
            except OSError:
                pass
    pkg = list(getattr(sys.modules.get("sglang"), "__path__", None) or [])
    out["record"] = {"code": sorted(code), "opened": sorted(opened), "listed": sorted(listed),
                     "mapped": sorted(mapped), "package_dir": os.path.abspath(pkg[0]) if pkg else None}
with open(out_path, "w") as f:
    json.dump(out, f)
"""

# Keys that carry secrets; their values must stay in the 0600 config file.
SECRET_KEY_RE = re.compile(r"(^|_)(api_key|password|passwd|secret|token)$|_key$")

# The options of sglang_args_check, also those of sglang_info's args_check (the same checker, cache_only there): one
# spec, so that both compute the same key for the same task arguments.
ARGUMENT_SPEC = dict(
    python=dict(type="path", required=True),
    args=dict(type="dict", required=True),
    extra_args=dict(type="dict", default={}),
    secret_args=dict(type="list", elements="str", default=[], no_log=False),
    sglang_root=dict(type="path"),
    method=dict(type="str", default="auto", choices=["auto", "sglang_parser", "ast"]),
    timeout=dict(type="int", default=300),
    config_refused=dict(type="str", default="fail", choices=["fail", "argv"]),
    allow_missing=dict(type="bool", default=False),
    model_dirs=dict(type="list", elements="path", default=[]),
    environment_names=dict(type="list", elements="str", default=[]),
    environment_compare=dict(type="list", elements="path", default=[]),
    cache_dir=dict(type="path"),
    name=dict(type="str", default="sglang"),
    config_file=dict(type="dict", options=dict(
        path=dict(type="path", required=True),
        sha256=dict(type="str", required=True, no_log=True),
        owner=dict(type="str", required=True),
        group=dict(type="str", required=True),
        mode=dict(type="str", required=True),
    )),
)


def normalize_key(key):
    return key.replace("-", "_").lower()


def is_secret_key(key):
    return bool(SECRET_KEY_RE.search(normalize_key(key)))


def _is_annotated(node):
    if isinstance(node, ast.Name):
        return node.id in ("A", "Annotated")
    if isinstance(node, ast.Attribute):
        return node.attr == "Annotated"
    return False


def _is_string_node(node):
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _is_string_node(node.left) or _is_string_node(node.right)
    return False


def _is_boolean_optional(node):
    """``action=argparse.BooleanOptionalAction``: argparse adds ``--no-x`` for every ``--x``."""
    if isinstance(node, ast.Attribute):
        return node.attr == "BooleanOptionalAction"
    return isinstance(node, ast.Name) and node.id == "BooleanOptionalAction"


def _with_negations(names, action):
    if action is not None and _is_boolean_optional(action):
        return names + ["--no-" + n[2:] for n in names if n.startswith("--")]
    return names


def _field_option_strings(name, annotation):
    """Option strings of one ``name: A[T, meta...]`` field, mirroring SGLang's add_cli_args_from_dataclass."""
    if not isinstance(annotation, ast.Subscript) or not _is_annotated(annotation.value):
        return []
    elts = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else []
    for meta in elts[1:]:
        if isinstance(meta, ast.Call) and sglang_envs.call_name(meta) == "Arg":
            kwargs = {kw.arg: kw.value for kw in meta.keywords if kw.arg}
            no_cli = kwargs.get("no_cli")
            if isinstance(no_cli, ast.Constant) and no_cli.value is True:
                return []
            cli_name = kwargs.get("cli_name")
            if isinstance(cli_name, ast.Constant) and isinstance(cli_name.value, str):
                names = [cli_name.value]
            else:
                names = ["--" + name.replace("_", "-")]
            aliases = kwargs.get("aliases")
            if isinstance(aliases, (ast.List, ast.Tuple)):
                names.extend(e.value for e in aliases.elts if isinstance(e, ast.Constant) and isinstance(e.value, str))
            return _with_negations(names, kwargs.get("action"))
        if _is_string_node(meta):
            return ["--" + name.replace("_", "-")]
    return []


def _class_is_arg_namespace(cls):
    if cls.name == "ServerArgs":
        return True
    for stmt in cls.body:
        targets = []
        if isinstance(stmt, ast.Assign):
            targets = stmt.targets
        elif isinstance(stmt, ast.AnnAssign):
            targets = [stmt.target]
        if any(isinstance(t, ast.Name) and t.id == "_NS_PATH" for t in targets):
            return True
    return False


def option_strings_from_source(source):
    """Every option string one Python source declares: add_argument("--x") calls and A[...] CLI fields."""
    tree = ast.parse(source)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and sglang_envs.call_name(node) == "add_argument":
            names = [a.value for a in node.args
                     if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-")]
            action = next((kw.value for kw in node.keywords if kw.arg == "action"), None)
            found.update(_with_negations(names, action))
        elif isinstance(node, ast.ClassDef) and _class_is_arg_namespace(node):
            for stmt in node.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    found.update(_field_option_strings(stmt.target.id, stmt.annotation))
    return found


def server_args_sources(sglang_root):
    """The files that declare SGLang's server options: server_args.py and, from 0.5.2x, arg_groups/fields/."""
    main = os.path.join(sglang_root, "srt", "server_args.py")
    fields = sorted(glob.glob(os.path.join(sglang_root, "srt", "arg_groups", "fields", "*.py")))
    return [main] + fields


def option_strings_from_tree(sglang_root):
    options = {"-h", "--help"}  # argparse's own
    for path in server_args_sources(sglang_root):
        with open(path, encoding="utf-8") as f:
            options.update(option_strings_from_source(f.read()))
    return options


def config_refused_dests(sglang_root):
    """Option dests that SGLang's C(--config) reader refuses, read from its sources; None where it refuses none.

    SGLang 0.5.17's ConfigArgumentMerger raises "Unsupported config option" for the dest of every option whose
    action is neither C(store) nor C(store_true) (deprecated aliases, store_const, append, ...), also when a plain
    option shares that dest (C(cuda-graph-backend-prefill) with the deprecated C(--enable-breakable-cuda-graph)).
    Applied only where the installed C(server_args_config_parser.py) has that rule (C(unsupported_actions)).
    """
    config_parser = os.path.join(sglang_root, "srt", "server_args_config_parser.py")
    try:
        with open(config_parser, encoding="utf-8") as f:
            if "unsupported_actions" not in f.read():
                return None
        with open(os.path.join(sglang_root, "srt", "server_args.py"), encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError):
        return None
    refused = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and sglang_envs.call_name(node) == "add_argument"):
            continue
        names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        if not names or not names[0].startswith("-") or "--config" in names or "--help" in names:
            continue
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        action = kw.get("action")
        if action is None or (isinstance(action, ast.Constant) and action.value in ("store", "store_true")):
            continue
        if isinstance(kw.get("dest"), ast.Constant):
            dest = kw["dest"].value
        else:
            longs = [n for n in names if n.startswith("--")] or names
            dest = longs[0].lstrip("-").replace("-", "_")
        refused[dest] = ast.unparse(action)
    return refused


# argparse actions that take no value on the command line (SGLang's deprecated aliases included).
_FLAG_ACTION_RE = re.compile(r"store_?true|store_?false|store_?const|append_?const|count", re.I)


def _action_kind(action, nargs=None):
    """'flag' (no value), 'bool_optional' (--x / --no-x) or 'value', from an add_argument call's keywords."""
    if isinstance(nargs, ast.Constant) and nargs.value == 0:
        return "flag"
    if action is None:
        return "value"
    if _is_boolean_optional(action):
        return "bool_optional"
    name = action.value if isinstance(action, ast.Constant) and isinstance(action.value, str) else ast.unparse(action)
    return "flag" if _FLAG_ACTION_RE.search(name) else "value"


def option_kinds(sglang_root):
    """Option string -> kind ('flag', 'bool_optional', 'value') of every add_argument call in server_args.py.
    Options declared as dataclass fields (not listed) take a value."""
    try:
        with open(os.path.join(sglang_root, "srt", "server_args.py"), encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError):
        return {}
    kinds = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and sglang_envs.call_name(node) == "add_argument":
            kw = {k.arg: k.value for k in node.keywords if k.arg}
            kind = _action_kind(kw.get("action"), kw.get("nargs"))
            for a in node.args:
                if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-"):
                    kinds[a.value] = kind
    return kinds


def to_argv(key, value, kind="value"):
    """One option as SGLang's config reader turns a config entry into command-line words."""
    flag = "--" + key
    if value is None:
        return []
    if kind in ("flag", "bool_optional") and isinstance(value, bool):
        if value:
            return [flag]
        return ["--no-" + key] if kind == "bool_optional" else []
    if isinstance(value, bool):
        return [flag, str(value).lower()]
    if isinstance(value, list):
        return [flag] + [str(v) for v in value] if value else []
    if isinstance(value, dict):
        return [flag, json.dumps(value)]
    return [flag, str(value)]


def to_yaml_scalar_doc(mapping):
    # JSON is YAML: SGLang's config reader (yaml.safe_load) reads it unchanged.
    return json.dumps(mapping, indent=1, sort_keys=False)


def check_names(keys, options):
    """Split keys into (checked flags, unknown flags, abbreviations, suggestions)."""
    checked, unknown, abbreviated, suggestions = [], [], {}, {}
    option_list = sorted(options)
    for key in keys:
        flag = "--" + key
        checked.append(flag)
        if flag in options:
            continue
        prefixed = [o for o in option_list if o.startswith(flag)]
        if prefixed:
            abbreviated[flag] = prefixed
            continue
        unknown.append(flag)
        close = []
        dashed = "--" + key.replace("_", "-")
        if dashed in options:
            close.append(dashed)
        close.extend(c for c in difflib.get_close_matches(flag, option_list, n=3, cutoff=0.8) if c not in close)
        if close:
            suggestions[flag] = close
    return checked, unknown, abbreviated, suggestions


def model_dir_state(path):
    """What a model checkpoint directory looks like: ok, missing, not_a_directory or no_config_json (sglang_info's
    model_dirs too), and ``real_path``: the directory it names on this host, links and ``..`` resolved (the server
    role refuses an EAGLE3 draft whose real_path is the target's: one directory under two names)."""
    config_json = os.path.join(path, "config.json")
    if not os.path.exists(path):
        state = "missing"
    elif not os.path.isdir(path):
        state = "not_a_directory"
    elif not os.path.isfile(config_json):
        state = "no_config_json"
    else:
        state = "ok"
    return {"path": path, "state": state, "config_json": config_json, "real_path": os.path.realpath(path)}


def config_file_in_place(spec):
    """Whether the file at spec["path"] is a regular file (not a link, not a FIFO) with spec's owner, group, mode
    and SHA-256. Anything it cannot tell for sure (a name that does not exist, an unreadable file) is False."""
    try:
        uid = pwd.getpwnam(spec["owner"]).pw_uid
        gid = grp.getgrnam(spec["group"]).gr_gid
        mode = int(str(spec["mode"]), 8)
    except (KeyError, ValueError):
        return False
    try:
        # O_NOFOLLOW: a link is never followed; O_NONBLOCK: a FIFO put there cannot block the open.
        fd = os.open(spec["path"], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return False
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) != (uid, gid, mode):
            return False
        digest = hashlib.sha256()
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest() == spec["sha256"].lower()


def package_version(sglang_root):
    """Version of the SGLang whose package dir is ``sglang_root``, from the dist-info beside it; None if none."""
    return sglang_paths.find_distribution(os.path.dirname(os.path.abspath(sglang_root)))[0]


def unread_warning(names, version):
    """The warning for environment variables of other families (NCCL_, CUDA_, ...) that SGLang itself does not read:
    the same on a fresh check and from a kept verdict (which versions read them is said in failures only)."""
    return ("environment variables SGLang %s itself does not read (passed on to its libraries, NCCL, CUDA, torch, ...: "
            "check their spelling there): %s" % (version, ", ".join(names)))


def checker_digest():
    """SHA-256 of the checker's own code: this module's source and that of the module_utils that decide with it
    (where SGLang is, what is kept), and the Python that runs it (its ast reads the sources). None when a source
    cannot be read: then no verdict is kept or used."""
    h = hashlib.sha256(sys.version.encode("utf-8"))
    own = (__spec__.name if __spec__ is not None else __name__, globals().get("__loader__"))
    for name, loader in (own, (sglang_paths.__name__, getattr(sglang_paths, "__loader__", None)),
                         (sglang_argcheck_cache.__name__, getattr(sglang_argcheck_cache, "__loader__", None)),
                         (sglang_envs.__name__, getattr(sglang_envs, "__loader__", None))):
        try:
            source = loader.get_source(name)
        except Exception:  # any loader, any failure: no digest, no cache
            return None
        if not source:
            return None
        h.update(b"\0" + source.encode("utf-8"))
    return h.hexdigest()


class SGLangArgsChecker:
    """Finds the installed SGLang's options and checks the arguments against them: the task's inputs, where SGLang
    is, the order of the steps and the message. The fresh check is :class:`FreshCheck`, SGLang's own parser in a
    process :class:`ParserProbe`, the kept verdict :class:`KeptVerdict`."""

    def __init__(self, module, runner=None, params=None, cache_only=False):
        self.module = module
        # sglang_info gives its args_check option's value (checked against ARGUMENT_SPEC) and cache_only: a kept
        # verdict or nothing, never a fresh check.
        self.params = module.params if params is None else params
        self.cache_only = cache_only
        self.runner = runner or module.run_command
        self.result = {"changed": False, "checked_args": [], "values_checked": False, "cached": False}
        self.parser = ParserProbe(self)
        self.kept = KeptVerdict(self)
        self.found = {}
        self.env_files = []  # the files the environment check decided with (the kept verdict's key)

    def fail(self, msg, **extra):
        self.result.update(extra)
        self.module.fail_json(msg=msg, **self.result)

    def merged_args(self):
        args = self.params["args"] or {}
        extra = self.params["extra_args"] or {}
        both = sorted(set(map(normalize_key, args)) & set(map(normalize_key, extra)))
        if both:
            self.fail("set in both args and extra_args: %s; set each option once" % ", ".join(both))
        merged = {}
        for key, value in list(args.items()) + list(extra.items()):
            if value is None:
                continue
            merged[str(key)] = value
        return merged

    def check_keys_shape(self, keys):
        secrets = [k for k in keys if is_secret_key(k)]
        if secrets:
            self.fail(
                "secret in server arguments: %s; pass the API key with sglang_server_api_key "
                "(it goes only into the 0600 config file, never argv or logs)" % ", ".join(secrets),
                secret_keys=secrets,
            )
        bad = [k for k in keys if not k or k.startswith("-") or k == "config" or any(c.isspace() for c in k)]
        if bad:
            self.fail(
                "malformed argument names: %s; write option names without leading dashes "
                "(model-path), and never 'config'" % ", ".join(repr(k) for k in bad)
            )

    def find_sglang(self):
        """Where the python's SGLang is and its version, from its site-packages (SGLang is not imported)."""
        python = self.params["python"]
        if not os.path.exists(python):
            if self.params["allow_missing"]:
                return locate([])
            self.fail("python %s does not exist; install SGLang first (role sglang_install)" % python)
        venv = venv_of(python)
        if venv is not None:
            return locate(venv_site_dirs(venv))
        rc, out, err = self.runner([python, "-c", SITE_DIRS_SCRIPT])
        try:
            dirs = json.loads(out.strip().splitlines()[-1]) if rc == 0 else None
        except (ValueError, IndexError):
            dirs = None
        if dirs is None and self.params["allow_missing"]:
            # An interpreter that cannot list its import path is broken, not "SGLang not installed yet".
            self.fail("%s could not list its site directories (rc=%s): %s"
                      % (python, rc, (err or out).strip()[-300:]), rc=rc)
        return locate(dirs or [])

    def task_inputs(self):
        """The task's own options, checked before SGLang is looked for: (merged args, their keys, secret_args)."""
        if not safe_name(self.params["name"]):
            self.fail("name %r may hold only letters, digits, '.', '_' and '-' (it names the kept verdict's file)"
                      % self.params["name"])
        merged = self.merged_args()
        keys = list(merged)
        self.check_keys_shape(keys)
        secret_args = list(self.params["secret_args"] or [])
        self.result["model_dirs"] = [model_dir_state(d) for d in self.params["model_dirs"] or []]
        self.result["cache_miss"] = "no cache_dir" if not self.params["cache_dir"] else "no cache"
        return merged, keys, secret_args

    def nothing_installed(self, found):
        """allow_missing and no SGLang (check mode on a fresh host): the result says so, and nothing is checked."""
        if not (self.params["allow_missing"] and (not os.path.exists(self.params["python"])
                                                  or not (found["installed"] or self.params["sglang_root"]))):
            return False
        if self.params["config_refused"] == "argv":
            self.result.update(config_refused_args=[], config_argv=[])
        if self.params["config_file"]:
            self.result["config_file_in_place"] = config_file_in_place(self.params["config_file"])
        self.result["cache_miss"] = "no SGLang installed"
        self.result["msg"] = "no SGLang installed for %s (check mode on a fresh host?): no option checked" % (
            self.params["python"])
        return True

    def use_kept(self, verdict, names):
        """The result of a kept verdict (SGLang is not imported, its sources not read); its refused options."""
        refused_keys = verdict["config_refused_args"]
        self.result.update(method=verdict["method"], option_count=verdict["option_count"],
                           values_checked=verdict["values_checked"], checked_args=["--" + k for k in names])
        if verdict.get("import_error"):
            self.result["import_error"] = verdict["import_error"]
        self.result["environment_checked"] = sorted(set(self.params["environment_names"] or []))
        self.result["environment_unread"] = verdict.get("environment_unread") or []
        if self.result["environment_unread"]:
            self.module.warn(unread_warning(self.result["environment_unread"], self.result.get("sglang_version", "?")))
        if self.params["config_refused"] == "argv":
            self.result.update(config_refused_args=refused_keys, config_argv=verdict["config_argv"])
        return refused_keys

    def run(self):
        merged, keys, secret_args = self.task_inputs()
        found = self.found = self.find_sglang()
        self.result.update(installed=found["installed"], eagle_worker_v2=found["eagle_worker_v2"])
        if self.nothing_installed(found):
            return self.result
        sglang_root = self.params["sglang_root"] or found["package_dir"]
        if sglang_root:
            self.result["sglang_root"] = sglang_root
        if found["version"]:
            self.result["sglang_version"] = found["version"]

        key = self.kept.cache_key(found) if self.params["cache_dir"] and sglang_root else None
        verdict = self.kept.look(key, sglang_root)
        if verdict is not None:
            # Kept from a check whose every input is as it is now: SGLang is not imported, its sources not read.
            refused_keys = self.use_kept(verdict, keys + secret_args)
        elif self.cache_only:
            # sglang_info's look: no verdict kept for these inputs, so the caller runs sglang_args_check.
            self.result["msg"] = "no kept verdict for these inputs (%s): not checked" % self.result["cache_miss"]
            return self.result
        else:
            refused_keys, argv, probe = FreshCheck(self).check(merged, keys, secret_args, sglang_root)
            # Only a pass comes here (a refusal failed the task): it is kept for the next run.
            self.kept.keep(key, sglang_root, probe, refused_keys, argv)

        if self.params["config_file"]:
            # The caller's hash is of the content with every option in the file (none refused).
            self.result["config_file_in_place"] = not refused_keys and config_file_in_place(self.params["config_file"])
        self.result["msg"] = self.summary(refused_keys)
        return self.result

    def summary(self, refused_keys):
        return "%d arguments known to SGLang %s (method %s%s)%s%s" % (
            len(self.result["checked_args"]),
            self.result.get("sglang_version", "?"),
            self.result["method"],
            ", values checked" if self.result["values_checked"] else ", names only",
            ("; refused in its --config file, so given on the command line: %s" % ", ".join(refused_keys))
            if self.params["config_refused"] == "argv" and refused_keys else "",
            "; verdict kept from an earlier check of the same inputs" if self.result["cached"] else "",
        )


class FreshCheck:
    """The check itself, fresh, for one :class:`SGLangArgsChecker`: fails the task on anything SGLang would
    refuse."""

    def __init__(self, checker):
        self.checker = checker
        self.params = checker.params
        self.result = checker.result
        self.fail = checker.fail

    def check(self, merged, keys, secret_args, sglang_root):
        """Returns the options refused in the --config file, their argv, and the probe's answer (None when no
        probe ran)."""
        as_argv = self.params["config_refused"] == "argv"
        # Options the installed SGLang's --config reader refuses (read from its sources, never imported).
        refused = (config_refused_dests(sglang_root) if sglang_root else None) or {}
        refused_keys = [k for k in keys if normalize_key(k) in refused]
        argv = self.refused_as_argv(merged, refused_keys, sglang_root) if as_argv else []
        probe = None
        if self.params["method"] != "ast":
            in_file = dict((k, v) for k, v in merged.items() if not (as_argv and k in refused_keys))
            probe = self.checker.parser.ask(in_file, argv)

        options = self.known_options(probe, sglang_root)
        self.check_known(keys + secret_args, options)
        if self.result["method"] == "ast" and not as_argv:
            # SGLang's own parser (method sglang_parser) finds these itself, with the same message.
            self.check_config_refused(refused_keys, refused)
        if self.result["method"] == "sglang_parser":
            if probe.get("parser_error"):
                self.fail("SGLang's parser rejected the arguments: %s" % probe["parser_error"],
                          parser_error=probe["parser_error"])
            self.result["values_checked"] = bool(probe.get("parsed"))
        self.check_environment(sglang_root)
        return refused_keys, argv, probe

    def check_environment(self, sglang_root):
        """The server's environment variables (their names) against those the installed SGLang reads
        (:mod:`sglang_envs`): one of SGLang's own (SGLANG_, SGL_) that it does not read fails the task; another family
        (NCCL_, CUDA_, TORCH_, ...) that SGLang itself does not read is a warning (SGLang passes it on)."""
        names = sorted(set(self.params["environment_names"] or []))
        self.result["environment_checked"] = names
        self.result["environment_unread"] = []
        if not names or not sglang_root:
            return
        try:
            reads = sglang_envs.installed_reads(sglang_root, names)
        except OSError as exc:
            self.fail("cannot read the environment variables SGLang reads from %s: %s" % (sglang_root, exc))
        self.checker.env_files = reads.files
        unread = [n for n in names if not reads.reads(n)]
        unknown = [n for n in unread if sglang_envs.is_own(n)]
        others = [n for n in unread if not sglang_envs.is_own(n)]
        version = self.result.get("sglang_version", "?")
        if unknown:
            # The other SGLangs only word the failure (never kept): they are no part of the kept verdict's key.
            read_by = {}
            if self.params["environment_compare"]:
                sources = sglang_envs.compare_sources(self.params["environment_compare"], package_version)
                read_by = sglang_envs.history(unknown, [s for s in sources if s[0] != version])
            self.fail(
                "environment variables unknown to SGLang %s (no file of it reads them): %s; remove them from "
                "sglang_server_environment or use what this SGLang reads" % (
                    version, "; ".join(self.environment_words(n, version, read_by, reads) for n in unknown)),
                unknown_environment=unknown, environment_read_by=dict((n, read_by.get(n, [])) for n in unknown))
        self.result["environment_unread"] = others
        if others:
            # The same words as a kept verdict's (the other SGLangs are not asked for a warning).
            self.checker.module.warn(unread_warning(others, version))

    @staticmethod
    def environment_words(name, version, read_by, reads):
        versions = read_by.get(name) or []
        words = name
        if versions:
            words += " (read by %s, not by %s)" % (", ".join(versions), version)
        close = reads.suggestions(name)
        if close:
            words += " (did you mean %s?)" % " or ".join(close)
        return words

    def refused_as_argv(self, merged, refused_keys, sglang_root):
        """config_refused=argv: the options refused in the --config file as command-line words (in the result)."""
        argv = []
        kinds = option_kinds(sglang_root) if refused_keys else {}
        for k in refused_keys:
            argv.extend(to_argv(k, merged[k], kinds.get("--" + k, "value")))
        self.result.update(config_refused_args=refused_keys, config_argv=argv)
        return argv

    def known_options(self, probe, sglang_root):
        """SGLang's option strings: from its own parser when the probe imported it, else read from its sources."""
        if probe and "options" in probe:
            self.result["method"] = "sglang_parser"
            return set(probe["options"])
        if probe and probe.get("import_error"):
            self.result["import_error"] = probe["import_error"]
        if self.params["method"] == "sglang_parser":
            self.fail(
                "SGLang does not import in %s (%s); install its dependencies or use method=auto"
                % (self.params["python"], (probe or {}).get("import_error")),
                method="sglang_parser",
            )
        self.result["method"] = "ast"
        if not sglang_root or not os.path.isfile(os.path.join(sglang_root, "srt", "server_args.py")):
            self.fail(
                "no installed SGLang found (sglang/srt/server_args.py) for %s; install SGLang first"
                % self.params["python"],
                method="ast",
            )
        try:
            options = option_strings_from_tree(sglang_root)
        except (OSError, SyntaxError) as exc:
            self.fail("cannot read SGLang's server options from %s: %s" % (sglang_root, exc), method="ast")
        if not options:
            self.fail("found no server options in %s; this SGLang layout is not understood" % sglang_root)
        return options

    def check_known(self, names, options):
        """Every name is an option of this SGLang, spelt out: else the task fails with suggestions."""
        self.result["option_count"] = len(options)
        checked, unknown, abbreviated, suggestions = check_names(names, options)
        self.result["checked_args"] = checked
        if not (unknown or abbreviated):
            return
        parts = []
        if unknown:
            parts.append("unknown to SGLang %s: %s" % (self.result.get("sglang_version", "?"), ", ".join(unknown)))
        if abbreviated:
            parts.append(
                "abbreviated (only exact option names are allowed): %s"
                % ", ".join("%s (%s)" % (k, " or ".join(v)) for k, v in sorted(abbreviated.items()))
            )
        if suggestions:
            parts.append(
                "did you mean: %s" % ", ".join("%s -> %s" % (k, v[0]) for k, v in sorted(suggestions.items()))
            )
        self.fail("; ".join(parts), unknown_args=unknown, abbreviated_args=abbreviated, suggestions=suggestions)

    def check_config_refused(self, refused_keys, refused):
        """Method ast, config_refused=fail: an option the --config reader refuses fails the task."""
        bad = sorted(refused_keys)
        if bad:
            self.fail(
                "SGLang %s refuses %s in its --config file (%s); use the replacement option its help names"
                % (self.result.get("sglang_version", "?"), ", ".join(bad),
                   ", ".join("%s: %s" % (k, refused[normalize_key(k)]) for k in bad)),
                config_refused_args=bad,
            )


class ParserProbe:
    """SGLang's own parser, asked in a process of the virtualenv's python (PROBE_SCRIPT), for one
    :class:`SGLangArgsChecker`. Its temporary files are never part of the kept verdict's key."""

    def __init__(self, checker):
        self.checker = checker
        self.params = checker.params
        self.fail = checker.fail
        self.probe_temp = []  # the probe's request and answer files, and its config file's directory: never a key
        self.probe_dir = None

    def ask(self, in_file, argv):
        """The probe's answer on the arguments ``in_file`` written to a 0600 config file (and ``argv``)."""
        tmpdir = None
        try:
            tmpdir = tempfile.mkdtemp(prefix="sglang_args_check_")
            self.probe_dir = tmpdir
            config_path = os.path.join(tmpdir, "server.yaml")
            fd = os.open(config_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(to_yaml_scalar_doc(in_file))
            return self.probe(want_import=True, config_path=config_path, argv=argv)
        finally:
            if tmpdir:
                for name in os.listdir(tmpdir):
                    os.unlink(os.path.join(tmpdir, name))
                os.rmdir(tmpdir)

    def probe(self, want_import, config_path, argv=()):
        """Ask the virtualenv's python for SGLang's parser (it imports SGLang)."""
        python = self.params["python"]
        fd, req_path = tempfile.mkstemp(prefix="sglang_args_req_", suffix=".json")
        out_fd, out_path = tempfile.mkstemp(prefix="sglang_args_out_", suffix=".json")
        os.close(out_fd)
        self.probe_temp = [req_path, out_path]
        try:
            with os.fdopen(fd, "w") as f:
                json.dump({"import": want_import, "config_path": config_path, "argv": list(argv)}, f)
            cmd = [python, "-c", PROBE_SCRIPT, req_path, out_path]
            timeout_bin = self.checker.module.get_bin_path("timeout")
            if timeout_bin:
                cmd = [timeout_bin, str(self.params["timeout"])] + cmd
            # In / as the server runs (the supervisor's cwd): a relative path means there what it will mean to SGLang.
            rc, stdout, stderr = self.checker.runner(
                cmd,
                environ_update={"PYTHONDONTWRITEBYTECODE": "1"},
                cwd="/",
            )
            if rc == 124:
                self.fail("importing SGLang took longer than %s s; raise timeout or use method=ast" % self.params["timeout"], rc=rc)
            if rc != 0:
                self.fail(
                    "the virtualenv's python failed (rc=%s): %s" % (rc, (stderr or stdout).strip()[-500:]),
                    rc=rc,
                )
            with open(out_path) as f:
                return json.load(f)
        finally:
            for path in (req_path, out_path):
                if os.path.exists(path):
                    os.unlink(path)


class KeptVerdict:
    """The kept verdict of one :class:`SGLangArgsChecker` (:mod:`sglang_argcheck_cache`): its key, what it was computed
    from, looking it up, keeping a pass."""

    def __init__(self, checker):
        self.checker = checker
        self.params = checker.params
        self.result = checker.result
        self.module = checker.module

    def cache_key(self, found):
        """Everything of this run that the verdict depends on, but the files it read (sglang_argcheck_cache)."""
        p = self.params
        checker = checker_digest()
        if checker is None:
            return None
        python = p["python"]
        real = os.path.realpath(python)
        venv = venv_of(python)
        probing = p["method"] != "ast"
        return {
            "format": sglang_argcheck_cache.FORMAT,
            "checker": checker,
            "python": {"path": python, "real": real, "identity": sglang_argcheck_cache.identity(real),
                       "pyvenv_cfg": sglang_argcheck_cache.content(os.path.join(venv, "pyvenv.cfg")) if venv else None},
            "sglang_version": found["version"],
            "sglang": {"dist_info": found["dist_info"], "package_dir": found["package_dir"]},
            "method": p["method"],
            "args": sglang_argcheck_cache.digest(p["args"] or {}),
            "extra_args": sglang_argcheck_cache.digest(p["extra_args"] or {}),
            "secret_args": sglang_argcheck_cache.digest(p["secret_args"] or []),
            "config_refused": p["config_refused"],
            # A digest of the caller's digest of the config file (a no_log value, never in the result).
            "config_sha256": sglang_argcheck_cache.digest((p["config_file"] or {}).get("sha256", "").lower()),
            "sglang_root": p["sglang_root"],
            "allow_missing": p["allow_missing"],
            "timeout": p["timeout"] if probing else None,
            "environment_names": sglang_argcheck_cache.digest(sorted(set(p["environment_names"] or []))),
            "environment": sglang_argcheck_cache.environment() if probing else {},
        }

    def files_read(self, sglang_root, probe):
        """What the verdict was computed from (sglang_argcheck_cache.record): the sources the ast method and the config
        rule read, and what the probe read: the sglang files it ran (content), every other module and mapped file
        (identity), every other file it opened (content), every directory it listed or searched (identity).
        None when the probe ran and said nothing of what it read (then nothing is kept)."""
        srt = os.path.join(sglang_root, "srt")
        hashed = set(server_args_sources(sglang_root) + [os.path.join(srt, "server_args_config_parser.py")])
        by_identity = set()
        if self.params["environment_names"]:
            # What the environment check decided with: environ.py, each file that reads a name, and the dist-info's
            # RECORD (the hash of every file of the package: another install shows there).
            hashed.update(self.checker.env_files)
            hashed.add(os.path.join(srt, "environ.py"))
            if self.checker.found.get("dist_info"):
                hashed.add(os.path.join(self.checker.found["dist_info"], "RECORD"))
        dirs = {srt, os.path.join(srt, "arg_groups"), os.path.join(srt, "arg_groups", "fields")}
        if probe is None:
            return sglang_argcheck_cache.record(hashed, by_identity, dirs)
        rec = probe.get("record")
        if not isinstance(rec, dict):
            return None
        roots = [os.path.realpath(r) + os.sep for r in (sglang_root, rec.get("package_dir")) if r]
        skip = set(self.checker.parser.probe_temp)
        probe_dir = self.checker.parser.probe_dir

        def keep(path):
            return isinstance(path, str) and path not in skip and not sglang_argcheck_cache.volatile(path) and not (
                probe_dir and path.startswith(probe_dir + os.sep))

        def in_sglang(path):
            return any(os.path.realpath(path).startswith(r) for r in roots)

        code = set(filter(keep, rec.get("code") or []))
        for path in code:
            (hashed if in_sglang(path) else by_identity).add(path)
        for path in filter(keep, rec.get("opened") or []):
            if path not in code and not path.endswith(".pyc"):  # bytecode is its source's
                hashed.add(path)
        by_identity.update(filter(keep, rec.get("mapped") or []))
        dirs.update(filter(keep, rec.get("listed") or []))
        return sglang_argcheck_cache.record(hashed, by_identity, dirs)

    def label(self, sglang_root):
        """A recorded path in a cache_miss: relative to the site-packages of SGLang when it lies there."""
        site = os.path.dirname(os.path.realpath(sglang_root)) + os.sep

        def words(path):
            real = os.path.realpath(path)
            return real[len(site):] if real.startswith(site) else path
        return words

    def look(self, key, sglang_root):
        """The kept verdict when every input is as it was (result: cached), else None (result: cache_miss)."""
        cache_dir = self.params["cache_dir"]
        if cache_dir and not sglang_root:
            self.result["cache_miss"] = "no SGLang found"
        elif cache_dir and key is None:
            self.result["cache_miss"] = "the checker's own source could not be read: nothing is kept"
        if key is None:
            return None
        verdict, miss, warning = sglang_argcheck_cache.look(cache_dir, self.params["name"], key, self.label(sglang_root))
        if warning:
            self.module.warn(warning)
        if verdict is None:
            self.result["cache_miss"] = miss
        else:
            del self.result["cache_miss"]
            self.result["cached"] = True
        return verdict

    def keep(self, key, sglang_root, probe, refused_keys, argv):
        """Keep this run's pass (never in check mode); a warning when it cannot be kept in a trusted cache dir."""
        if key is None or self.module.check_mode:
            return
        files = self.files_read(sglang_root, probe)
        why = "the probe did not say what it read" if files is None else sglang_argcheck_cache.keep(
            self.params["cache_dir"], self.params["name"], key, files,
            {"method": self.result["method"], "option_count": self.result["option_count"],
             "values_checked": self.result["values_checked"], "import_error": self.result.get("import_error"),
             "config_refused_args": refused_keys, "config_argv": argv,
             "environment_unread": self.result.get("environment_unread", [])})
        miss = self.result["cache_miss"]
        if why and not (miss.startswith("no cache dir") or miss == "cache not trusted"):
            self.module.warn("the argument check's verdict was not kept: %s" % why)

"""The README and docs/ name only what exists.

Every code block and inline code span of README.md and docs/*.md is read:
- a path into the project (playbooks/, roles/, library/, ...) must exist;
- a role variable (``sglang_<role>_<name>``) must be an option of that role's ``meta/argument_specs.yml``, or a
  variable the role exposes, named there as ``C(name)``;
- a module's options in a YAML example (``wait_for_model: {...}``, ``eagle.deploy.sglang_info: ...``) must be in
  that module's DOCUMENTATION (which ansible-test checks against its argument_spec);
- a ``module: option`` or ``module``'s ``option`` named in prose must be that module's option.
A renamed option, a moved file or a dropped variable fails here, naming the document and the line.
"""

import ast
import os
import re

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOPS = ("playbooks", "roles", "library", "module_utils", "action_plugins", "inventory", "molecule", "tests", "bench",
        "docs", "bin", "collection", ".ci")
PATH_RE = re.compile(r"(?<![\w./<{$-])((?:%s)/[\w./-]*[\w/])" % "|".join(re.escape(t) for t in TOPS))
ROLE_VAR_RE = re.compile(r"(?<![\w.$/-])(sglang_(?:%s)_[a-z0-9_]+)\b(?![./(-])")
FENCE_RE = re.compile(r"^```.*?$(.*?)^```", re.S | re.M)
SPAN_RE = re.compile(r"`([^`\n]+)`")


def documents():
    docs = [os.path.join(ROOT, "README.md")]
    for name in sorted(os.listdir(os.path.join(ROOT, "docs"))):
        if name.endswith(".md"):
            docs.append(os.path.join(ROOT, "docs", name))
    return docs


def roles():
    return sorted(r for r in os.listdir(os.path.join(ROOT, "roles"))
                  if os.path.isfile(os.path.join(ROOT, "roles", r, "meta", "argument_specs.yml")))


def role_options():
    out = {}
    for role in roles():
        with open(os.path.join(ROOT, "roles", role, "meta", "argument_specs.yml")) as f:
            text = f.read()
        names = set()
        for entry in yaml.safe_load(text)["argument_specs"].values():
            names.update((entry.get("options") or {}).keys())
        # and the variables the role exposes, named in its spec as C(name) or O(name)
        out[role] = names | set(re.findall(r"[CO]\((%s_[a-z0-9_]+)\)" % role, text))
    return out


def module_options():
    """{module: its documented options}, read from DOCUMENTATION without importing the module."""
    out = {}
    lib = os.path.join(ROOT, "library")
    for name in sorted(os.listdir(lib)):
        if not name.endswith(".py"):
            continue
        with open(os.path.join(lib, name)) as f:
            tree = ast.parse(f.read())
        for node in tree.body:
            if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "DOCUMENTATION":
                doc = yaml.safe_load(node.value.value)
                out[name[:-3]] = set((doc.get("options") or {}).keys())
    return out


def code_of(text):
    """(line number, code) of every fenced block line and inline code span."""
    fenced = []
    for m in FENCE_RE.finditer(text):
        first = text.count("\n", 0, m.start(1)) + 1
        for i, line in enumerate(m.group(1).split("\n")):
            fenced.append((first + i, line))
    bare = FENCE_RE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    for i, line in enumerate(bare.split("\n"), 1):
        for span in SPAN_RE.findall(line):
            fenced.append((i, span))
    return sorted(fenced)


def blocks_of(text):
    return [(text.count("\n", 0, m.start(1)) + 1, m.group(1)) for m in FENCE_RE.finditer(text)]


def rel(path):
    return os.path.relpath(path, ROOT)


def path_findings(doc, text, exists=os.path.exists):
    bad = []
    for line, code in code_of(text):
        for path in PATH_RE.findall(code):
            if any(c in path for c in "*<>{}") or path.endswith("/..."):
                continue
            if not exists(os.path.join(ROOT, path.rstrip("/"))):
                bad.append("%s:%d: %s does not exist" % (rel(doc), line, path))
    return bad


def variable_findings(doc, text, options):
    pattern = re.compile(ROLE_VAR_RE.pattern % "|".join(r[len("sglang_"):] for r in options))
    modules = set(module_options())
    stems = modules | {f[:-3] for top in ("module_utils",) for f in os.listdir(os.path.join(ROOT, top))}
    bad = []
    for line, code in code_of(text):
        for var in pattern.findall(code):
            if var in stems or var.startswith(tuple(s + "." for s in stems)):
                continue
            role = next(r for r in sorted(options, key=len, reverse=True) if var.startswith(r + "_"))
            if var not in options[role]:
                bad.append("%s:%d: %s is not an option of role %s (roles/%s/meta/argument_specs.yml)" % (
                    rel(doc), line, var, role, role))
    return bad


def _module_calls(node, modules):
    """(module, its options) of every mapping in a YAML document that calls one of our modules."""
    if isinstance(node, list):
        for item in node:
            yield from _module_calls(item, modules)
    elif isinstance(node, dict):
        for key, value in node.items():
            name = str(key).rsplit(".", 1)[-1]
            if name in modules and isinstance(value, dict) and (
                    "." not in str(key) or str(key).startswith(("ansible.legacy.", "eagle.deploy."))):
                yield name, set(value)
            yield from _module_calls(value, modules)


def module_findings(doc, text, options):
    bad = []
    for line, block in blocks_of(text):
        # a commented example (``#   - eagle.deploy.sglang_info: {venv: ...}``) is read as YAML too
        uncommented = "\n".join(re.sub(r"^\s*#\s?", "", l) for l in block.split("\n"))
        for candidate in (block, uncommented):
            try:
                data = yaml.safe_load(candidate)
            except yaml.YAMLError:
                continue
            for module, keys in _module_calls(data, options):
                for key in sorted(keys - options[module]):
                    bad.append("%s:%d: %s is not an option of module %s" % (rel(doc), line, key, module))
    prose = re.compile(r"`(%s)`'s `([a-z_]+)`" % "|".join(options))
    for i, l in enumerate(text.split("\n"), 1):
        for module, key in prose.findall(l):
            if key not in options[module]:
                bad.append("%s:%d: %s is not an option of module %s" % (rel(doc), i, key, module))
    return sorted(set(bad))


@pytest.mark.parametrize("doc", documents(), ids=rel)
def test_paths_exist(doc):
    with open(doc) as f:
        assert path_findings(doc, f.read()) == []


@pytest.mark.parametrize("doc", documents(), ids=rel)
def test_role_variables_are_documented_options(doc):
    with open(doc) as f:
        assert variable_findings(doc, f.read(), role_options()) == []


@pytest.mark.parametrize("doc", documents(), ids=rel)
def test_module_options_exist(doc):
    with open(doc) as f:
        assert module_findings(doc, f.read(), module_options()) == []


def test_the_readme_is_short():
    with open(os.path.join(ROOT, "README.md")) as f:
        assert len(f.read().split("\n")) <= 250


def test_a_renamed_option_fails():
    """The checks above can fail: a module option, a role variable and a path renamed in a document."""
    opts = module_options()
    text = "```\n- wait_for_model:\n    name: x\n    health_urll: http://127.0.0.1:1/health\n```\n"
    assert module_findings("README.md", text, opts) == [
        "README.md:1: health_urll is not an option of module wait_for_model"]
    assert variable_findings("README.md", "set `sglang_server_portt`\n", role_options()) == [
        "README.md:1: sglang_server_portt is not an option of role sglang_server "
        "(roles/sglang_server/meta/argument_specs.yml)"]
    assert path_findings("README.md", "run `playbooks/serve_eagle4.yml`\n") == [
        "README.md:1: playbooks/serve_eagle4.yml does not exist"]


def link_findings(doc, text):
    """A relative link of a document must point at a file of the tree (its #anchor not checked)."""
    bad = []
    for i, line in enumerate(text.split("\n"), 1):
        for target in re.findall(r"\]\(([^)\s]+)\)", line):
            if target.startswith(("http://", "https://", "mailto:", "#")):
                continue
            path = os.path.normpath(os.path.join(os.path.dirname(doc), target.split("#")[0]))
            if not os.path.exists(path):
                bad.append("%s:%d: link to %s: no such file" % (rel(doc), i, target))
    return bad


@pytest.mark.parametrize("doc", documents(), ids=rel)
def test_links_point_at_files(doc):
    with open(doc) as f:
        assert link_findings(doc, f.read()) == []


def test_a_broken_link_fails():
    assert link_findings(os.path.join(ROOT, "README.md"), "see [it](docs/nothing.md)\n") == [
        "README.md:1: link to docs/nothing.md: no such file"]

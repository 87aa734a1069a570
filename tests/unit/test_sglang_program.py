"""The programs a role installs and a module runs (module_utils/sglang_program.py): one source, imported one way each,
and never run where someone less privileged could have written them. No process is started: the program is imported
in-process from its installed copy, as ``python -I -B <dir>`` would."""
from __future__ import annotations

import ast
import os
import stat
import sys

import pytest

from ansible.module_utils import sglang_program
from ansible.module_utils.sglang_program import ProgramError

from installed_programs import FETCH, SUPERVISOR, install, install_fetch_program, install_supervisor
from module_harness import module_exits, run, world  # noqa: F401 - fixtures

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODULE_UTILS = os.path.join(REPO, "module_utils")
OURS = {f[:-3] for f in os.listdir(MODULE_UTILS) if f.endswith(".py")}
PROGRAMS = {"supervisor": (SUPERVISOR, sglang_program.SUPERVISOR), "fetch": (FETCH, sglang_program.FETCH)}


# ------------------------------------------------------------------ one source, one import form
def _our_imports(node):
    """The names of our module_utils that an import node imports (any form)."""
    if isinstance(node, ast.ImportFrom):
        if node.level:
            return {node.module.split(".")[0]} if node.module else {a.name for a in node.names}
        module = node.module or ""
        if module == "ansible.module_utils":
            return {a.name for a in node.names} & OURS
        if module.startswith("ansible.module_utils."):
            return {module.split(".")[2]} & OURS
        return {module.split(".")[0]} & OURS
    if isinstance(node, ast.Import):
        names = set()
        for alias in node.names:
            parts = alias.name.split(".")
            names |= {parts[2]} if parts[:2] == ["ansible", "module_utils"] and len(parts) > 2 else {parts[0]}
        return names & OURS
    return set()


def _catches_import_error(handler):
    names = []
    for t in ([handler.type] if not isinstance(handler.type, ast.Tuple) else handler.type.elts):
        if isinstance(t, ast.Name):
            names.append(t.id)
    return handler.type is None or bool({"ImportError", "ModuleNotFoundError", "Exception"} & set(names))


def _tree(name):
    with open(os.path.join(MODULE_UTILS, name + ".py"), encoding="utf-8") as fh:
        return ast.parse(fh.read(), name)


@pytest.mark.parametrize("name", sorted(OURS))
def test_no_module_utils_file_imports_our_code_two_ways(name):
    """No try/except ImportError around an import of our own module_utils (the old 'the installed program: plain
    modules next to it' fallback): every file is imported one way, wherever it runs."""
    for node in ast.walk(_tree(name)):
        if isinstance(node, ast.Try) and any(_catches_import_error(h) for h in node.handlers):
            guarded = set()
            for part in node.body + [n for h in node.handlers for n in h.body]:
                for sub in ast.walk(part):
                    guarded |= _our_imports(sub)
            assert not guarded, "%s.py:%d: %s imported inside a try/except ImportError" % (
                name, node.lineno, sorted(guarded))


@pytest.mark.parametrize("name", sorted(set(sglang_program.SUPERVISOR + sglang_program.FETCH)))
def test_a_program_file_imports_our_code_only_relatively_and_touches_no_sys_path(name):
    """The files a program is made of import one another relatively (``from . import x``): the same text is
    ``ansible.module_utils.x`` in a module and ``eagle_deploy.x`` in the installed program."""
    tree = _tree(name)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and _our_imports(node):
            assert isinstance(node, ast.ImportFrom) and node.level == 1, "%s.py:%d: not a relative import" % (
                name, node.lineno)
        if isinstance(node, ast.Attribute) and node.attr == "path" and getattr(node.value, "id", None) == "sys":
            raise AssertionError("%s.py:%d: sys.path is the launcher's (python -I -B <dir>), never a module's" % (
                name, node.lineno))
    imported = set()
    for node in ast.walk(tree):
        imported |= _our_imports(node)
    program = sglang_program.FETCH if name in sglang_program.FETCH else sglang_program.SUPERVISOR
    assert imported <= set(program), "%s imports %s, which its program does not install" % (
        name, sorted(imported - set(program)))


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_the_roles_files_are_links_to_module_utils_and_the_list_the_module_compares(program):
    """One source: the role's files/ holds a launcher, the package's __init__ and links to module_utils, exactly the
    files sglang_program lists (what a module compares an installed program with)."""
    source, modules = PROGRAMS[program]
    package = os.path.join(source, sglang_program.PACKAGE)
    links = sorted(f for f in os.listdir(package) if os.path.islink(os.path.join(package, f)))
    assert links == sorted(m + ".py" for m in modules)
    for f in links:
        assert os.path.realpath(os.path.join(package, f)) == os.path.join(os.path.realpath(MODULE_UTILS), f)
    plain = sorted(f for f in os.listdir(package) if not os.path.islink(os.path.join(package, f)))
    assert plain == ["__init__.py"] and sorted(os.listdir(source)) == [sglang_program.LAUNCHER, sglang_program.PACKAGE]
    with open(os.path.join(source, sglang_program.LAUNCHER), encoding="utf-8") as fh:
        assert "from %s.%s import main" % (sglang_program.PACKAGE, modules[0]) in fh.read()


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_the_installed_program_imports_as_a_package_of_its_own(tmp_path, program):
    """What ``python -I -B <dir>`` does with the launcher's import, in-process: the installed copy imports as
    ``eagle_deploy.*`` from its directory alone, nothing of ansible.module_utils in between."""
    source, modules = PROGRAMS[program]
    directory = install(source, str(tmp_path / program))
    saved_path, saved = list(sys.path), {k: v for k, v in sys.modules.items() if k.split(".")[0] == "eagle_deploy"}
    for k in saved:
        del sys.modules[k]
    sys.path.insert(0, directory)
    try:
        import importlib
        main = importlib.import_module("%s.%s" % (sglang_program.PACKAGE, modules[0]))
        assert callable(main.main) and main.__file__.startswith(directory)
        for m in modules:
            mod = sys.modules["%s.%s" % (sglang_program.PACKAGE, m)]
            assert mod.__file__ == os.path.join(directory, sglang_program.PACKAGE, m + ".py")
    finally:
        sys.path[:] = saved_path
        for k in [k for k in sys.modules if k.split(".")[0] == "eagle_deploy"]:
            del sys.modules[k]
        sys.modules.update(saved)


def test_argv_runs_the_directory_isolated_and_without_bytecode():
    assert sglang_program.argv("/v/bin/python", "/srv/run/supervisor", "/srv/run", "m") == [
        "/v/bin/python", "-I", "-B", "/srv/run/supervisor", "/srv/run", "m"]


# ------------------------------------------------------------------ trust: refused, saying what to fix
@pytest.fixture
def program(tmp_path):
    top = tmp_path / "opt"
    top.mkdir(mode=0o755)
    os.chmod(str(top), 0o755)
    return install_supervisor(None, str(top / "supervisor"))


def _refused(directory, *words):
    with pytest.raises(ProgramError) as e:
        sglang_program.check(directory, "the supervisor program", "the role sglang_server (tasks/program.yml)")
    msg = str(e.value)
    for w in words + ("the role sglang_server (tasks/program.yml)", "root-owned, files 0644"):
        assert w in msg, msg
    return msg


def _foreign(monkeypatch, path):
    """``path`` owned by someone else than root and this user: chown where this user is root, else this user seen as
    another uid (the files stay owned by the real one)."""
    if os.geteuid() == 0:
        os.lchown(path, 65534, 65534)
    else:
        real = os.geteuid()
        monkeypatch.setattr(sglang_program.os, "geteuid", lambda: real + 100000)


def test_an_installed_program_is_accepted(program):
    sglang_program.check(program, "the supervisor program", "the role")


def test_a_program_not_installed_is_refused(tmp_path):
    _refused(str(tmp_path / "nowhere"), "is not installed in")
    (tmp_path / "empty").mkdir(mode=0o755)
    _refused(str(tmp_path / "empty"), "no __main__.py")


@pytest.mark.parametrize("where", ["__main__.py", "eagle_deploy/sglang_verdict.py", "eagle_deploy", ""])
@pytest.mark.parametrize("bits", [0o020, 0o002])
def test_a_program_writable_by_its_group_or_others_is_refused(program, where, bits):
    path = os.path.join(program, where) if where else program
    os.chmod(path, stat.S_IMODE(os.stat(path).st_mode) | bits)
    _refused(program, "writable by its group or by others", path.rstrip("/"))


@pytest.mark.parametrize("where", ["__main__.py", "eagle_deploy/sglang_proc.py", "eagle_deploy", ""])
def test_a_program_owned_by_another_user_is_refused(program, monkeypatch, where):
    path = os.path.join(program, where) if where else program
    _foreign(monkeypatch, path)
    _refused(program, "owned by uid", "not by root")


def test_a_directory_above_it_writable_by_others_is_refused(program):
    above = os.path.dirname(program)
    os.chmod(above, 0o777)
    _refused(program, "directory %s above it" % above)


@pytest.mark.parametrize("link", ["inside", "the program dir", "above"])
def test_a_symlink_in_or_on_the_way_to_the_program_is_refused(program, tmp_path, link):
    if link == "inside":
        target = os.path.join(program, "eagle_deploy", "sglang_log.py")
        os.unlink(target)
        os.symlink(os.path.join(MODULE_UTILS, "sglang_log.py"), target)
        _refused(program, "is a symlink", target)
    elif link == "the program dir":
        alias = str(tmp_path / "opt" / "alias")
        os.symlink(program, alias)
        _refused(alias, "is a symlink or no directory", alias)
    else:
        alias = str(tmp_path / "opt-alias")
        os.symlink(str(tmp_path / "opt"), alias)
        _refused(os.path.join(alias, "supervisor"), "is a symlink or no directory", alias)


def test_a_special_file_in_the_program_is_refused(program):
    fifo = os.path.join(program, "eagle_deploy", "pipe")
    os.mkfifo(fifo, 0o644)
    _refused(program, "a special file", fifo)


def test_a_relative_program_dir_is_refused():
    with pytest.raises(ProgramError, match="not an absolute path"):
        sglang_program.check("supervisor", "the supervisor program", "the role")


def test_wait_for_model_refuses_an_untrusted_supervisor_and_starts_nothing(world, module_exits):  # noqa: F811
    path = os.path.join(world.program_dir, "eagle_deploy", "sglang_supervisor.py")
    os.chmod(path, 0o666)
    status, r = run(world)
    assert status == "failed", r
    assert "writable by its group or by others" in r["msg"] and path in r["msg"] and "sglang_server" in r["msg"], r
    assert world.supervisors == []


def test_wait_for_model_refuses_a_supervisor_not_installed(world, module_exits, tmp_path):  # noqa: F811
    status, r = run(world, program_dir=str(tmp_path / "no-such-program"))
    assert status == "failed" and "the supervisor program is not installed in" in r["msg"], r
    assert "tasks/program.yml" in r["msg"] and world.supervisors == []


def test_sglang_model_refuses_an_untrusted_fetch_program(tmp_path, monkeypatch):
    import importlib.util
    spec = importlib.util.spec_from_file_location("sglang_model_module",
                                                  os.path.join(REPO, "library", "sglang_model.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    directory = install_fetch_program(str(state))
    assert mod.fetch_program({"state_dir": str(state), "program_dir": None}) == directory
    _foreign(monkeypatch, os.path.join(directory, "eagle_deploy", "sglang_hub_fetch.py"))
    with pytest.raises(mod.ModelError, match="the model fetch program .*owned by uid.*the role sglang_model"):
        mod.fetch_program({"state_dir": str(state), "program_dir": None})


# ------------------------------------------------------------------ drift: the installed program against this tree's
def test_drift_names_the_files_that_are_not_this_trees(program):
    from ansible.module_utils import sglang_launch
    sources = sglang_program.sources(sglang_launch.SUPERVISOR_MODULES)
    assert sorted(sources) == sorted(sglang_program.SUPERVISOR)
    assert sglang_program.drift(program, sources) == []
    with open(os.path.join(program, "eagle_deploy", "sglang_log.py"), "a") as fh:
        fh.write("# older\n")
    os.unlink(os.path.join(program, "eagle_deploy", "sglang_probe.py"))
    assert sglang_program.drift(program, sources) == ["sglang_log.py", "sglang_probe.py"]
    assert sglang_program.drift(program + "-gone", sources) == sorted(m + ".py" for m in sglang_program.SUPERVISOR)

"""Unit tests of the model weights: module_utils/sglang_weights.py (the look, the plan, the checks), the fetch program's
parts that run in-process (module_utils/sglang_hub_fetch.py: a seed copy and a Hub fetch with huggingface_hub's
functions replaced, the status counters on a fake clock), and library/sglang_model.py with a fake host (no lister
process, no fetch program: the test writes the status files the program would). No process, no sleep."""

from __future__ import annotations

import grp
import hashlib
import importlib.util
import json
import os
import stat

import pytest

from ansible.module_utils import basic
from ansible.module_utils import sglang_weights, sglang_hub_fetch
from ansible.module_utils.common.warnings import get_warning_messages
from ansible.module_utils.sglang_weights import ModelError
from ansible.module_utils.sglang_progress import transfer_line
from ansible.module_utils.testing import patch_module_args

from module_harness import ExitJson, FailJson
from module_harness import exit_json as _exit_json
from module_harness import fail_json as _fail_json
from installed_programs import install_fetch_program

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("sglang_model_mod", os.path.join(REPO, "library", "sglang_model.py"))
mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mod)

ROOT_GROUP = grp.getgrgid(0).gr_name
COMMIT = "a" * 40


def blob(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def files_of(tmp_path, name="src"):
    """A small source tree: config.json (non-LFS: git SHA-1 only), a shard (LFS: SHA-256), a file in a subdir."""
    data = {"config.json": b'{"a": 1}\n', "model-00001-of-00001.safetensors": os.urandom(300000),
            "sub/extra.json": b"{}\n"}
    root = tmp_path / name
    for rel, content in data.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(content)
    listing = [{"path": rel, "size": len(c), "sha256": hashlib.sha256(c).hexdigest() if rel.endswith(".safetensors")
                else None, "git_sha1": None if rel.endswith(".safetensors") else blob(c)} for rel, c in data.items()]
    return root, data, listing


def params(tmp_path, models, **kw):
    program = str(tmp_path / "fetch-program")
    if not os.path.isdir(program):
        install_fetch_program(None, program)  # the role's part (tasks/program.yml): the module only runs it
    p = dict(models=models, state_dir=str(tmp_path / "state"), endpoint="https://hub.example", token=None,
             python=None, owner="root", group=ROOT_GROUP, file_mode="0640", dir_mode="0750", verify="auto",
             disk_margin_mib=0, parallel=2, timeout=0, _step_time=None, _jobs=None, program_dir=program)
    p.update(kw)
    return p


# ------------------------------------------------------------------ module_utils/sglang_weights.py
def test_model_names_paths_and_sources_are_checked_before_anything():
    ok = {"name": "a", "path": "/data/a", "repo": "org/a", "revision": "main"}
    sglang_weights.check_models([ok])
    cases = [
        ([dict(ok, name="a/b")], "use letters"),
        ([ok, dict(ok, path="/data/b")], "given twice"),
        ([dict(ok, path="data/a")], "absolute directory path"),
        ([ok, dict(ok, name="b", path="/data/a/sub")], "overlaps"),
        ([{"name": "a", "path": "/data/a", "revision": "main"}], "give a source"),
        ([dict(ok, repo="not a repo")], "Hugging Face repo id"),
        ([dict(ok, revision=" ")], "revision is empty"),
        ([dict(ok, seed="/data/a", peer={"address": "x"})], "never copied from a peer"),
    ]
    for models, words in cases:
        with pytest.raises(ModelError, match=words):
            sglang_weights.check_models(models)


def test_modes_and_relative_paths():
    assert sglang_weights.mode_of("0640", "m") == 0o640 and sglang_weights.mode_of(0o750, "m") == 0o750
    with pytest.raises(ModelError, match="octal mode"):
        sglang_weights.mode_of("rw-r", "file_mode")
    assert sglang_weights.safe_relpath("a/b.json")
    for bad in ("/etc/passwd", "../x", "a/../b", "", "a//b", ".eagle-fetch/x", "a\\b"):
        assert not sglang_weights.safe_relpath(bad), bad


def test_allow_and_ignore_patterns_filter_as_huggingface_hub_does():
    paths = ["config.json", "model-1.safetensors", "original/consolidated.pth", "original/params.json"]
    assert sglang_weights.selected(paths, ignore=["original/"]) == paths[:2]
    assert sglang_weights.selected(paths, allow=["*.json"]) == ["config.json", "original/params.json"]


def test_a_branch_is_resolved_once_and_stays_in_place_until_another_revision_is_asked():
    rec = {"kind": "hub", "repo": "org/a", "revision": "main", "commit": COMMIT, "allow_patterns": [],
           "ignore_patterns": []}
    model = {"name": "a", "path": "/d", "repo": "org/a", "revision": "main"}
    assert sglang_weights.source_matches(rec, model) == (True, None)
    assert sglang_weights.source_matches(rec, dict(model, revision=COMMIT))[0]
    assert not sglang_weights.source_matches(rec, dict(model, revision="b" * 40))[0]
    assert "repo" in sglang_weights.source_matches(rec, dict(model, repo="org/b"))[1]
    assert "ignore_patterns" in sglang_weights.source_matches(rec, dict(model, ignore_patterns=["x"]))[1]


def test_a_small_file_is_checked_by_its_git_blob_sha1_and_a_large_one_by_its_sha256(tmp_path):
    root, data, listing = files_of(tmp_path)
    by = dict((f["path"], f) for f in listing)
    for rel in data:
        assert sglang_weights.digest_problem(by[rel], sglang_weights.hash_file(str(root / rel))) is None
    (root / "config.json").write_bytes(b'{"a": 2}\n')
    assert "git blob SHA-1" in sglang_weights.digest_problem(by["config.json"], sglang_weights.hash_file(
        str(root / "config.json")))
    shard = "model-00001-of-00001.safetensors"
    (root / shard).write_bytes(b"x" * len(data[shard]))
    assert "SHA-256" in sglang_weights.digest_problem(by[shard], sglang_weights.hash_file(str(root / shard)))


def test_the_disk_check_adds_up_models_on_one_file_system_and_says_the_numbers():
    class Vfs(object):
        f_bavail, f_frsize = 1000, 4096  # 4,096,000 bytes free

    needs = [("a", "/tmp/x/a", 2000000), ("b", "/tmp/x/b", 1000000)]
    assert sglang_weights.disk_shortfall(needs, 1000000, statvfs=lambda p: Vfs()) is None
    msg = sglang_weights.disk_shortfall(needs, 1200000, statvfs=lambda p: Vfs())
    assert "not enough disk space for a, b" in msg and "(3000000 bytes)" in msg and "(4096000 bytes)" in msg
    assert "Nothing was fetched or changed" in msg


def _manifest(state_dir, name, path, entries, source):
    os.makedirs(state_dir, exist_ok=True)
    with open(os.path.join(state_dir, "%s.manifest.json" % name), "w") as fh:
        json.dump({"version": 1, "name": name, "path": path, "source": source, "files": entries}, fh)
    os.chmod(os.path.join(state_dir, "%s.manifest.json" % name), 0o644)


def _in_place(tmp_path, data):
    """A model dir as a fetch leaves it, and its manifest."""
    path = tmp_path / "models" / "m"
    entries = {}
    for rel, content in data.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_bytes(content)
        os.chmod(path / rel, 0o640)
        entries[rel] = sglang_weights.entry_of(os.lstat(path / rel), sglang_weights.hash_file(str(path / rel)))
    for d in (path, path / "sub"):
        os.chmod(d, 0o750)
    source = {"kind": "hub", "repo": "org/m", "revision": "main", "commit": COMMIT, "allow_patterns": [],
              "ignore_patterns": []}
    _manifest(str(tmp_path / "state"), "m", str(path), entries, source)
    return {"name": "m", "path": str(path), "repo": "org/m", "revision": "main"}


def test_the_look_is_in_place_by_lstat_alone_and_names_what_is_not(tmp_path):
    _, data, _ = files_of(tmp_path)
    model = _in_place(tmp_path, data)
    own = (0, 0, 0o640, 0o750)
    state = str(tmp_path / "state")
    assert sglang_weights.look_model(model, state, own, "auto")["in_place"]
    assert "full verification" in sglang_weights.look_model(model, state, own, "full")["why"]
    assert "mode 0640, want 0644" in sglang_weights.look_model(model, state, (0, 0, 0o644, 0o750), "auto")["why"]
    shard = os.path.join(model["path"], "model-00001-of-00001.safetensors")
    os.utime(shard, ns=(1, 1))
    assert "changed since it was verified" in sglang_weights.look_model(model, state, own, "auto")["why"]
    os.unlink(shard)
    assert "missing" in sglang_weights.look_model(model, state, own, "auto")["why"]
    os.chmod(os.path.join(state, "m.manifest.json"), 0o666)
    assert "not trusted" in sglang_weights.look_model(model, state, own, "auto")["why"]


def test_the_look_never_fails_on_a_group_the_play_creates_later(tmp_path):
    out = sglang_weights.look(params(tmp_path, [{"name": "m", "path": "/d/m", "repo": "o/m", "revision": "main"}],
                                   group="no-such-group-here"))
    assert out == {"in_place": False, "models": [{"name": "m", "path": "/d/m", "in_place": False,
                                                  "why": "group 'no-such-group-here' does not exist on this host "
                                                         "(create the service group first: the install role does)"}]}


def test_the_plan_keeps_verified_files_verifies_those_of_the_right_size_and_resumes_parts(tmp_path):
    _, data, listing = files_of(tmp_path)
    model = _in_place(tmp_path, data)
    manifest, _ = sglang_weights.read_manifest(str(tmp_path / "state"), "m")
    shard = "model-00001-of-00001.safetensors"
    os.unlink(os.path.join(model["path"], shard))
    part = sglang_weights.part_path(model["path"], shard)
    os.makedirs(os.path.dirname(part))
    with open(part, "wb") as fh:
        fh.write(data[shard][:1000])
    with open(os.path.join(model["path"], "config.json"), "ab") as fh:
        fh.write(b"")
    os.utime(os.path.join(model["path"], "config.json"), ns=(5, 5))
    tasks, need = sglang_weights.plan(model, listing, manifest, "auto")
    actions = dict((t["path"], (t["action"], t.get("resume_from"))) for t in tasks)
    assert actions == {"config.json": ("verify", None), shard: ("fetch", 1000), "sub/extra.json": ("keep", None)}
    assert need == len(data[shard]) - 1000
    os.symlink("/etc/passwd", os.path.join(model["path"], shard))
    with pytest.raises(ModelError, match="not a regular file"):
        sglang_weights.plan(model, listing, manifest, "auto")


def test_a_seed_the_service_group_cannot_read_is_named(tmp_path):
    root, data, _ = files_of(tmp_path)
    assert sglang_weights.unreadable(str(root), list(data), 12345) is None  # the umask leaves o+r
    os.chmod(root / "config.json", 0o600)
    assert str(root / "config.json") in sglang_weights.unreadable(str(root), list(data), 12345)


def test_a_file_list_with_a_path_outside_the_model_is_refused():
    with pytest.raises(ModelError, match="cannot be written safely"):
        sglang_weights.check_listing("m", [{"path": "../../etc/cron.d/x", "size": 1}])
    with pytest.raises(ModelError, match="twice"):
        sglang_weights.check_listing("m", [{"path": "a", "size": 1}, {"path": "a", "size": 1}])


# ------------------------------------------------------------------ the fetch program, in-process
def _job(tmp_path, listing, source, model_path, **kw):
    tasks, _ = sglang_weights.plan({"name": "m", "path": model_path}, listing, None, "auto")
    job = {"job_id": "j1", "name": "m", "path": model_path, "source": source, "record_source": {"kind": source["kind"]},
           "tasks": tasks, "managed": True, "uid": 0, "gid": 0, "file_mode": 0o640, "dir_mode": 0o750,
           "owner": "root", "group": ROOT_GROUP, "parallel": 2, "endpoint": "https://hub.example", "repo": "org/m",
           "commit": COMMIT}
    job.update(kw)
    return job


class Clock(object):
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def _fetch(tmp_path, job, token=None):
    state = str(tmp_path / "state")
    os.makedirs(state, exist_ok=True)
    status = sglang_hub_fetch.Status(state, "m", job, clock=Clock())
    return sglang_hub_fetch.Fetch(state, "m", job, token, status), status


def test_a_seed_is_copied_resuming_its_part_file_and_every_file_is_verified_and_owned(tmp_path):
    root, data, listing = files_of(tmp_path)
    path = str(tmp_path / "models" / "m")
    shard = "model-00001-of-00001.safetensors"
    part = sglang_weights.part_path(path, shard)
    os.makedirs(os.path.dirname(part))
    with open(part, "wb") as fh:
        fh.write(data[shard][:4096])
    job = _job(tmp_path, listing, {"kind": "seed"}, path, seed=str(root))
    fetch, status = _fetch(tmp_path, job)
    assert status.data["resumed_bytes"] == 4096
    assert fetch.run()
    for rel, content in data.items():
        st = os.lstat(os.path.join(path, rel))
        assert open(os.path.join(path, rel), "rb").read() == content
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o640)
    assert stat.S_IMODE(os.lstat(os.path.join(path, "sub")).st_mode) == 0o750
    assert not os.path.exists(os.path.join(path, sglang_weights.STAGING))
    manifest, _ = sglang_weights.read_manifest(str(tmp_path / "state"), "m")
    assert manifest["files"][shard]["sha256"] == hashlib.sha256(data[shard]).hexdigest()


def test_a_hub_file_resumes_with_http_get_at_its_part_size_a_wrong_one_is_fetched_again_once_and_no_cdn_gets_the_token(
        tmp_path):
    root, data, listing = files_of(tmp_path)
    path = str(tmp_path / "models" / "m")
    shard = "model-00001-of-00001.safetensors"
    part = sglang_weights.part_path(path, shard)
    os.makedirs(os.path.dirname(part))
    with open(part, "wb") as fh:
        fh.write(data[shard][:777])
    calls = []
    serve_wrong = {"config.json": 1}

    class Meta(object):
        def __init__(self, rel):
            self.size = len(data[rel])
            want = dict((f["path"], f) for f in listing)[rel]
            self.etag = want["sha256"] or want["git_sha1"]
            self.commit_hash = COMMIT
            self.location = "https://cdn.example/" + rel if rel != "config.json" else (
                "https://hub.example/org/m/resolve/%s/config.json" % COMMIT)

    def http_get(url, fh, resume_size=0, headers=None, expected_size=None, displayed_filename=None):
        rel = url.split("https://cdn.example/", 1)[1] if "cdn.example" in url else url.rsplit("/", 1)[1]
        calls.append((rel, resume_size, headers))
        content = data[rel]
        if serve_wrong.get(rel):
            serve_wrong[rel] -= 1
            content = content.replace(b"1", b"2")
        fh.write(content[resume_size:])

    job = _job(tmp_path, listing, {"kind": "hub"}, path)
    fetch, status = _fetch(tmp_path, job, token="hf_secret")
    fetch.hub = {"hf_hub_url": lambda repo, rel, revision, endpoint: "https://hub.example/%s/resolve/%s/%s" % (
        repo, revision, rel), "get_hf_file_metadata": lambda url, token: Meta(url.rsplit("/", 1)[1] if "sub" not in url
                                                                               else "sub/extra.json"),
        "http_get": http_get, "build_hf_headers": lambda token: {"authorization": "Bearer %s" % token}}
    ok = fetch.parallel([t for t in job["tasks"] if t["action"] in ("fetch", "verify")])
    assert ok, status.data["errors"]
    resumed = [c for c in calls if c[0] == shard]
    assert resumed == [(shard, 777, {})]  # the CDN (another host) never gets the token
    assert [c for c in calls if c[0] == "config.json"] == [("config.json", 0, {"authorization": "Bearer hf_secret"})] * 2
    assert fetch.refetched == ["config.json"]
    assert open(os.path.join(path, "config.json"), "rb").read() == data["config.json"]


def test_the_status_rate_and_eta_come_from_the_last_ten_seconds(tmp_path):
    _, _, listing = files_of(tmp_path)
    job = _job(tmp_path, listing, {"kind": "hub"}, str(tmp_path / "models" / "m"))
    state = str(tmp_path / "state")
    os.makedirs(state)
    clock = Clock()
    status = sglang_hub_fetch.Status(state, "m", job, clock=clock)
    total = status.data["fetch_total"]
    status.write()
    clock.now += 2.0
    status.data["fetch_done"] = total // 4
    status.write()
    with open(os.path.join(state, "m.status.json")) as fh:
        written = json.load(fh)
    assert written["rate"] == pytest.approx(total / 4 / 2.0)
    assert written["eta"] == pytest.approx((total - total // 4) / (total / 4 / 2.0))
    assert stat.S_IMODE(os.stat(os.path.join(state, "m.status.json")).st_mode) == 0o644


def test_hub_errors_are_named_for_the_operator():
    for name, kind in (("GatedRepoError", "gated"), ("RevisionNotFoundError", "revision_not_found"),
                       ("RepositoryNotFoundError", "repo_not_found")):
        exc = type(name, (Exception,), {})("401 Client Error.\n\nsomething")
        assert sglang_hub_fetch.error_kind(exc)[0] == kind


# ------------------------------------------------------------------ the module, with a fake host
class FakeHost(object):
    def __init__(self, answer=None):
        self.answer = answer
        self.listed = []
        self.spawned = []
        self.locked = set()

    def list_repo(self, python, request, env):
        self.listed.append((python, request, env))
        return self.answer

    def spawn(self, argv, log_path, stdin_text, env):
        self.spawned.append({"argv": argv, "log": log_path, "stdin": stdin_text, "env": env})
        return 4242

    def running(self, state_dir, name):
        return name in self.locked


def run_module(monkeypatch, p, host, check=False, wall=None):
    monkeypatch.setattr(basic.AnsibleModule, "exit_json", _exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", _fail_json)
    args = dict((k, v) for k, v in p.items() if v is not None)
    if check:
        args["_ansible_check_mode"] = True
    with patch_module_args(args):
        module = basic.AnsibleModule(argument_spec=sglang_weights.ARGUMENT_SPEC, supports_check_mode=True)
        clock = Clock()
        fetch = mod.ModelFetch(module, host=host, clock=clock, sleep=lambda dt: setattr(clock, "now", clock.now + dt),
                               wall=wall or clock)
        try:
            result = fetch.run()
        except ModelError as e:
            for w in fetch.warnings:
                module.warn(w)
            module.fail_json(msg=e.msg, **e.extra)
        module.exit_json(**result)


def hub_model(tmp_path, **kw):
    m = {"name": "m", "path": str(tmp_path / "models" / "m"), "repo": "org/m", "revision": "main"}
    m.update(kw)
    return m


def test_a_model_in_place_is_kept_without_listing_or_starting_anything(tmp_path, monkeypatch):
    _, data, _ = files_of(tmp_path)
    model = _in_place(tmp_path, data)
    for path in [model["path"]] + [os.path.join(model["path"], "sub")]:
        os.chown(path, 0, 0)
    host = FakeHost()
    with pytest.raises(ExitJson) as e:
        run_module(monkeypatch, params(tmp_path, [model]), host)
    out = e.value.args[0]
    assert not out["changed"] and out["models"][0]["action"] == "kept" and out["models"][0]["in_place"]
    assert host.listed == [] and host.spawned == []


def test_check_mode_reports_the_fetch_and_asks_no_source(tmp_path, monkeypatch):
    host = FakeHost()
    with pytest.raises(ExitJson) as e:
        run_module(monkeypatch, params(tmp_path, [hub_model(tmp_path)], python="/bin/sh"), host, check=True)
    out = e.value.args[0]
    assert out["changed"] and out["models"][0]["action"] == "would_fetch"
    assert host.listed == [] and not os.path.exists(tmp_path / "state")


def test_hub_refusals_say_what_to_fix_and_make_nothing(tmp_path, monkeypatch):
    cases = [({"error": "revision_not_found", "msg": "404"}, "revision main not found in org/m"),
             ({"error": "gated", "msg": "401"}, "org/m is a gated repo and no token was given"),
             ({"error": "no_huggingface_hub", "msg": "huggingface_hub is not importable by /x"},
              "sglang_model_hf_packages")]
    for answer, words in cases:
        host = FakeHost(answer)
        with pytest.raises(FailJson) as e:
            run_module(monkeypatch, params(tmp_path, [hub_model(tmp_path)], python="/bin/sh"), host)
        assert words in e.value.args[0]["msg"] and "Nothing was fetched or changed" in e.value.args[0]["msg"]
        assert host.spawned == [] and not os.path.exists(tmp_path / "state") and not os.path.exists(tmp_path / "models")


def test_too_little_disk_fails_before_the_state_dir_or_the_model_dir_exists(tmp_path, monkeypatch):
    _, _, listing = files_of(tmp_path)
    host = FakeHost({"commit": COMMIT, "files": listing})
    with pytest.raises(FailJson) as e:
        run_module(monkeypatch, params(tmp_path, [hub_model(tmp_path)], python="/bin/sh", disk_margin_mib=1 << 40), host)
    assert "not enough disk space for m" in e.value.args[0]["msg"]
    assert host.spawned == [] and not os.path.exists(tmp_path / "state") and not os.path.exists(tmp_path / "models")


def test_a_fetch_starts_with_the_token_on_stdin_only_and_a_job_file_without_it(tmp_path, monkeypatch):
    _, _, listing = files_of(tmp_path)
    host = FakeHost({"commit": COMMIT, "files": listing})
    token = "hf_thisisthetoken_123456"
    with pytest.raises(ExitJson) as e:
        run_module(monkeypatch, params(tmp_path, [hub_model(tmp_path)], python="/bin/sh", token=token, _step_time=1.0),
                   host)
    out = e.value.args[0]
    assert out["pending"] and out["jobs"] and not out["changed"]
    assert out["models"][0]["action"] == "fetched"
    assert any(COMMIT in w for w in get_warning_messages())  # "main" is resolved: the hash to pin
    (spawn,) = host.spawned
    assert json.loads(spawn["stdin"]) == {"token": token}
    assert token not in " ".join(spawn["argv"]) and token not in json.dumps(spawn["env"])
    assert spawn["argv"][:3] == ["/bin/sh", "-I", "-B"] and spawn["argv"][-2:] == [str(tmp_path / "state"), "m"]
    job_path = tmp_path / "state" / "m.job.json"
    assert stat.S_IMODE(os.stat(job_path).st_mode) == 0o600 and token not in job_path.read_text()
    assert json.loads(job_path.read_text())["commit"] == COMMIT
    assert spawn["argv"][3] == str(tmp_path / "fetch-program")  # the role's program, run as it is
    assert not (tmp_path / "state" / "program").exists() and not (tmp_path / "state" / "fetch-program").exists()
    assert host.listed[0][1]["token"] == token  # the lister gets it on its stdin (run_command data)


def _status(tmp_path, job_id, **kw):
    st = {"job_id": job_id, "pid": 4242, "phase": "done", "verdict": "done", "total": 10, "fetch_total": 10,
          "fetch_done": 10, "files_done": 3, "files_total": 3, "elapsed": 3.0, "errors": [],
          "summary": {"fetched": 3, "refetched": [], "verified": 0, "kept": 0, "settled": 0, "source": "hub",
                      "changed": True}}
    st.update(kw)
    (tmp_path / "state" / "m.status.json").write_text(json.dumps(st))


def _started(tmp_path, monkeypatch, host):
    with pytest.raises(ExitJson) as e:
        run_module(monkeypatch, params(tmp_path, [hub_model(tmp_path)], python="/bin/sh", _step_time=1.0), host)
    return e.value.args[0]["jobs"]["m"]


def test_the_next_step_waits_on_the_same_fetch_and_reports_its_verdict(tmp_path, monkeypatch):
    _, _, listing = files_of(tmp_path)
    host = FakeHost({"commit": COMMIT, "files": listing})
    job_id = _started(tmp_path, monkeypatch, host)
    host.locked.add("m")
    _status(tmp_path, job_id)
    host.locked.discard("m")
    with pytest.raises(ExitJson) as e:
        run_module(monkeypatch, params(tmp_path, [hub_model(tmp_path)], python="/bin/sh", _step_time=1.0,
                                       _jobs={"m": job_id}), host)
    out = e.value.args[0]
    assert out["changed"] and not out["pending"] and out["models"][0]["action"] == "fetched"
    assert len(host.spawned) == 1  # never a second fetch within the task
    assert out["progress"]["phase"] == "done"


def test_a_failed_fetch_fails_with_each_files_reason(tmp_path, monkeypatch):
    _, _, listing = files_of(tmp_path)
    host = FakeHost({"commit": COMMIT, "files": listing})
    job_id = _started(tmp_path, monkeypatch, host)
    _status(tmp_path, job_id, verdict="failed", phase="failed", errors=[
        {"path": "config.json", "why": "SHA-256 x after 2 fetches: the source serves other bytes than it lists"}])
    with pytest.raises(FailJson) as e:
        run_module(monkeypatch, params(tmp_path, [hub_model(tmp_path)], python="/bin/sh", _jobs={"m": job_id}), host)
    assert "fetch failed: m: config.json: SHA-256 x after 2 fetches" in e.value.args[0]["msg"]
    assert "Files already complete stay in place" in e.value.args[0]["msg"]


def test_a_fetch_program_that_died_without_a_verdict_is_reported_with_what_stays(tmp_path, monkeypatch):
    _, _, listing = files_of(tmp_path)
    host = FakeHost({"commit": COMMIT, "files": listing})
    job_id = _started(tmp_path, monkeypatch, host)
    _status(tmp_path, job_id, verdict=None, phase="fetching", fetch_done=4)
    with pytest.raises(FailJson) as e:
        run_module(monkeypatch, params(tmp_path, [hub_model(tmp_path)], python="/bin/sh", _jobs={"m": job_id}), host)
    msg = e.value.args[0]["msg"]
    assert "ended without a verdict (killed?)" in msg and "the next run resumes there" in msg


def test_a_run_finds_a_fetch_of_another_revision_running_and_leaves_it_alone(tmp_path, monkeypatch):
    _, _, listing = files_of(tmp_path)
    host = FakeHost({"commit": COMMIT, "files": listing})
    _started(tmp_path, monkeypatch, host)
    host.locked.add("m")
    with pytest.raises(FailJson) as e:
        run_module(monkeypatch, params(tmp_path, [hub_model(tmp_path, revision="b" * 40)], python="/bin/sh"), host)
    assert "a fetch of another source or path runs" in e.value.args[0]["msg"]
    assert len(host.spawned) == 1


def test_a_peer_holding_another_revision_is_refused(tmp_path, monkeypatch):
    peer = {"address": "10.0.0.1", "path": "/d/m", "key": "/k", "host_keys": ["ssh-ed25519 AAAA"], "files": [],
            "source": {"kind": "hub", "repo": "org/m", "revision": "b" * 40, "commit": "b" * 40,
                       "allow_patterns": [], "ignore_patterns": []}}
    with pytest.raises(FailJson) as e:
        run_module(monkeypatch, params(tmp_path, [hub_model(tmp_path, revision=COMMIT, peer=peer)]), FakeHost())
    assert "the peer 10.0.0.1 holds another source" in e.value.args[0]["msg"]


def test_a_seed_read_in_place_that_lacks_a_file_is_refused_and_never_written(tmp_path, monkeypatch):
    root, data, listing = files_of(tmp_path)
    os.unlink(root / "sub" / "extra.json")
    host = FakeHost({"commit": COMMIT, "files": listing})
    model = hub_model(tmp_path, seed=str(root), path=str(root))
    with pytest.raises(FailJson) as e:
        run_module(monkeypatch, params(tmp_path, [model], python="/bin/sh"), host)
    assert "the seed %s lacks 1 file(s)" % root in e.value.args[0]["msg"]


def test_the_fetch_line_shows_bytes_files_rate_and_eta():
    progress = {"phase": "fetching", "models": ["Kimi-K2.5-INT4"], "total": 547e9, "present": 312.4e9,
                "files_done": 31, "files_total": 72, "rate": 210.3e6, "eta": 1120.0, "elapsed": 724.0}
    assert transfer_line("gpu-01", progress) == (
        "gpu-01 | fetching Kimi-K2.5-INT4 | 312.40 GB/547.00 GB, 31/72 files | 210.3 MB/s | 12m04s elapsed | ETA ~18m40s")
    verifying = dict(progress, phase="verifying", hash_done=120e9, hash_total=547e9, hash_rate=1.9e9)
    assert transfer_line("gpu-01", verifying).startswith("gpu-01 | verifying Kimi-K2.5-INT4 | 120.00 GB/547.00 GB hashed | 1900.0 MB/s")
    assert transfer_line("h\x1b[2J", dict(progress, phase="done")).startswith("h\\x1b[2J | fetched")
    assert transfer_line("gpu-02", dict(progress, phase="copying", copy=True)).startswith("gpu-02 | copying Kimi")
    assert transfer_line("gpu-02", dict(progress, phase="done", copy=True)).startswith("gpu-02 | copied Kimi")

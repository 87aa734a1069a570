"""The model role on this machine against the Hub test double (tests/integration/hub_double.py): real
ansible-playbook runs of tests/integration/model_role.yml, the real fetch program with huggingface_hub 2.4.0 (installed
by the role into a bare virtualenv from the wheel cache, tests/integration/hf_wheels.py), real HTTP.

Each test has a model directory and state dir of its own under the module's prefix, so any one of them runs alone
(``-k``). What the double served is read from its request log: bytes on the wire per file and request.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest
import testinfra

import hf_wheels
import hub_double

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
PLAYBOOK = os.path.join(REPO, "tests", "integration", "model_role.yml")
TOKEN = "hf_gatedtesttoken_5b1e0c7d9a2f4e68"
MIB = 1 << 20
LOOK = "Look at the models"
FETCH = "Fetch the models from their source"
CONTROLLER_ONLY = frozenset("ansible.builtin." + a for a in (
    "assert", "debug", "fail", "set_fact", "meta", "include_tasks", "import_tasks", "include_role", "validate_argument_spec"))

pytestmark = pytest.mark.slow


class Run(object):
    """One ansible-playbook run, parsed from the json callback (progress lines go to stderr)."""

    def __init__(self, proc, elapsed):
        self.rc = proc.returncode
        self.elapsed = elapsed
        self.stdout, self.stderr = proc.stdout, proc.stderr
        try:
            # -v puts "Using ... as config file" before the JSON
            self.out = json.loads(proc.stdout[proc.stdout.find("{"):])
        except ValueError:
            raise AssertionError("no JSON from ansible-playbook (rc=%s):\n%s\n%s" % (
                proc.returncode, proc.stdout[-4000:], proc.stderr[-4000:]))
        self.stats = self.out["stats"]["localhost"]
        self.tasks = [(t["task"]["name"].split(" : ", 1)[-1], t["hosts"].get("localhost", {}))
                      for play in self.out["plays"] for t in play["tasks"]]

    def result(self, name):
        found = [r for n, r in self.tasks if n == name]
        assert found, "task %r did not run; tasks: %s" % (name, [n for n, _ in self.tasks])
        return found[-1]

    def module_calls(self):
        return [n for n, r in self.tasks if not r.get("skipped") and r.get("action") not in CONTROLLER_ONLY]

    def failure_msgs(self):
        return [r.get("msg", "") for _, r in self.tasks if r.get("failed")]

    def changed_tasks(self):
        return [(n, [(m.get("action"), m.get("summary")) for m in r.get("models") or []] or r.get("msg")) for n, r in self.tasks if r.get("changed")]

    def __repr__(self):
        return "rc=%s stats=%s changed=%s failed=%s stderr=%s" % (self.rc, self.stats, self.changed_tasks(),
                                                                  self.failure_msgs(), self.stderr[-1500:])


def sha256(path):
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


@pytest.fixture(scope="module")
def world():
    """The module's prefix, a bare virtualenv (the role installs huggingface_hub into it), the source trees, and two Hub
    doubles: a fast one (tree pages of 2 entries, a gated repo) and a paced one (1 MiB/s a response) for the progress
    lines; the tests that kill a fetch have a slow one of their own (``slow``)."""
    wheels = hf_wheels.wheelhouse()
    prefix = tempfile.mkdtemp(prefix="eagle-model-test-")
    os.chmod(prefix, 0o755)  # root's, under the sticky /tmp: a trusted place for state dirs
    venv = os.path.join(prefix, "venv")
    subprocess.run([shutil.which("python3", path="/usr/bin") or "python3", "-m", "venv", venv], check=True)
    src = os.path.join(prefix, "src")
    hub_double.make_model(os.path.join(src, "tiny"), shards=3, shard_size=4 * MIB, seed="tiny")
    hub_double.make_model(os.path.join(src, "slow"), shards=2, shard_size=24 * MIB, seed="slow")
    hub_double.make_model(os.path.join(src, "paced"), shards=2, shard_size=6 * MIB, seed="paced")
    fast = hub_double.Double([hub_double.Repo("test-org/tiny", os.path.join(src, "tiny")),
                              hub_double.Repo("test-org/gated", os.path.join(src, "tiny"), gated=True)],
                             token=TOKEN, page_size=2)
    # 1 MiB/s a response: a fetch of 6 s, several steps of 1 s even when the machine is busy
    paced = hub_double.Double([hub_double.Repo("test-org/paced", os.path.join(src, "paced"))], rate=1 * MIB)
    servers = [hub_double.serve(fast), hub_double.serve(paced)]
    w = {"prefix": prefix, "venv": venv, "wheels": wheels, "src": src, "fast": fast, "paced": paced,
         "fast_url": "http://127.0.0.1:%d" % servers[0].server_address[1],
         "paced_url": "http://127.0.0.1:%d" % servers[1].server_address[1]}
    yield w
    for s in servers:
        s.shutdown()
    shutil.rmtree(prefix, ignore_errors=True)


def settings(world, case, models, **extra):
    """The role's variables for one case: its own model dir and state dir under the prefix."""
    base = os.path.join(world["prefix"], case)
    v = {
        "sglang_model_models": models,
        "sglang_model_state_dir": os.path.join(base, "state"),
        "sglang_model_python": os.path.join(world["venv"], "bin", "python"),
        "sglang_model_hf_endpoint": world["fast_url"],
        "sglang_model_hf_packages": [hf_wheels.HF_REQUIREMENT],
        "sglang_model_pip_find_links": [world["wheels"]],
        "sglang_model_pip_no_index": True,
        "sglang_model_group": "daemon",
        "sglang_model_disk_margin_mib": 1,
        "sglang_model_step_time": 1,
    }
    v.update(extra)
    return v


def model(world, case, repo="test-org/tiny", name="tiny", **kw):
    m = {"name": name, "repo": repo, "revision": "main", "path": os.path.join(world["prefix"], case, "models", name)}
    m.update(kw)
    return m


def play(world, variables, *extra, wait=True, timeout=300):
    path = os.path.join(world["prefix"], "vars-%s.json" % hashlib.sha1(json.dumps(variables, sort_keys=True).encode()
                                                                        ).hexdigest()[:12])
    with open(path, "w") as fh:
        json.dump(variables, fh)
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""),
               ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_NOCOLOR="1")
    cmd = [os.path.join(BIN, "ansible-playbook"), PLAYBOOK, "-i", "localhost,", "-c", "local",
           "-e", "ansible_python_interpreter=%s" % sys.executable, "-e", "@" + path] + list(extra)
    if not wait:
        return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    return Run(proc, time.monotonic() - start)


def served(double, method="GET", stats=None):
    """{file name: [(range start, bytes sent)]} of the double's file responses (or of ``stats``, its request log)."""
    out = {}
    for r in double.stats() if stats is None else stats:
        if r["method"] == method and r.get("file"):
            out.setdefault(os.path.basename(r["file"]), []).append((r["start"], r["sent"]))
    return out


def source_files(world, name):
    root = os.path.join(world["src"], name)
    return dict((os.path.relpath(os.path.join(d, f), root), os.path.join(d, f))
                for d, _, fs in os.walk(root) for f in fs)


# The host's state is asked through testinfra (its local backend: the "host" is this machine, where the role ran).
HOST = testinfra.get_host("local://")


def assert_model_in_place(world, m, src="tiny", group="daemon", fmode=0o640, dmode=0o750):
    """Every file of the source in place with its bytes, root's, the group's, the modes; nothing else left (no part
    files, no staging dir); the manifest root's 0644 and every file in it with its SHA-256."""
    files = source_files(world, src)
    for rel, path in files.items():
        final = HOST.file(os.path.join(m["path"], rel))
        assert final.is_file and not final.is_symlink, rel
        assert (final.user, final.group, final.mode) == ("root", group, fmode), rel
        assert final.sha256sum == sha256(path), rel
    top = HOST.file(m["path"])
    assert top.is_directory and (top.user, top.group, top.mode) == ("root", group, dmode)
    assert not HOST.file(os.path.join(m["path"], ".eagle-fetch")).exists
    assert sorted(top.listdir()) == sorted(set(rel.split("/")[0] for rel in files))


def manifest(variables, name):
    f = HOST.file(os.path.join(variables["sglang_model_state_dir"], "%s.manifest.json" % name))
    assert f.is_file and (f.user, f.mode) == ("root", 0o644)
    return json.loads(f.content_string)


# ------------------------------------------------------------------ fresh fetch, no-op, corruption
@pytest.fixture(scope="module")
def fetched(world):
    """A fresh fetch of test-org/tiny (case "main"): the role installs huggingface_hub, lists the repo (its tree in
    pages of 2), checks the disk, fetches and verifies."""
    world["fast"].reset()
    m = model(world, "main")
    v = settings(world, "main", [m])
    run = play(world, v)
    return {"run": run, "model": m, "vars": v, "stats": world["fast"].stats()}


def test_a_fresh_fetch_puts_every_file_in_place_verified_and_owned_by_root(world, fetched):
    run, m, v = fetched["run"], fetched["model"], fetched["vars"]
    assert run.rc == 0, run
    res = run.result(FETCH)
    assert res["changed"] and res["models"][0]["action"] == "fetched", res
    assert_model_in_place(world, m)
    man = manifest(v, "tiny")
    repo = world["fast"].repos["test-org/tiny"]
    assert man["source"]["commit"] == repo.commit and man["source"]["revision"] == "main"
    assert dict((rel, e["sha256"]) for rel, e in man["files"].items()) == dict(
        (rel, f["sha256"]) for rel, f in repo.files.items())
    # The branch was resolved once; the warning names the hash to pin.
    assert any(repo.commit in w for w in res.get("warnings", [])), res.get("warnings")
    # The tree came in pages (Link headers) and every file once, whole.
    tree = [r for r in fetched["stats"] if "/tree/" in r["path"]]
    assert len(tree) == -(-(len(repo.files)) // 2), tree
    gets = served(world["fast"], stats=fetched["stats"])
    assert gets == dict((os.path.basename(k), [(0, f["size"])]) for k, f in repo.files.items()), gets


def test_the_fetch_prints_progress_lines_with_bytes_rate_and_eta(world):
    """The paced double: the fetch takes about 6 s in steps of 1 s; a line at the first pending step, at every phase
    change (the rate and ETA as soon as half a second of samples is there), and the verdict's."""
    m = model(world, "progress", repo="test-org/paced", name="paced")
    v = settings(world, "progress", [m], sglang_model_hf_endpoint=world["paced_url"])
    run = play(world, v)
    assert run.rc == 0, run
    lines = [ln for ln in run.stderr.splitlines() if ln.startswith("localhost | ")]
    assert lines, run.stderr[-2000:]
    total = "%.1f MB" % (sum(os.path.getsize(p) for p in source_files(world, "paced").values()) / 1e6)
    assert any(ln.startswith("localhost | fetching paced | ") and "/%s, " % total in ln and "/6 files | " in ln
               and " MB/s | " in ln and " elapsed | ETA ~" in ln for ln in lines), lines
    assert lines[-1].startswith("localhost | fetched paced | %s/%s, 6/6 files | " % (total, total)), lines
    assert lines[-1].endswith(" elapsed | done"), lines


def test_a_rerun_with_everything_in_place_changes_nothing_and_asks_the_hub_nothing(world, fetched):
    assert fetched["run"].rc == 0, fetched["run"]
    world["fast"].reset()
    run = play(world, fetched["vars"])
    assert run.rc == 0, run
    assert run.stats["changed"] == 0, run
    assert run.module_calls() == [LOOK], run.module_calls()
    assert world["fast"].stats() == []
    assert_model_in_place(world, fetched["model"])


def test_a_truncated_shard_is_fetched_again_alone(world):
    m = model(world, "truncated")
    v = settings(world, "truncated", [m])
    assert play(world, v).rc == 0
    shard = os.path.join(m["path"], "model-00002-of-00003.safetensors")
    os.truncate(shard, 1000)
    world["fast"].reset()
    run = play(world, v)
    assert run.rc == 0, run
    assert run.result(FETCH)["models"][0]["summary"]["fetched"] == 1
    assert served(world["fast"]) == {"model-00002-of-00003.safetensors": [(0, 4 * MIB)]}
    assert_model_in_place(world, m)


def test_a_shard_corrupted_in_place_is_found_by_its_changed_mtime_and_fetched_again_alone(world):
    m = model(world, "corrupt")
    v = settings(world, "corrupt", [m])
    assert play(world, v).rc == 0
    shard = os.path.join(m["path"], "model-00003-of-00003.safetensors")
    with open(shard, "r+b") as fh:
        fh.seek(123456)
        fh.write(b"\x00\x01\x02")
    world["fast"].reset()
    run = play(world, v)
    assert run.rc == 0, run
    summary = run.result(FETCH)["models"][0]["summary"]
    assert summary["refetched"] == ["model-00003-of-00003.safetensors"] and summary["kept"] == 6, summary
    assert served(world["fast"]) == {"model-00003-of-00003.safetensors": [(0, 4 * MIB)]}
    assert_model_in_place(world, m)


def test_a_corruption_that_hides_its_mtime_is_found_by_a_full_verification_and_only_that_shard_is_fetched(world):
    m = model(world, "hidden")
    v = settings(world, "hidden", [m])
    assert play(world, v).rc == 0
    shard = os.path.join(m["path"], "model-00001-of-00003.safetensors")
    st = os.stat(shard)
    with open(shard, "r+b") as fh:
        fh.seek(4242)
        fh.write(b"\xff")
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))
    world["fast"].reset()
    cheap = play(world, v)
    assert cheap.rc == 0 and cheap.stats["changed"] == 0, cheap  # same size, mtime and inode: the cheap look keeps it
    full = play(world, dict(v, sglang_model_verify="full"))
    assert full.rc == 0, full
    summary = full.result(FETCH)["models"][0]["summary"]
    assert summary["refetched"] == ["model-00001-of-00003.safetensors"] and summary["verified"] == 7, summary
    assert served(world["fast"]) == {"model-00001-of-00003.safetensors": [(0, 4 * MIB)]}
    assert_model_in_place(world, m)
    again = play(world, dict(v, sglang_model_verify="full"))
    assert again.rc == 0 and again.stats["changed"] == 0, again  # hashed again, all right: nothing changed


# ------------------------------------------------------------------ killed halfway
@pytest.fixture
def slow(world):
    """A Hub double of the test's own at 4 MiB/s a response (its request log is this test's alone), serving
    test-org/slow (two shards of 24 MiB: a whole 10 MiB chunk is in a part after 2.5 s, a shard is complete at 6 s)."""
    double = hub_double.Double([hub_double.Repo("test-org/slow", os.path.join(world["src"], "slow"))], rate=4 * MIB)
    server = hub_double.serve(double)
    yield double, "http://127.0.0.1:%d" % server.server_address[1]
    server.shutdown()


def _wait_for(pred, timeout, what, proc=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError("ansible-playbook ended (rc=%s) before %s:\n%s\n%s" % (
                proc.returncode, what, out[-3000:], err[-2000:]))
        time.sleep(0.05)
    raise AssertionError("timed out waiting for %s" % what)


def _part_sizes(m):
    base = os.path.join(m["path"], ".eagle-fetch", "files")
    out = {}
    for rel in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"):
        try:
            out[rel] = os.path.getsize(os.path.join(base, rel))
        except OSError:
            pass
    return out


def _status(v, name):
    try:
        with open(os.path.join(v["sglang_model_state_dir"], "%s.status.json" % name)) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def _end(proc, v, name):
    """The playbook's process group and the fetch program it started (its own session) gone, whatever happened."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    pid = (_status(v, name) or {}).get("pid")
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as fh:
            if b"sglang_hub_fetch.py" in fh.read():
                os.kill(pid, signal.SIGKILL)
    except (OSError, TypeError):
        pass


def test_a_fetch_killed_halfway_resumes_at_its_last_byte_and_fetches_no_complete_file_twice(world, slow):
    double, url = slow
    m = model(world, "killed", repo="test-org/slow", name="slow")
    v = settings(world, "killed", [m], sglang_model_hf_endpoint=url)
    proc = play(world, v, wait=False)
    try:
        # A shard part holds a whole 10 MiB chunk (http_get writes 10 MiB at a time), the small files are in place.
        _wait_for(lambda: any(s >= 10 * MIB for s in _part_sizes(m).values())
                  and os.path.exists(os.path.join(m["path"], "config.json")), 180, "a part of 10 MiB", proc)
        pid = _status(v, "slow")["pid"]
        os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=300)
    finally:
        _end(proc, v, "slow")
    first = Run(subprocess.CompletedProcess(proc.args, proc.returncode, out, err), 0)
    assert first.rc != 0
    msg = " ".join(first.failure_msgs())
    assert "ended without a verdict" in msg and "the next run resumes there" in msg, msg
    parts = _part_sizes(m)
    assert parts and all(0 < s < 24 * MIB for s in parts.values()), parts
    done_before = set(f for f in os.listdir(m["path"]) if not f.startswith("."))
    assert "config.json" in done_before
    before = served(double)
    assert all(len(g) == 1 and g[0][0] == 0 for g in before.values()), before  # each file asked once, whole
    double.reset()

    run = play(world, v)
    assert run.rc == 0, run
    after = served(double)
    # No file that was complete is asked again; each shard with a part resumes at exactly its part's size.
    assert not done_before & set(after), (done_before, after)
    for rel, size in parts.items():
        assert after[rel] == [(size, 24 * MIB - size)], (rel, after)
    assert set(after) <= set(parts) | {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}
    assert run.result(FETCH)["progress"]["resumed_bytes"] == sum(parts.values())
    assert_model_in_place(world, m, src="slow")


def test_a_rerun_after_the_playbook_was_interrupted_attaches_to_the_fetch_still_running(world, slow):
    double, url = slow
    m = model(world, "attach", repo="test-org/slow", name="slow")
    v = settings(world, "attach", [m], sglang_model_hf_endpoint=url)
    proc = play(world, v, wait=False)
    try:
        st = _wait_for(lambda: (_status(v, "slow") or {}).get("pid"), 180, "the fetch program's status", proc)
        os.killpg(proc.pid, signal.SIGKILL)  # the operator's terminal is gone: ansible-playbook and its workers
        proc.wait()
        assert os.path.exists("/proc/%d" % st)  # the fetch goes on on the host
        run = play(world, v)
    finally:
        _end(proc, v, "slow")
    assert run.rc == 0, run
    assert _status(v, "slow")["pid"] == st  # the same program finished it: nothing started twice
    got = served(double)
    assert all(len(g) == 1 and g[0][0] == 0 for g in got.values()), got
    assert_model_in_place(world, m, src="slow")


# ------------------------------------------------------------------ refusals before any byte
def _nothing_made(m, v):
    assert not HOST.file(m["path"]).exists, m["path"]
    # Nothing of the model: no manifest, job, status or log. The role installed the fetch program (tasks/program.yml,
    # its default place <state_dir>/fetch-program) before the module listed the source with it; nothing else is there.
    state = v["sglang_model_state_dir"]
    assert not os.path.exists(state) or os.listdir(state) == ["fetch-program"], os.listdir(state)


def test_too_little_disk_space_fails_with_the_numbers_before_any_byte_and_changes_nothing(world):
    world["fast"].reset()
    m = model(world, "disk")
    v = settings(world, "disk", [m], sglang_model_disk_margin_mib=1 << 40)
    run = play(world, v)
    assert run.rc != 0
    msg = " ".join(run.failure_msgs())
    assert re.search(r"not enough disk space for tiny: 0\.01 GiB still to fetch \(%d bytes\) \+ the margin "
                     r"1073741824\.00 GiB = 1073741824\.01 GiB, but \S+ has [0-9.]+ GiB free \(\d+ bytes\)" % sum(
                         f["size"] for f in world["fast"].repos["test-org/tiny"].files.values()), msg), msg
    assert "free" in msg and "Nothing was fetched or changed" in msg, msg
    _nothing_made(m, v)
    assert not served(world["fast"])


def test_a_revision_the_repo_does_not_have_fails_before_any_byte(world):
    m = model(world, "badrev", revision="0123456789abcdef0123456789abcdef01234567")
    v = settings(world, "badrev", [m])
    run = play(world, v)
    assert run.rc != 0
    msg = " ".join(run.failure_msgs())
    assert "revision 0123456789abcdef0123456789abcdef01234567 not found in test-org/tiny" in msg, msg
    _nothing_made(m, v)


def test_a_gated_repo_without_a_token_fails_saying_so_and_with_the_token_the_secret_goes_nowhere(world):
    m = model(world, "gated", repo="test-org/gated", name="gated")
    v = settings(world, "gated", [m])
    run = play(world, v)
    assert run.rc != 0
    msg = " ".join(run.failure_msgs())
    assert "test-org/gated is a gated repo and no token was given" in msg and "Ansible Vault" in msg, msg
    _nothing_made(m, v)
    ok = play(world, dict(v, sglang_model_hf_token=TOKEN), "-v")
    assert ok.rc == 0, ok
    assert_model_in_place(world, m)
    assert TOKEN not in ok.stdout and TOKEN not in ok.stderr
    for root in (v["sglang_model_state_dir"], m["path"]):
        for d, _, files in os.walk(root):
            for f in files:
                with open(os.path.join(d, f), "rb") as fh:
                    assert TOKEN.encode() not in fh.read(), os.path.join(d, f)


# ------------------------------------------------------------------ seeds
def test_a_seed_elsewhere_is_copied_and_checked_against_the_hubs_checksums_without_fetching_a_byte(world):
    world["fast"].reset()
    m = model(world, "seeded", seed=os.path.join(world["src"], "tiny"))
    v = settings(world, "seeded", [m])
    run = play(world, v)
    assert run.rc == 0, run
    assert run.result(FETCH)["models"][0]["action"] == "fetched"
    assert not served(world["fast"]) and not served(world["fast"], "HEAD")  # listed from the Hub, copied from the seed
    assert_model_in_place(world, m)


def test_a_seed_where_the_server_reads_it_is_checked_in_place_and_never_written(world):
    seed = os.path.join(world["prefix"], "inplace", "models", "tiny")
    shutil.copytree(os.path.join(world["src"], "tiny"), seed)
    before = dict((f, os.lstat(os.path.join(seed, f))) for f in os.listdir(seed))
    m = {"name": "tiny", "seed": seed, "path": seed}
    v = settings(world, "inplace", [m])
    run = play(world, v)
    assert run.rc == 0, run
    assert run.result(FETCH)["models"][0]["action"] == "verified"
    after = dict((f, os.lstat(os.path.join(seed, f))) for f in os.listdir(seed))
    assert sorted(before) == sorted(after)
    for f, st in before.items():
        a = after[f]
        assert (a.st_ino, a.st_mtime_ns, a.st_mode, a.st_uid, a.st_gid) == (
            st.st_ino, st.st_mtime_ns, st.st_mode, st.st_uid, st.st_gid), f
    assert set(manifest(v, "tiny")["files"]) == set(before)
    again = play(world, v)
    assert again.rc == 0 and again.stats["changed"] == 0 and again.module_calls() == [LOOK], again


def test_check_mode_on_a_fresh_host_reports_the_fetch_and_touches_nothing(world):
    m = model(world, "check")
    v = settings(world, "check", [m])
    run = play(world, v, "--check")
    assert run.rc == 0, run
    assert run.result(FETCH)["models"][0]["action"] == "would_fetch"
    _nothing_made(m, v)

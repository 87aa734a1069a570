"""sglang_progress: operator words, the ETA drawn from the last successful load, the progress line, and the load
history with the run state's trust rules (a tmp run dir; nothing is spawned)."""
from __future__ import annotations

import json
import os
import stat

import pytest

from ansible.module_utils import sglang_progress as sp
from ansible.module_utils.sglang_proc import UntrustedState


def _phases(*pairs):
    return [{"phase": p, "at": at} for p, at in pairs]


# A load of 600 s: starting 20, weights 400 (64 shards), KV cache 30, CUDA graphs 130, warm-up 20.
LAST = sp.make_record(3, 600.0, _phases(("launching", 0), ("loading_weights", 20), ("kv_cache", 420),
                                        ("cuda_graph", 450), ("warmup", 580), ("ready", 600)), 64, finished_at=1.0e9)
UPTO_WEIGHTS = _phases(("launching", 0), ("loading_weights", 20))
UPTO_GRAPHS = UPTO_WEIGHTS + _phases(("kv_cache", 420), ("cuda_graph", 450))


@pytest.mark.parametrize("phase, shards, words", [
    ("launching", None, "starting"),
    ("loading_weights", None, "loading weights"),
    ("loading_weights", [41, 64], "loading weights 41/64 shards"),
    ("loading_weights", (0, 64), "loading weights 0/64 shards"),
    ("loading_weights", [70, 64], "loading weights 64/64 shards"),
    ("loading_weights", [1, 0], "loading weights"),
    ("loading_weights", ["1", "2"], "loading weights"),
    ("kv_cache", [64, 64], "allocating the KV cache"),
    ("cuda_graph", None, "capturing CUDA graphs"),
    ("warmup", None, "warming up"),
    ("ready", [64, 64], "up, waiting for a generation to answer"),  # the log's ready line is no verdict
    ("compiling_kernels", None, "compiling kernels"),
    (None, None, "starting"),
])
def test_status_text(phase, shards, words):
    assert sp.status_text(phase, shards) == words


def test_status_text_follows_the_verdict_not_the_log():
    assert sp.status_text("ready", None, "ready", 123) == "serving (ready 2m03s after the launch)"
    assert sp.status_text("ready", None, "python_exception") == "failed: python_exception"
    assert sp.status_text("loading_weights", [3, 8], "stopped") == "stopped"


@pytest.mark.parametrize("seconds, text", [
    (0, "0s"), (None, "0s"), (-5, "0s"), (42.4, "42s"), (59.6, "1m00s"), (252, "4m12s"), (598, "9m58s"),
    (3599, "59m59s"), (3600, "1h00m"), (3780, "1h03m"),
])
def test_duration_text(seconds, text):
    assert sp.duration_text(seconds) == text


@pytest.mark.parametrize("progress, line", [
    ({"phase": "loading_weights", "shards": [41, 64], "elapsed": 252, "eta": 170, "last_load": 598},
     "blackwell-01 | loading weights 41/64 shards | 4m12s elapsed | ETA ~2m50s (last load 9m58s)"),
    ({"phase": "loading_weights", "shards": [41, 64], "elapsed": 252, "eta": None, "last_load": None},
     "blackwell-01 | loading weights 41/64 shards | 4m12s elapsed | no ETA yet (first load)"),
    ({"phase": "warmup", "status": "warming up", "elapsed": 590, "eta": 10, "last_load": 598},
     "blackwell-01 | warming up | 9m50s elapsed | ETA ~10s (last load 9m58s)"),
    ({"phase": "ready", "verdict": "ready", "elapsed": 581, "eta": 0, "last_load": 598},
     "blackwell-01 | serving | 9m41s elapsed | done (last load 9m58s)"),
    ({"phase": "ready", "verdict": "ready", "elapsed": 581, "eta": 0, "last_load": None},
     "blackwell-01 | serving | 9m41s elapsed | done"),
    # the H200 incident: the log printed its ready line, then the first decode crashed. Never "done" before the
    # verdict, and a failure is a failure.
    ({"phase": "ready", "elapsed": 53, "eta": 0, "last_load": None},
     "blackwell-01 | up, waiting for a generation to answer | 53s elapsed | no ETA yet (first load)"),
    ({"phase": "ready", "verdict": "python_exception", "elapsed": 64, "eta": 0, "last_load": 120},
     "blackwell-01 | failed: python_exception | 1m04s elapsed"),
    ({"phase": "loading_weights", "verdict": "stopped", "elapsed": 64, "eta": 30, "last_load": 120},
     "blackwell-01 | stopped | 1m04s elapsed"),
    ({"phase": "launching", "elapsed": 3, "eta": None, "last_load": 598},
     "blackwell-01 | starting | 3s elapsed | no ETA (last load 9m58s)"),
    ({}, "blackwell-01 | starting | 0s elapsed | no ETA yet (first load)"),
])
def test_progress_line(progress, line):
    assert sp.progress_line("blackwell-01", progress) == line


def test_phase_durations_of_a_record():
    assert sp.phase_durations(LAST) == [("launching", 20.0), ("loading_weights", 400.0), ("kv_cache", 30.0),
                                        ("cuda_graph", 130.0), ("warmup", 20.0)]
    # no "ready" entry: the last phase lasts until the total; a first phase after 0 gets a "launching" before it
    assert sp.phase_durations({"total": 100.0, "phases": _phases(("loading_weights", 10), ("warmup", 90))}) == [
        ("launching", 10.0), ("loading_weights", 80.0), ("warmup", 10.0)]
    assert sp.phase_durations({"total": 50.0, "phases": []}) == [("launching", 50.0)]
    for bad in (None, {}, {"total": 0, "phases": []}, {"total": "600", "phases": []}, {"total": float("nan")}, [1]):
        assert sp.phase_durations(bad) is None


@pytest.mark.parametrize("last, phases, elapsed, shards, expected", [
    # no history: no ETA
    (None, UPTO_WEIGHTS, 100, [13, 64], None),
    ({"total": 0, "phases": []}, UPTO_WEIGHTS, 100, [13, 64], None),
    # at launch: the whole last load
    (LAST, [], 0, None, 600.0),
    (LAST, _phases(("launching", 0)), 0, None, 600.0),
    (LAST, _phases(("launching", 0)), 5, None, 595.0),
    # weights, no count yet: the phase's last duration less its time so far, plus the phases after it
    (LAST, UPTO_WEIGHTS, 20, None, 580.0),
    (LAST, UPTO_WEIGHTS, 120, None, 480.0),
    # weights at the last load's own pace: exactly the truth
    (LAST, UPTO_WEIGHTS, 20 + 400 * 16 / 64, [16, 64], 600 - (20 + 100.0)),
    (LAST, UPTO_WEIGHTS, 20 + 400 * 48 / 64, [48, 64], 600 - (20 + 300.0)),
    # weights at 0 shards: the history alone
    (LAST, UPTO_WEIGHTS, 30, [0, 64], 580.0),
    # weights twice as slow as last time at half the shards: between history (200) and pace (400), plus 180
    (LAST, UPTO_WEIGHTS, 20 + 400, [32, 64], 0.5 * 200 + 0.5 * 400 + 180),
    # all shards in, the phase not ended: only the later phases remain
    (LAST, UPTO_WEIGHTS, 450, [64, 64], 180.0),
    # a phase that already ran longer than last time: never negative, the later phases remain
    (LAST, UPTO_GRAPHS, 450 + 500, None, 20.0),
    (LAST, UPTO_GRAPHS + _phases(("warmup", 960)), 2000, None, 0.0),
    # a phase the last load did not go through (no CUDA graphs then): it counts nothing, warm-up remains
    (sp.make_record(1, 450.0, _phases(("launching", 0), ("loading_weights", 20), ("kv_cache", 420),
                                      ("warmup", 440), ("ready", 450))), UPTO_GRAPHS, 460, None, 10.0),
    # a phase of the history this load skips is not counted once the load is past it
    (LAST, UPTO_WEIGHTS + _phases(("kv_cache", 420), ("warmup", 450)), 455, None, 15.0),
    # a phase name nobody knows and the history lacks: the last total less the time elapsed, floored at 0
    (LAST, UPTO_WEIGHTS + _phases(("compiling", 300)), 310, None, 290.0),
    (LAST, UPTO_WEIGHTS + _phases(("compiling", 300)), 900, None, 0.0),
    # an unknown name the history has: placed by the history's order
    (sp.make_record(1, 100.0, _phases(("launching", 0), ("compiling", 10), ("warmup", 90))),
     _phases(("launching", 0), ("compiling", 10)), 50, None, 50.0),
    # ready: nothing left
    (LAST, UPTO_GRAPHS + _phases(("warmup", 580), ("ready", 590)), 590, None, 0.0),
    # malformed input does not break it
    (LAST, [{"phase": 3}, "x", {"phase": "loading_weights", "at": "20"}], "soon", ["a", 1], 600.0),
])
def test_eta(last, phases, elapsed, shards, expected):
    got = sp.eta(last, phases, elapsed, shards)
    if expected is None:
        assert got is None
    else:
        assert got == pytest.approx(expected, abs=1e-6)


def test_eta_is_never_negative_nor_above_a_sane_bound():
    for phases in (UPTO_WEIGHTS, UPTO_GRAPHS, UPTO_GRAPHS + _phases(("warmup", 580))):
        for elapsed in range(0, 3000, 37):
            for shards in (None, [0, 64], [1, 64], [63, 64], [64, 64]):
                got = sp.eta(LAST, phases, elapsed, shards)
                assert got >= 0.0
                # at most the pace of this load's own first shard, extrapolated, plus the rest of the history
                assert got <= max(600.0, elapsed * 64) + 600.0


def _timeline(starting, weights, kv, graphs, warmup, shards=64):
    """A load's phases (s since launch), its total, and the shard count at any second (linear in the phase)."""
    marks = [("launching", 0.0)]
    t = starting
    for name, dur in (("loading_weights", weights), ("kv_cache", kv), ("cuda_graph", graphs), ("warmup", warmup)):
        marks.append((name, t))
        t += dur
    marks.append(("ready", t))

    def at(elapsed):
        seen = [(p, a) for p, a in marks if a <= elapsed]
        cur, began = seen[-1]
        count = None
        if cur == "loading_weights":
            count = [min(shards, int(shards * (elapsed - began) / weights)), shards]
        return _phases(*seen), count
    return marks, t, at


@pytest.mark.parametrize("second", [
    (30, 180, 5, 12, 3),   # the same load again
    (33, 198, 5.5, 13, 3),  # 10 % slower everywhere
    (27, 162, 4.5, 11, 3),  # 10 % faster everywhere
    (25, 205, 4, 10, 2),   # slower disk, faster rest
])
def test_eta_of_a_second_load_is_within_20_percent(second):
    """The claim of issue 14: on a second load the ETA is within 20 % of the time really left, from early on."""
    marks, total, _ = _timeline(30, 180, 5, 12, 3)
    first = sp.make_record(1, total, _phases(*marks), 64)
    _, total2, at = _timeline(*second)
    for frac in (0.05, 0.1, 0.25, 0.5, 0.75, 0.85):
        elapsed = frac * total2
        phases, shards = at(elapsed)
        truth = total2 - elapsed
        got = sp.eta(first, phases, elapsed, shards)
        assert abs(got - truth) <= 0.2 * truth, (frac, phases[-1], shards, got, truth)


# ------------------------------------------------------------------ history
@pytest.fixture
def run_dir(tmp_path):
    d = tmp_path / "run"
    d.mkdir(mode=0o755)
    os.chmod(d, 0o755)
    return str(d)


def _rec(total, attempt=1):
    return sp.make_record(attempt, total, _phases(("launching", 0), ("loading_weights", 1), ("ready", total)), [4, 4])


def test_history_round_trip_keeps_the_last_ten(run_dir):
    assert sp.last_load(run_dir, "emu") is None
    assert sp.read_loads(run_dir, "emu") == []
    for i in range(1, 13):
        sp.record_load(run_dir, "emu", _rec(10.0 + i, attempt=i))
    loads = sp.read_loads(run_dir, "emu")
    assert [r["attempt"] for r in loads] == list(range(3, 13))
    assert sp.last_load(run_dir, "emu")["total"] == 22.0 and sp.last_load(run_dir, "emu")["shards"] == 4
    path = os.path.join(run_dir, "emu.loads.json")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    with open(path) as fh:
        assert json.load(fh)["version"] == 1
    assert sorted(os.listdir(run_dir)) == ["emu.loads.json"]  # no temp file left
    assert sp.last_load(run_dir, "other") is None


def test_history_with_bad_contents_reads_as_empty_or_skips_bad_records(run_dir):
    path = os.path.join(run_dir, "emu.loads.json")
    for text in ("", "{", "[]", '{"loads": 3}'):
        with open(path, "w") as fh:
            fh.write(text)
        assert sp.read_loads(run_dir, "emu") == [] and sp.last_load(run_dir, "emu") is None
    with open(path, "w") as fh:
        json.dump({"version": 1, "loads": [_rec(5.0), {"total": -1}, "x", {"phases": []}]}, fh)
    assert [r["total"] for r in sp.read_loads(run_dir, "emu")] == [5.0]
    sp.record_load(run_dir, "emu", _rec(6.0))
    assert [r["total"] for r in sp.read_loads(run_dir, "emu")] == [5.0, 6.0]


def test_record_load_refuses_bad_names_and_records(run_dir):
    for name in ("../x", "a/b", "", ".hidden"):
        with pytest.raises(ValueError):
            sp.record_load(run_dir, name, _rec(5.0))
        with pytest.raises(ValueError):
            sp.read_loads(run_dir, name)
        assert sp.last_load(run_dir, name) is None
    for bad in ({"total": 0, "phases": []}, {}, None):
        with pytest.raises(ValueError):
            sp.record_load(run_dir, "emu", bad)
    assert os.listdir(run_dir) == []


def _write(run_dir, total=5.0):
    sp.record_load(run_dir, "emu", _rec(total))
    return os.path.join(run_dir, "emu.loads.json")


@pytest.mark.parametrize("spoil, needle", [
    (lambda p, d: os.chmod(p, 0o664), "writable by its group or by others"),
    (lambda p, d: os.chmod(p, 0o646), "writable by its group or by others"),
    (lambda p, d: os.chown(p, 65534, 65534), "owned by uid 65534"),
    (lambda p, d: os.chmod(d, 0o775), "writable by its group or by others"),
    (lambda p, d: os.chown(d, 65534, 65534), "owned by uid 65534"),
])
def test_a_history_someone_else_could_write_is_not_used(run_dir, spoil, needle):
    path = _write(run_dir)
    assert sp.last_load(run_dir, "emu") is not None
    spoil(path, run_dir)
    assert sp.last_load(run_dir, "emu") is None
    with pytest.raises(UntrustedState) as e:
        sp.read_loads(run_dir, "emu")
    assert needle in str(e.value)


def test_a_symlinked_history_is_never_read_nor_written_through(run_dir, tmp_path):
    elsewhere = tmp_path / "forged.json"
    elsewhere.write_text(json.dumps({"version": 1, "loads": [_rec(1.0)]}))
    os.symlink(str(elsewhere), os.path.join(run_dir, "emu.loads.json"))
    assert sp.last_load(run_dir, "emu") is None
    with pytest.raises(UntrustedState) as e:
        sp.read_loads(run_dir, "emu")
    assert "is a symlink" in str(e.value)
    # writing replaces the link itself (a fresh history), the link's target is untouched
    sp.record_load(run_dir, "emu", _rec(7.0))
    assert not os.path.islink(os.path.join(run_dir, "emu.loads.json"))
    assert [r["total"] for r in sp.read_loads(run_dir, "emu")] == [7.0]
    assert json.loads(elsewhere.read_text())["loads"][0]["total"] == 1.0


def test_a_group_writable_history_is_replaced_not_merged(run_dir):
    path = _write(run_dir, 5.0)
    os.chmod(path, 0o666)
    sp.record_load(run_dir, "emu", _rec(8.0))
    assert [r["total"] for r in sp.read_loads(run_dir, "emu")] == [8.0]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644


def test_a_stale_temp_file_or_a_symlinked_one_is_not_followed(run_dir, tmp_path):
    target = tmp_path / "victim"
    target.write_text("keep")
    os.symlink(str(target), os.path.join(run_dir, "emu.loads.json.tmp"))
    sp.record_load(run_dir, "emu", _rec(9.0))
    assert target.read_text() == "keep"
    assert [r["total"] for r in sp.read_loads(run_dir, "emu")] == [9.0]


@pytest.mark.parametrize("spoil", [
    lambda d: os.chmod(d, 0o777),
    lambda d: os.chown(d, 65534, 65534),
])
def test_record_load_refuses_an_untrusted_run_dir(run_dir, spoil):
    spoil(run_dir)
    with pytest.raises(UntrustedState):
        sp.record_load(run_dir, "emu", _rec(5.0))
    assert os.listdir(run_dir) == []


def test_run_dir_reached_through_a_symlink_is_refused(run_dir, tmp_path):
    _write(run_dir)
    link = str(tmp_path / "link")
    os.symlink(run_dir, link)
    assert sp.last_load(link, "emu") is None
    with pytest.raises(UntrustedState):
        sp.record_load(link, "emu", _rec(5.0))
    assert sp.last_load(str(tmp_path / "missing"), "emu") is None


def test_make_record_normalises():
    rec = sp.make_record(2, 12, _phases(("launching", 0), ("loading_weights", 3.14159), ("ready", 1)), [3, 8],
                         finished_at=5)
    assert rec == {"attempt": 2, "finished_at": 5.0, "total": 12.0, "shards": 8,
                   "phases": [{"phase": "launching", "at": 0.0}, {"phase": "loading_weights", "at": 3.142},
                              {"phase": "ready", "at": 3.142}]}
    assert sp.make_record(True, 1, [], shards=0)["attempt"] is None
    assert sp.make_record(1, 1, [], shards=0)["shards"] is None
    assert sp.make_record(1, 1, [], shards=16)["shards"] == 16


# ------------------------------------------------------------------ what reaches the operator's terminal
@pytest.mark.parametrize("text, shown", [
    ("plain ascii line", "plain ascii line"),
    ("\x1b[2J\x1b[H", "\\x1b[2J\\x1b[H"),  # clear screen, cursor home
    ("\x1b]0;owned\x07", "\\x1b]0;owned\\x07"),  # window title, ended by BEL
    ("ok\rPLAY RECAP", "ok\\x0dPLAY RECAP"),  # carriage return: overwrite the line
    ("ab\x08\x08xy\x7f", "ab\\x08\\x08xy\\x7f"),  # backspaces, DEL
    ("a\x00b\tc\nd", "a\\x00b\\x09c\\x0ad"),  # NUL, tab, newline: C0 all
    ("\u009b31m\u0085", "\\x9b31m\\x85"),  # C1: CSI, NEL
    ("naïve — 日本語 😀 ä", "naïve — 日本語 😀 ä"),  # printable Unicode stays
    ("\\x1b stays \\x1b", "\\x1b stays \\x1b"),  # already escaped: idempotent
])
def test_operator_text_escapes_every_control_character(text, shown):
    assert sp.operator_text(text) == shown
    assert sp.operator_text(shown) == shown


def test_operator_text_escapes_a_result_item_by_item():
    result = {"msg": "x\x1b[2J", "traceback": ["a\rb", "c"], "log_crash": {"line": "\x07", "lineno": 3},
              "pid": 12, "failed": True, "phases": ("\x1b",), "none": None}
    assert sp.operator_text(result) == {"msg": "x\\x1b[2J", "traceback": ["a\\x0db", "c"],
                                        "log_crash": {"line": "\\x07", "lineno": 3}, "pid": 12, "failed": True,
                                        "phases": ["\\x1b"], "none": None}


def test_progress_line_escapes_control_characters():
    line = sp.progress_line("h\x1b[2J", {"phase": "warmup", "status": "warming\rPLAY RECAP", "elapsed": 5})
    assert line == "h\\x1b[2J | warming\\x0dPLAY RECAP | 5s elapsed | no ETA yet (first load)"

"""The integration tests' conftest names real files: a file in ALONE that no longer exists would silently lose its
place among the timed tests, and a renamed long file would quietly start last again (tests/integration/conftest.py)."""
import importlib.util
import os

HERE = os.path.dirname(os.path.abspath(__file__))
INTEGRATION = os.path.join(os.path.dirname(HERE), "integration")


def _conftest():
    spec = importlib.util.spec_from_file_location("integration_conftest", os.path.join(INTEGRATION, "conftest.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_file_the_conftest_names_exists_once_and_none_is_both_alone_and_ordered():
    conftest = _conftest()
    files = set(os.listdir(INTEGRATION))
    assert sorted(set(conftest.ALONE) - files) == []
    assert sorted(set(conftest.LONGEST_FIRST) - files) == []
    assert len(set(conftest.LONGEST_FIRST)) == len(conftest.LONGEST_FIRST)
    assert sorted(set(conftest.ALONE) & set(conftest.LONGEST_FIRST)) == []


class _Item:
    def __init__(self, path):
        self.fspath = path
        self.marks = []

    def add_marker(self, mark):
        self.marks.append(mark)


def test_the_longest_files_come_first_and_each_file_keeps_its_order():
    conftest = _conftest()
    names = ["test_a.py", conftest.LONGEST_FIRST[1], "test_b.py", conftest.LONGEST_FIRST[0], sorted(conftest.ALONE)[0]]
    items = [_Item(os.path.join(INTEGRATION, name)) for name in names for _ in range(2)]
    order = [id(i) for i in items]
    conftest.pytest_collection_modifyitems(None, items)
    got = [os.path.basename(str(i.fspath)) for i in items]
    assert got[:4] == [conftest.LONGEST_FIRST[0]] * 2 + [conftest.LONGEST_FIRST[1]] * 2
    assert got[4:] == ["test_a.py"] * 2 + ["test_b.py"] * 2 + [sorted(conftest.ALONE)[0]] * 2
    # stable within a file
    for name in set(got):
        mine = [id(i) for i in items if os.path.basename(str(i.fspath)) == name]
        assert mine == [x for x in order if x in mine]
    assert [len(i.marks) for i in items if os.path.basename(str(i.fspath)) in conftest.ALONE] == [1, 1]

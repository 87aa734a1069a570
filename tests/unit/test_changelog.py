"""The change log (antsibull-changelog: changelogs/changelog.yaml, fragments in changelogs/fragments/, CHANGELOG.md
generated from them) and the version a user pins (collection/galaxy.yml) agree."""

import os
import re

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHANGES = os.path.join(ROOT, "changelogs")


def load(path):
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def sections():
    return {name for name, _ in load(os.path.join(CHANGES, "config.yaml"))["sections"]} | {"release_summary", "trivial"}


def versions():
    return sorted(load(os.path.join(CHANGES, "changelog.yaml"))["releases"],
                  key=lambda v: tuple(int(p) for p in v.split(".")))


def fragments():
    """The fragments waiting for a release (the folder holds only .keep after one)."""
    folder = os.path.join(CHANGES, "fragments")
    return sorted(f for f in os.listdir(folder) if f.endswith((".yml", ".yaml")))


def test_the_collection_version_is_a_release_or_the_next_one():
    """galaxy.yml's version is the newest release, or the one after it while fragments wait for their release."""
    version = load(os.path.join(ROOT, "collection", "galaxy.yml"))["version"]
    newest = versions()[-1]
    pending = fragments()
    if pending:
        assert tuple(map(int, version.split("."))) > tuple(map(int, newest.split("."))), (version, newest, pending)
    else:
        assert version == newest, (version, newest)


def test_every_release_is_in_the_generated_changelog():
    with open(os.path.join(ROOT, "CHANGELOG.md"), encoding="utf-8") as f:
        text = f.read()
    for version in versions():
        assert re.search(r"^## v%s$" % re.escape(version.replace(".", "\\.")), text, re.M), version


def test_every_fragment_names_known_sections_with_text():
    folder = os.path.join(CHANGES, "fragments")
    known = sections()
    for name in fragments():
        data = load(os.path.join(folder, name))
        assert isinstance(data, dict) and data, name
        for section, entries in data.items():
            assert section in known, (name, section)
            entries = [entries] if isinstance(entries, str) else entries
            assert entries and all(isinstance(e, str) and e.strip() for e in entries), (name, section)

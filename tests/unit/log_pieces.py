"""Feed a log to the classifier the way a live log arrives: in random pieces (test helper)."""
from __future__ import annotations

import random

from ansible.module_utils.sglang_log import LogClassifier


def fed_in_pieces(data, seed, max_step):
    """A LogClassifier fed ``data`` (bytes) in pieces of 1..max_step bytes drawn from ``seed``; not finalized."""
    rng = random.Random(seed)
    clf = LogClassifier()
    pos = 0
    while pos < len(data):
        step = rng.randint(1, max_step)
        clf.feed(data[pos:pos + step])
        pos += step
    return clf

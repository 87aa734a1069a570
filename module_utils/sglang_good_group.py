# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The group of a multi-node server rolls back together, or not at all (pure, stdlib only).

Every node of a group records its good deployment with the group's generation (the role's
``_sglang_server_good_group``, computed on the controller: the inventory group's name and a digest of every node's
fingerprint in rank order), so that the nodes of one good generation carry the same id. After a failed start of
the group each node reports its candidates (``sglang_good_record.candidates``: each good deployment other than the
one that failed, its group id, and whether it is intact); :func:`choose_group` picks the newest group id that every
node holds intact, or says, naming the node, why none can be.
"""

from __future__ import annotations


def _node_name(i, host):
    return "node %s (rank %d)" % (host or "?", i)


def choose_group(nodes, candidates, failed_group=None):
    """``nodes``: the group's hosts in rank order; ``candidates``: in the same order, each node's reported
    candidates (``[{"group", "intact", "why_not", ...}]``, newest first) or anything else (the node did not report);
    ``failed_group``: the generation that failed (never chosen: a node whose own deployment did not change is in it
    too). Returns ``(group id, None)`` for the newest generation (rank 0's order) that every node holds intact, else
    ``(None, why)``, the why naming a node."""
    if not nodes:
        return None, "no node of the group reported its good deployments"
    candidates = list(candidates or [])
    reported = []
    for i, host in enumerate(nodes):
        cands = candidates[i] if i < len(candidates) else None
        if not isinstance(cands, list):
            return None, "%s: did not report its good deployments (it failed or was left out before the rollback)" % (
                _node_name(i, host))
        reported.append([c for c in cands if isinstance(c, dict)])
    ids = []  # the generations in rank 0's order (newest first)
    for c in reported[0]:
        if c.get("group") and c["group"] not in ids and c["group"] != failed_group:
            ids.append(c["group"])
    if not ids:
        return None, "%s: %s" % (_node_name(0, nodes[0]), _none_why(reported[0], failed_group))
    first_why = None
    for gid in ids:
        why = None
        for i, cands in enumerate(reported):
            mine = [c for c in cands if c.get("group") == gid]
            if not mine:
                why = "%s: holds no good deployment of generation %s" % (_node_name(i, nodes[i]), gid)
            elif not any(c.get("intact") for c in mine):
                why = "%s: its good deployment of generation %s is not intact: %s" % (
                    _node_name(i, nodes[i]), gid, mine[0].get("why_not") or "not intact")
            if why:
                break
        if why is None:
            return gid, None
        first_why = first_why or why
    return None, first_why


def _none_why(cands, failed_group):
    if not cands:
        return "no good deployment of the group is recorded other than the one that failed"
    if failed_group and any(c.get("group") == failed_group for c in cands):
        return "no good generation of the group is recorded other than the one that failed (%s)" % failed_group
    return "no good deployment recorded as the group's (a group records its generation on every node)"

# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""wait_for_model's reports and the result built from them. Each executor of a run (validate, lock, stop, GPU
release, launch, keep or attach, the verdict, the watch) returns a report: a dict of its findings, under the keys of
the result's schema (sglang_result_schema.py). :func:`build_result` makes the module's result from the reports, in the
order the run made them; nothing else writes a result.

An executor that fails (a WaitError, an OSError) still has findings the failed result reports (how long the lock
was waited for, what was stopped before the GPU memory stayed held): made under :func:`findings`, its report goes
up with the exception, and :func:`reports_of` hands them to the run. Module side only, standard library.
"""

from __future__ import annotations

from contextlib import contextmanager


@contextmanager
def findings():
    """``with findings() as report:`` an executor's report (a dict it fills and returns). When the block raises,
    the report so far goes with the exception (``exc.findings``, the innermost executor's first)."""
    report = {}
    try:
        yield report
    except Exception as exc:
        carried = getattr(exc, "findings", None)
        if carried is None:
            carried = []
            try:
                exc.findings = carried
            except AttributeError:
                raise exc
        carried.append(report)
        raise


def reports_of(exc):
    """The reports a failed executor (and those it called) had made, in the order they were made."""
    return list(reversed(getattr(exc, "findings", None) or []))


def build_result(reports):
    """The module's result from the run's reports, in order: ``changed`` when any report says so; every other key
    as the last report that names it says."""
    result = {"changed": False}
    for report in reports:
        for key, value in report.items():
            if key == "changed":
                result["changed"] = result["changed"] or bool(value)
            else:
                result[key] = value
    return result

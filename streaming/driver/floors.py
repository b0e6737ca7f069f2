"""Counters shown never step back while the process lives: each group's published counters are floors.

A group's counters come from the group stage, which a query restart reloads from the last batch
Spark committed, and Spark then runs the failed batch again. The restart does not re-publish the
reloaded state (see :class:`~streaming.driver.sink.BatchSink`), and a re-run over the same records
gives the same counts. But the re-run reads the offsets topic again: if the log cleaner compacted
records of that range away in between (a rebalance's record superseded, offset commits
overwritten), the re-run counts fewer, and Prometheus would read the drop as a counter reset
(``increase()`` jumps by the whole value). So each counter published for a group is kept, and a
later value below it is shown as the kept one until the group's own count passes it. A group that
leaves ``/metrics`` (deleted, expired) drops its floors: its series start again when it returns.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from streaming.protocol import SUMMARY_COUNTERS, GroupSummary


class CounterFloors:
    """The counters last published per group; :meth:`hold` never lets a group's counter go below them.

    The counters are the ones :class:`~streaming.protocol.GroupSummary` declares
    (:data:`~streaming.protocol.SUMMARY_COUNTERS`): a counter added there has its floor here.
    """

    def __init__(self) -> None:
        self._shown: dict[str, tuple[Any, ...]] = {}  # group -> its counters' values, as SUMMARY_COUNTERS
        # Apart from the rest: a batch of commits alone raises only this (rebuilding the group's floors per
        # commit was a tenth of such a batch's publish).
        self._commits: dict[str, int] = {}

    def hold(self, summary: GroupSummary, commits_total: int) -> tuple[GroupSummary, int]:
        """``summary`` and ``commits_total`` with every counter at least what was last published."""
        before, commits_before = self._shown.get(summary.group), self._commits.get(summary.group)
        if before is not None:
            summary = replace(summary, **{name: _AT_LEAST[kind](getattr(summary, name), floor)
                                          for (name, kind), floor in zip(SUMMARY_COUNTERS, before, strict=True)})
        if commits_before is not None:
            commits_total = max(commits_total, commits_before)
        self._shown[summary.group] = tuple(_kept(getattr(summary, name)) for name, _ in SUMMARY_COUNTERS)
        self._commits[summary.group] = commits_total
        return summary, commits_total

    def hold_commits(self, group: str, commits_total: int) -> int | None:
        """``commits_total`` at least what was last published for ``group``; None if nothing was (a whole
        :meth:`hold` comes first)."""
        before = self._commits.get(group)
        if before is None:
            return None
        if commits_total > before:
            self._commits[group] = commits_total
        return max(commits_total, before)

    def forget(self, group: str) -> None:
        self._shown.pop(group, None)
        self._commits.pop(group, None)


def _kept(value: Any) -> Any:
    """A counter's value as kept: a copy of counts by label (the summary's own dict may be shared)."""
    return dict(value) if isinstance(value, dict) else value


def _at_least(counts: dict[str, int], floor: dict[str, int]) -> dict[str, int]:
    merged = {key: max(counts.get(key, 0), floor.get(key, 0)) for key in counts.keys() | floor.keys()}
    return dict(sorted(merged.items()))


def _histogram_at_least(buckets: tuple[int, ...], floor: tuple[int, ...]) -> tuple[int, ...]:
    """Cumulative bucket counts, each at least the floor's (still cumulative: a max of two such runs)."""
    if not floor:
        return buckets
    if not buckets:
        return floor
    return tuple(max(a, b) for a, b in itertools.zip_longest(buckets, floor, fillvalue=0))


# How each kind of declared counter is held at its floor.
_AT_LEAST: dict[str, Callable[[Any, Any], Any]] = {"total": max, "by_label": _at_least,
                                                   "histogram": _histogram_at_least}

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

The floors also outlive the process (:mod:`streaming.driver.floor_log`): the sink raises them for a
whole batch first (:meth:`CounterFloors.prepare`), has what rose written to disk, and only then
publishes, so a kill at any point leaves on disk at least what ``/metrics`` showed. A rebuild keeps
them too (:meth:`CounterFloors.kept`): the rebuilt fold's counts below a floor show the floor.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from streaming.protocol import SUMMARY_COUNTERS, GroupChange, GroupSummary


@dataclass
class FloorChanges:
    """The floors that rose or went since they were last taken (what a durable copy must write)."""

    shown: dict[str, tuple[Any, ...]] = field(default_factory=dict)  # group -> counters, as SUMMARY_COUNTERS
    commits: dict[str, int] = field(default_factory=dict)
    forgotten: set[str] = field(default_factory=set)

    def __len__(self) -> int:
        return len(self.shown) + len(self.commits) + len(self.forgotten)


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
        # What rose or went since take(): the durable copy writes only these.
        self._changes = FloorChanges()
        # hold()'s answers worked out ahead of publishing by prepare(): group -> (summary, commits, held, commits held)
        self._prepared: dict[str, tuple[GroupSummary, int, GroupSummary, int]] = {}
        self._keeping = False

    def __len__(self) -> int:
        """Groups with floors (a whole hold gives a group both kinds: no union of the keys on every batch)."""
        return max(len(self._shown), len(self._commits))

    def hold(self, summary: GroupSummary, commits_total: int) -> tuple[GroupSummary, int]:
        """``summary`` and ``commits_total`` with every counter at least what was last published."""
        prepared = self._prepared.pop(summary.group, None)
        if prepared is not None and prepared[0] is summary and prepared[1] == commits_total:
            return prepared[2], prepared[3]
        return self._hold(summary, commits_total)

    def _hold(self, summary: GroupSummary, commits_total: int) -> tuple[GroupSummary, int]:
        group = summary.group
        before, commits_before = self._shown.get(group), self._commits.get(group)
        if before is not None:
            summary = replace(summary, **{name: _AT_LEAST[kind](getattr(summary, name), floor)
                                          for (name, kind), floor in zip(SUMMARY_COUNTERS, before, strict=True)})
        if commits_before is not None:
            commits_total = max(commits_total, commits_before)
        kept = tuple(_kept(getattr(summary, name)) for name, _ in SUMMARY_COUNTERS)
        self._shown[group] = kept
        self._commits[group] = commits_total
        if kept != before:
            self._changes.shown[group] = kept
        if commits_total != commits_before:
            self._changes.commits[group] = commits_total
        return summary, commits_total

    def prepare(self, changes: Iterable[GroupChange], removed: Collection[str] = ()) -> None:
        """Raise the floors for a batch's ``changes`` and drop the ``removed`` groups' before any is published,
        so that what rose can be written first (see :meth:`take`); the publisher's :meth:`hold` then finds its
        answer worked out (the same summary object and commit count)."""
        self._prepared.clear()
        for change in changes:
            if change.summary is not None:
                shown, commits = self._hold(change.summary, change.commits_total)
                self._prepared[change.group] = (change.summary, change.commits_total, shown, commits)
            else:
                self.hold_commits(change.group, change.commits_total)
        for group in removed:
            self.forget(group)

    def take(self) -> FloorChanges:
        """What rose or went since the last take."""
        changes, self._changes = self._changes, FloorChanges()
        return changes

    def everything(self) -> FloorChanges:
        """Every floor held now (what a compacted durable copy writes)."""
        return FloorChanges(dict(self._shown), dict(self._commits))

    def load(self, shown: Mapping[str, tuple[Any, ...]], commits: Mapping[str, int]) -> None:
        """Floors read back from disk, before anything is published; each at least what is held already."""
        for group, counters in shown.items():
            before = self._shown.get(group)
            self._shown[group] = counters if before is None else tuple(
                _AT_LEAST[kind](value, floor) for (_, kind), value, floor in zip(SUMMARY_COUNTERS, counters, before,
                                                                                 strict=True))
        for group, total in commits.items():
            self._commits[group] = max(total, self._commits.get(group, total))

    @contextlib.contextmanager
    def kept(self) -> Iterator[None]:
        """:meth:`forget` does nothing inside: a rebuild removes every group's series and its replay shows them
        anew, from their floors."""
        self._keeping = True
        try:
            yield
        finally:
            self._keeping = False

    def hold_commits(self, group: str, commits_total: int) -> int | None:
        """``commits_total`` at least what was last published for ``group``; None if nothing was (a whole
        :meth:`hold` comes first)."""
        before = self._commits.get(group)
        if before is None:
            return None
        if commits_total > before:
            self._commits[group] = commits_total
            self._changes.commits[group] = commits_total
        return max(commits_total, before)

    def forget(self, group: str) -> None:
        if self._keeping:
            return
        self._prepared.pop(group, None)
        had = self._shown.pop(group, None) is not None
        had = self._commits.pop(group, None) is not None or had
        self._changes.shown.pop(group, None)
        self._changes.commits.pop(group, None)
        if had:
            self._changes.forgotten.add(group)


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

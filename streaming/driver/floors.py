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
them too (:meth:`CounterFloors.kept`). After a rebuild (:meth:`CounterFloors.rebuilt`) each group's
counters start again from its floors: at the group's first hold the rebuilt fold's counts F0 are
taken as the floors L, and from then on the group shows L + (F - F0), the floors plus what the
rebuilt fold counted since (a rebase, kept and written like the floors). So the replayed history is
neither a burst (F0 above L) nor a reset (F0 below L), and the group's next rebalance shows at once.
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
    # group -> what its shown counters add to the fold's (as SUMMARY_COUNTERS) and to its commit count
    rebased: dict[str, tuple[tuple[Any, ...], int]] = field(default_factory=dict)
    rebuilt: bool = False  # every group with floors then was to be rebased at its first hold
    pending: set[str] | None = None  # with everything(): the groups still to be rebased

    def __len__(self) -> int:
        return len(self.shown) + len(self.commits) + len(self.forgotten) + len(self.rebased) + self.rebuilt


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
        # Since a rebuild: what each group's shown counters add to the fold's, and the groups not held since.
        self._rebased: dict[str, tuple[tuple[Any, ...], int]] = {}
        self._pending: set[str] = set()

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
        if group in self._pending:
            self._pending.discard(group)
            self._rebase(summary, commits_total, before, commits_before)
        rebased = self._rebased.get(group)
        if rebased is not None:
            summary = replace(summary, **{name: _PLUS[kind](getattr(summary, name), offset)
                                          for (name, kind), offset in zip(SUMMARY_COUNTERS, rebased[0], strict=True)})
            commits_total += rebased[1]
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

    def _rebase(self, summary: GroupSummary, commits_total: int, floor: tuple[Any, ...] | None,
                commits_floor: int | None) -> None:
        """The group's first hold since a rebuild: from now on it shows its floors plus what the fold adds."""
        offsets = tuple(_MINUS[kind](floor[i] if floor is not None else _EMPTY[kind], getattr(summary, name))
                        for i, (name, kind) in enumerate(SUMMARY_COUNTERS))
        rebased = (offsets, (commits_floor or 0) - commits_total)
        self._rebased[summary.group] = rebased
        self._changes.rebased[summary.group] = rebased

    def rebuilt(self) -> None:
        """The group state was set aside and the topic is read again from its beginning: every group with floors
        starts again from them at its first hold (see the module docstring)."""
        if not self._shown and not self._commits:
            return
        self._pending = set(self._shown) | set(self._commits)
        self._rebased.clear()
        self._changes.rebased.clear()
        self._changes.rebuilt = True

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
        return FloorChanges(dict(self._shown), dict(self._commits), rebased=dict(self._rebased),
                            pending=set(self._pending))

    def load(self, shown: Mapping[str, tuple[Any, ...]], commits: Mapping[str, int],
             rebased: Mapping[str, tuple[tuple[Any, ...], int]] | None = None,
             pending: Collection[str] = ()) -> None:
        """Floors read back from disk, before anything is published; each at least what is held already."""
        self._rebased.update(rebased or {})
        self._pending.update(pending)
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
        rebased = self._rebased.get(group)
        if rebased is not None:
            commits_total += rebased[1]
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
        self._pending.discard(group)
        if self._rebased.pop(group, None) is not None:
            self._changes.rebased.pop(group, None)
            had = True
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


def _minus(floor: dict[str, int], counts: dict[str, int]) -> dict[str, int]:
    return {key: floor.get(key, 0) - counts.get(key, 0) for key in sorted(floor.keys() | counts.keys())}


def _plus(counts: dict[str, int], offsets: dict[str, int]) -> dict[str, int]:
    added = {key: counts.get(key, 0) + offsets.get(key, 0) for key in counts.keys() | offsets.keys()}
    return {key: value for key, value in sorted(added.items()) if value or key in counts}


def _histogram_minus(floor: tuple[int, ...], buckets: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(a - b for a, b in itertools.zip_longest(floor, buckets, fillvalue=0))


def _histogram_plus(buckets: tuple[int, ...], offsets: tuple[int, ...]) -> tuple[int, ...]:
    """Still cumulative: floors L plus the fold's buckets F minus those at the rebase F0, and F - F0 is cumulative."""
    if not offsets:
        return buckets
    return tuple(a + b for a, b in itertools.zip_longest(buckets, offsets, fillvalue=0))


_EMPTY: dict[str, Any] = {"total": 0, "by_label": {}, "histogram": ()}
# How a rebase's offsets are taken (floor, fold's counts) and added back (fold's counts, offsets).
_MINUS: dict[str, Callable[[Any, Any], Any]] = {"total": lambda a, b: a - b, "by_label": _minus,
                                                "histogram": _histogram_minus}
_PLUS: dict[str, Callable[[Any, Any], Any]] = {"total": lambda a, b: a + b, "by_label": _plus,
                                               "histogram": _histogram_plus}
# How each kind of declared counter is held at its floor.
_AT_LEAST: dict[str, Callable[[Any, Any], Any]] = {"total": max, "by_label": _at_least,
                                                   "histogram": _histogram_at_least}

"""Each group's live state as the coordinators report it, folded from one poll to the next.

Pure bookkeeping, no I/O: :class:`LiveStates` takes each poll's listing (group -> Kafka's state
name and group type) and keeps, per group, the state, when the monitor first saw the group in
it, and, while the group rebalances, when it was first seen rebalancing. Kafka's state names
are kept as they are (classic: PreparingRebalance, CompletingRebalance, Stable, Empty, Dead;
KIP-848: Assigning, Reconciling, Stable, Empty; streams: NotReady too).

A rebalance is *observed* from the first poll that finds the group in a rebalancing state to
the first poll that finds it Stable or Empty; that span goes into a per-group histogram of
observed rebalance durations. It includes the join phase, which the offsets topic never sees
(its records are written at completed assignments only), and is exact to one poll interval at
each end. A group missing from a listing that every broker answered is forgotten (deleted, or
Dead); a broker that did not answer leaves its groups as they were, ageing (``seen_s``), so the
offsets-topic view takes over when they are too old (:mod:`streaming.live.view`).
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from streaming.protocol import REBALANCE_DURATION_BUCKETS, REBALANCING

SETTLED = frozenset({"Stable", "Empty"})
CLASSIC = "classic"


@dataclass
class LiveGroup:
    """One group as last listed: ``since_s`` when first seen in ``state``, ``seen_s`` when last listed,
    ``rebalancing_since_s`` when first seen rebalancing since it was last settled (None when settled);
    ``members`` is how many members DescribeGroups listed while it rebalanced (None: not described)."""

    state: str
    group_type: str
    since_s: float
    seen_s: float
    rebalancing_since_s: float | None = None
    members: int | None = None


@dataclass
class ObservedDurations:
    """A histogram of observed rebalance durations: counts per bucket of REBALANCE_DURATION_BUCKETS (+Inf last)."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(REBALANCE_DURATION_BUCKETS) + 1))
    total_s: float = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(REBALANCE_DURATION_BUCKETS, seconds)] += 1
        self.total_s += seconds

    def cumulative(self) -> tuple[int, ...]:
        running, out = 0, []
        for count in self.counts:
            running += count
            out.append(running)
        return tuple(out)


class LiveStates:
    """Every listed group's live state (see the module docstring); safe to read from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: dict[str, LiveGroup] = {}
        self._durations: dict[str, ObservedDurations] = {}

    def observe(self, listed: Mapping[str, tuple[str, str]], now_s: float, complete: bool) -> set[str]:
        """Fold one poll's listing (group -> (state, group type)); the groups whose state changed, appeared
        or went. ``complete``: every broker answered, so a group not listed is gone."""
        changed: set[str] = set()
        with self._lock:
            for group, (state, group_type) in listed.items():
                known = self._groups.get(group)
                if known is None:
                    self._groups[group] = LiveGroup(state, group_type, now_s, now_s,
                                                    now_s if state in REBALANCING else None)
                    changed.add(group)
                    continue
                known.seen_s, known.group_type = now_s, group_type
                if known.state == state:
                    continue
                changed.add(group)
                known.state, known.since_s = state, now_s
                if state in REBALANCING:
                    if known.rebalancing_since_s is None:
                        known.rebalancing_since_s = now_s
                else:
                    if known.rebalancing_since_s is not None and state in SETTLED:
                        self._durations.setdefault(group, ObservedDurations()).observe(
                            now_s - known.rebalancing_since_s)
                    known.rebalancing_since_s = None
                    known.members = None
            if complete:
                for group in self._groups.keys() - listed.keys():
                    del self._groups[group]
                    changed.add(group)
        return changed

    def to_describe(self, changed: set[str], limit: int) -> list[str]:
        """Classic groups worth a DescribeGroups: rebalancing, or changed state this poll (at most ``limit``,
        rebalancing the longest first). KIP-848 groups are left out: kafka-python has no
        ConsumerGroupDescribe, and DescribeGroups answers only for classic groups."""
        with self._lock:
            wanted = [(g.rebalancing_since_s if g.rebalancing_since_s is not None else g.since_s, name)
                      for name, g in self._groups.items()
                      if g.group_type in (CLASSIC, "") and (g.state in REBALANCING or name in changed)
                      and g.state != "Dead"]
        return [name for _, name in sorted(wanted)[:limit]]

    def described(self, group: str, members: int) -> None:
        """DescribeGroups' member count for ``group`` (kept only while it rebalances)."""
        with self._lock:
            known = self._groups.get(group)
            if known is not None and known.state in REBALANCING:
                known.members = members

    def get(self, group: str) -> LiveGroup | None:
        with self._lock:
            known = self._groups.get(group)
            return None if known is None else LiveGroup(**vars(known))

    def durations(self, group: str) -> tuple[tuple[int, ...], float]:
        """Cumulative observed-duration counts per bucket (+Inf last) and their sum; ((), 0) when none."""
        with self._lock:
            found = self._durations.get(group)
            return (found.cumulative(), found.total_s) if found else ((), 0.0)

    def forget(self, group: str) -> None:
        with self._lock:
            self._groups.pop(group, None)
            self._durations.pop(group, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._groups)

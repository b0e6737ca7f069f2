"""One state per group on /metrics: the live view and the offsets-topic view reconciled.

Two sources know a group's state. The offsets topic is authoritative for completed
generations (its records are the assignments Kafka stored), but is written only at those
points: a classic group mid-rebalance still shows its last generation there, ``Stable``.
The live view (:mod:`streaming.live.state`) is what the coordinator says now, at most one
poll interval old, but says nothing about generations.

The rule, applied per group whenever either source changes:

1. the **live** state wins while it is fresh (the group was listed within ``stale_after_s``),
   because it is the newer observation;
2. except that the offsets topic wins when it holds a generation or group epoch the live view
   cannot have seen: one whose records are later than the last poll (the rebalance that poll saw
   is over; or every member left after the poll that saw the group Stable). It wins only until
   the next poll: a poll after the generation that still finds the group rebalancing is newer
   than it, and the live state wins again (a rejoin loop, or a new rebalance);
3. otherwise (poller off or failing, group not listed yet) the **offsets-topic** state.

``rebalancing_since`` is the live view's: the first poll that found the group rebalancing since
a poll last found it Stable or Empty. A generation completing in between does not restart it:
polls cannot tell a group that completed a generation and rebalanced again between two polls
from one that never settled (a member rejoining in a loop, an assignor that throws), and for
"stuck in rebalance" both are the same thing, a group that no poll found settled, so the
rebalance keeps its original start (the Stable shown from the offsets topic until the next poll
hides the series for at most one poll interval; GroupRebalanceStuck has no ``for:`` and keeps
firing across it). Only a poll that finds the group Stable or Empty ends it.

So exactly one ``kafka_consumergroup_state`` line exists per group and the two views are never
shown side by side. ``since`` is when the monitor first saw the group in the shown state (for
a Stable group first known from the offsets topic: its last rebalance), kept across a switch
of source that does not change the state. A live state back after an offsets-topic generation
that ended it (the live view still holds the time it first saw that state, before the
generation) is shown since the poll that saw it again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from streaming.live.state import REBALANCING, LiveGroup, LiveStates
from streaming.protocol import GroupSummary


@dataclass(frozen=True)
class Shown:
    """What /metrics shows for one group's state (see the module docstring)."""

    state: str
    since_s: float
    source: str  # "live" or "offsets"
    rebalancing_since_s: float | None
    rebalance_timeout_s: float | None
    members: int | None


@dataclass(frozen=True)
class FromOffsets:
    """The offsets-topic view of a group: its derived state, its generation (or group epoch), when the records
    of that generation were written (the latest record time the job had read when the generation changed; None
    before any) and its rebalance timeout."""

    state: str
    completed_ms: int | None
    rebalance_timeout_ms: int | None
    generation: int | None = None


def choose(offsets: FromOffsets, live: LiveGroup | None, now_s: float, stale_after_s: float) -> str:
    """Which view's state is shown: "live" or "offsets" (rules 1-3 of the module docstring)."""
    if live is None or now_s - live.seen_s > stale_after_s:
        return "offsets"
    if offsets.completed_ms is not None and offsets.completed_ms / 1000 > live.seen_s:
        return "offsets"  # a generation after the last poll: shown until the next poll
    return "live"


Render = Callable[[str, Shown, tuple[tuple[int, ...], float]], None]


class StateView:
    """Reconciles the two views per group and hands the result to ``render(group, shown, durations)``
    (which puts the group's state series into the exporter)."""

    def __init__(self, live: LiveStates, render: Render, stale_after_s: float,
                 clock: Callable[[], float] = time.time) -> None:
        self.live = live
        self._render = render
        self._stale_after_s = stale_after_s
        self._clock = clock
        self._lock = threading.Lock()
        self._offsets: dict[str, FromOffsets] = {}
        self._shown: dict[str, Shown] = {}

    def from_offsets(self, summary: GroupSummary) -> None:
        """The group stage changed ``summary.group``: reconcile and render it (the sink's thread)."""
        with self._lock:
            before = self._offsets.get(summary.group)
            completed = before.completed_ms if before is not None else None
            if before is None or before.generation != summary.generation:
                completed = max(summary.last_rebalance_ms or 0, summary.last_seen_ms) or None
            self._offsets[summary.group] = FromOffsets(summary.state, completed, summary.rebalance_timeout_ms,
                                                       summary.generation)
            self._update(summary.group)

    def refresh(self, groups: Iterable[str]) -> None:
        """The live view changed ``groups`` (the poller's thread); groups not published yet are skipped,
        and so are the groups the job leaves out (--include-groups / --exclude-groups)."""
        with self._lock:
            for group in groups:
                if group in self._offsets:
                    self._update(group)

    def stale(self) -> list[str]:
        """Groups to be reconciled again after a poll although their live state did not change: shown from a
        live observation that has gone stale, or shown from the offsets topic while a poll newer than its
        generation is there (the group still rebalancing at the poll after a generation: its state did not
        change, but the live view wins again)."""
        now = self._clock()
        with self._lock:
            return [g for g, shown in self._shown.items()
                    if choose(self._offsets[g], self.live.get(g), now, self._stale_after_s) != shown.source]

    def forget(self, group: str) -> None:
        with self._lock:
            self._offsets.pop(group, None)
            self._shown.pop(group, None)

    def shown(self, group: str) -> Shown | None:
        with self._lock:
            return self._shown.get(group)

    def _update(self, group: str) -> None:
        now = self._clock()
        offsets = self._offsets[group]
        live = self.live.get(group)
        source = choose(offsets, live, now, self._stale_after_s)
        before = self._shown.get(group)
        timeout_s = offsets.rebalance_timeout_ms / 1000 if offsets.rebalance_timeout_ms else None
        if source == "live" and live is not None:
            state, since = live.state, live.since_s
            rebalancing_since, members = live.rebalancing_since_s, live.members
            if (before is not None and before.state != state and offsets.completed_ms is not None
                    and since < offsets.completed_ms / 1000):
                since = live.seen_s  # seen again after the generation the offsets topic showed ending it
        else:
            state, members = offsets.state, None
            since = offsets.completed_ms / 1000 if state == "Stable" and offsets.completed_ms else now
            rebalancing_since = since if state in REBALANCING else None
        if before is not None and before.state == state:
            since = min(since, before.since_s)
        if rebalancing_since is not None and before is not None and before.rebalancing_since_s is not None:
            rebalancing_since = min(rebalancing_since, before.rebalancing_since_s)  # one rebalance, several states
        shown = Shown(state, since, source, rebalancing_since, timeout_s, members)
        self._shown[group] = shown
        self._render(group, shown, self.live.durations(group))

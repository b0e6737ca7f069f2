"""A health verdict per group: one bounded status and reason over a sliding window.

In the spirit of Burrow's evaluator, over what the job already has: at every lag refresh a
:class:`Sample` of the group's committed offsets and log ends (summed over the partitions that
have a fresh sample), whether any committed offset went back, and when the group last wrote a
commit; beside them the rebalances the offsets topic counted and the state shown (live view).
:func:`evaluate` applies these rules to the samples of the last ``window_s``, first match wins:

==============  ======  ====================================================================
reason          status  rule
==============  ======  ====================================================================
rebalancing     ERR     the group is rebalancing (PreparingRebalance, CompletingRebalance,
                        Assigning, Reconciling) and its committed offsets did not move in
                        the window while records arrived; WARN when they moved
stopped         ERR     no commit at all in the window while records arrived and lag > 0
stalled         ERR     commits in the window, but the committed offsets did not move while
                        lag grew (the consumer commits the same offset again and again)
storm           WARN    ``storm_rebalances`` or more rebalances in the window
rewinding       WARN    a committed offset went back in the window (a reset, a replay)
lagging         WARN    lag > 0 and growing between every two consecutive samples (at least
                        three samples)
ok              OK      none of the above, or fewer than two samples yet
==============  ======  ====================================================================

Both labels are bounded (:data:`STATUSES`, :data:`REASONS`): one series per group.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from streaming.protocol import REBALANCING, TopicPartition

STATUSES = ("OK", "WARN", "ERR")
REASONS = ("ok", "rebalancing", "stopped", "stalled", "storm", "rewinding", "lagging")
DEFAULT_WINDOW_S = 600.0
DEFAULT_STORM_REBALANCES = 3


@dataclass(frozen=True)
class Sample:
    """One lag refresh's view of a group: offsets summed over its sampled partitions."""

    at_s: float
    committed: int
    log_end: int
    rewound: bool
    last_commit_s: float

    @property
    def lag(self) -> int:
        return max(0, self.log_end - self.committed)


def evaluate(samples: Sequence[Sample], rebalances: Sequence[float], state: str, now_s: float,
             window_s: float = DEFAULT_WINDOW_S, storm_rebalances: int = DEFAULT_STORM_REBALANCES) -> tuple[str, str]:
    """(status, reason) of a group from its samples and rebalance times (any age: the window is applied here)."""
    window = [s for s in samples if s.at_s >= now_s - window_s]
    if len(window) < 2:
        return "OK", "ok"
    first, last = window[0], window[-1]
    arriving = last.log_end > first.log_end
    still = last.committed == first.committed
    if state in REBALANCING:
        return ("ERR" if still and arriving else "WARN"), "rebalancing"
    if arriving and last.lag > 0 and now_s - last.last_commit_s > window_s:
        return "ERR", "stopped"
    if still and last.lag > first.lag and last.last_commit_s > first.at_s:
        return "ERR", "stalled"
    if sum(1 for t in rebalances if t >= now_s - window_s) >= storm_rebalances:
        return "WARN", "storm"
    if any(s.rewound for s in window[1:]):
        return "WARN", "rewinding"
    if len(window) >= 3 and last.lag > 0 and all(b.lag > a.lag for a, b in itertools.pairwise(window)):
        return "WARN", "lagging"
    return "OK", "ok"


class HealthWindows:
    """The samples, rebalance times and state of every group, kept for ``window_s``; any thread."""

    def __init__(self, window_s: float = DEFAULT_WINDOW_S) -> None:
        self.window_s = window_s
        self._lock = threading.Lock()
        self._samples: dict[str, deque[Sample]] = {}
        self._previous: dict[str, dict[TopicPartition, int]] = {}
        self._rebalances: dict[str, tuple[int, deque[float] | None]] = {}
        self._states: dict[str, str] = {}

    def record(self, group: str, committed: Mapping[TopicPartition, int], log_ends: Mapping[TopicPartition, int],
               last_commit_s: float, now_s: float) -> None:
        """A lag refresh's committed offsets and log ends of the partitions with a fresh sample."""
        with self._lock:
            previous = self._previous.get(group, {})
            rewound = any(offset < previous.get(tp, offset) for tp, offset in committed.items())
            self._previous[group] = dict(committed)
            common = committed.keys() & log_ends.keys()
            samples = self._samples.setdefault(group, deque())
            if samples and samples[-1].at_s == now_s:
                samples.pop()  # the same refresh rendered again
            samples.append(Sample(now_s, sum(committed[tp] for tp in common), sum(log_ends[tp] for tp in common),
                                  rewound, last_commit_s))
            while samples and samples[0].at_s < now_s - self.window_s:
                samples.popleft()

    def rebalanced(self, group: str, rebalances_total: int, at_s: float) -> None:
        """The offsets topic's rebalance count for ``group``: an increase is a rebalance at ``at_s``."""
        with self._lock:
            known, times = self._rebalances.get(group, (rebalances_total, None))
            added = max(0, min(rebalances_total - known, 100))
            if added:
                times = times if times is not None else deque()
                times.extend([at_s] * added)
            while times and times[0] < at_s - self.window_s:
                times.popleft()
            # No deque for a group without a recent rebalance (most of them): an empty one is 600 bytes.
            self._rebalances[group] = (rebalances_total, times or None)

    def state(self, group: str, state: str) -> None:
        with self._lock:
            self._states[group] = state

    def verdict(self, group: str, now_s: float) -> tuple[str, str]:
        with self._lock:
            samples = list(self._samples.get(group, ()))
            rebalances = list(self._rebalances.get(group, (0, None))[1] or ())
            state = self._states.get(group, "")
        return evaluate(samples, rebalances, state, now_s, self.window_s)

    def forget(self, group: str) -> None:
        with self._lock:
            for kept in (self._samples, self._previous, self._rebalances, self._states):
                kept.pop(group, None)

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
stopped         ERR     records arrived, lag > 0 in every sample of a window sampled without
                        a gap, and the last commit is older than the group's own cadence
                        allows: twice its usual commit interval, at least ``window_s``
                        (three windows while fewer than two commits were seen)
stalled         ERR     the committed offsets did not move while lag grew, lag > 0 in every
                        sample, and at least two commits were written in that time (the
                        consumer commits the same offset again and again)
storm           WARN    ``storm_rebalances`` or more rebalances in the window
rewinding       WARN    a committed offset went back in the window, as the offsets topic
                        ordered the group's commits (never an OffsetFetch laid over them)
lagging         WARN    lag > 0 and growing between every two consecutive samples (at least
                        three samples)
ok              OK      none of the above, or fewer than two samples yet
==============  ======  ====================================================================

The samples judged are those of the last ``window_s`` after the last *sampling gap* (two samples
more than ``max_gap_s`` apart: the poller could not reach the cluster, the job was stopped): a
gap says nothing about the group, so the window starts again after it. Like Burrow's evaluator,
a window in which the group was caught up once (lag 0) is no reason for ``stopped`` or
``stalled``: one record arriving on a quiet topic is not a verdict until the group has had the
time its cadence allows to read it.

The *cadence* is the median interval between the group's last :data:`CADENCE_COMMITS` commits
the job saw (their times as the offsets topic recorded them): a Flink job committing on each
20-minute checkpoint is ``stopped`` only once it has not committed for 40 minutes.

Both labels are bounded (:data:`STATUSES`, :data:`REASONS`): one series per group.
"""

from __future__ import annotations

import itertools
import statistics
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from streaming.lag.config import DEFAULT_HEALTH_WINDOW_S
from streaming.protocol import REBALANCING, TopicPartition

STATUSES = ("OK", "WARN", "ERR")
REASONS = ("ok", "rebalancing", "stopped", "stalled", "storm", "rewinding", "lagging")
DEFAULT_WINDOW_S = DEFAULT_HEALTH_WINDOW_S  # --health-window
DEFAULT_STORM_REBALANCES = 3
DEFAULT_MAX_GAP_S = 90.0
CADENCE_COMMITS = 6  # commit times kept per group: five intervals, their median the cadence
CADENCE_FACTOR = 2.0  # stopped once the last commit is older than this many usual intervals
UNKNOWN_CADENCE_WINDOWS = 3.0  # ... or, fewer than two commits seen, older than this many windows


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


def cadence(commit_times: Sequence[float]) -> float | None:
    """The group's usual interval between commits (the median of those seen), None before two commits."""
    intervals = sorted(b - a for a, b in itertools.pairwise(commit_times) if b > a)
    return statistics.median(intervals) if intervals else None


def stop_after(commit_times: Sequence[float], window_s: float) -> float:
    """How long after its last commit a group whose records keep arriving is stopped."""
    interval = cadence(commit_times)
    if interval is None:
        return UNKNOWN_CADENCE_WINDOWS * window_s
    return max(window_s, CADENCE_FACTOR * interval)


def evaluate(samples: Sequence[Sample], rebalances: Sequence[float], state: str, now_s: float,
             window_s: float = DEFAULT_WINDOW_S, storm_rebalances: int = DEFAULT_STORM_REBALANCES,
             commit_times: Sequence[float] = (), max_gap_s: float = DEFAULT_MAX_GAP_S) -> tuple[str, str]:
    """(status, reason) of a group from its samples, rebalance and commit times (any age: the window is applied
    here)."""
    window = [s for s in samples if s.at_s >= now_s - window_s]
    for i in range(len(window) - 1, 0, -1):
        if window[i].at_s - window[i - 1].at_s > max_gap_s:  # a sampling gap: the window starts after it
            window = window[i:]
            break
    if len(window) < 2:
        return "OK", "ok"
    first, last = window[0], window[-1]
    arriving = last.log_end > first.log_end
    still = last.committed == first.committed
    if state in REBALANCING:
        return ("ERR" if still and arriving else "WARN"), "rebalancing"
    behind = all(s.lag > 0 for s in window)  # never caught up in the window
    whole = first.at_s <= now_s - window_s + max_gap_s  # the whole window was sampled
    if whole and behind and arriving and now_s - last.last_commit_s > stop_after(commit_times, window_s):
        return "ERR", "stopped"
    if behind and still and last.lag > first.lag and sum(1 for t in commit_times if t > first.at_s) >= 2:
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

    def __init__(self, window_s: float = DEFAULT_WINDOW_S, max_gap_s: float = DEFAULT_MAX_GAP_S) -> None:
        self.window_s, self.max_gap_s = window_s, max_gap_s
        self._lock = threading.Lock()
        self._commits: dict[str, tuple[float, ...]] = {}  # the group's last CADENCE_COMMITS commit times
        self._samples: dict[str, deque[Sample]] = {}
        self._previous: dict[str, dict[TopicPartition, int]] = {}
        self._rebalances: dict[str, tuple[int, deque[float] | None]] = {}
        self._states: dict[str, str] = {}

    def record(self, group: str, committed: Mapping[TopicPartition, int], log_ends: Mapping[TopicPartition, int],
               last_commit_s: float, now_s: float) -> None:
        """A lag refresh's committed offsets and log ends of the partitions with a fresh sample. ``committed`` are
        the job's, as the offsets topic ordered the group's commits: an offset lower than the last refresh's is a
        rewind (an OffsetFetch's answer laid over them would read as one whenever a fetch failed)."""
        with self._lock:
            previous = self._previous.get(group, {})
            rewound = any(offset < previous.get(tp, offset) for tp, offset in committed.items())
            self._previous[group] = dict(committed)
            commits = self._commits.get(group, ())
            if last_commit_s > 0 and (not commits or last_commit_s > commits[-1]):
                self._commits[group] = (*commits, last_commit_s)[-CADENCE_COMMITS:]
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
            commits = self._commits.get(group, ())
        return evaluate(samples, rebalances, state, now_s, self.window_s, commit_times=commits,
                        max_gap_s=self.max_gap_s)

    def forget(self, group: str) -> None:
        with self._lock:
            for kept in (self._samples, self._previous, self._rebalances, self._states, self._commits):
                kept.pop(group, None)

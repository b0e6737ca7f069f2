"""Topics the lag poller cannot read, named once in the log rather than at every round.

A least-privilege principal without Describe on some topics, or a topic deleted under a group's old
commits, fails the same lookups every round (every 10 s): the counter
(``rebalance_monitor_log_end_poll_errors_total``) says how many, the log says which, once a topic starts
failing for a reason and once it reads again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

log = logging.getLogger(__name__)

# Reasons that name a topic and persist until someone acts (ACLs, --exclude-topics), not a passing outage.
STEADY_REASONS = frozenset({"auth", "unknown_topic_or_partition"})
ADVICE = {
    "auth": "not authorized: grant the job's principal Describe on them, or leave them out with --exclude-topics",
    "unknown_topic_or_partition": "unknown to the cluster (deleted, or a group's commits outlived them)",
}
NAMED_MAX = 20  # topics named in one line; the rest are counted


class UnreadableTopics:
    """The topics failing for a steady reason, as last said in the log (thread-safe: scrapes fetch too)."""

    def __init__(self) -> None:
        self._failing: dict[str, str] = {}
        self._round: set[str] = set()  # topics with a partition that failed in the round under way
        self._lock = threading.Lock()

    def begin_round(self, topics: Iterable[str]) -> None:
        """A round that asks for ``topics``: a failing topic no group commits to any more (its groups, or
        their commits on it, deleted) is forgotten, neither read again nor said again."""
        wanted = set(topics)
        with self._lock:
            self._round.clear()
            self._failing = {t: reason for t, reason in self._failing.items() if t in wanted}

    def failed(self, topics: Iterable[str], reason: str) -> None:
        with self._lock:
            self._round.update(topics)
            new = sorted(t for t in set(topics) if self._failing.get(t) != reason)
            self._failing.update(dict.fromkeys(new, reason))
        if new:
            more = f" and {len(new) - NAMED_MAX} more" if len(new) > NAMED_MAX else ""
            log.warning("lag of %d topic(s) cannot be read, %s: %s%s", len(new), ADVICE.get(reason, reason),
                        ", ".join(new[:NAMED_MAX]), more)

    def read(self, topics: Iterable[str]) -> None:
        """``topics`` had partitions read: back, unless another of their partitions failed this round."""
        with self._lock:
            back = sorted(t for t in set(topics) - self._round if self._failing.pop(t, None) is not None)
        if back:
            log.info("lag of %d topic(s) can be read again: %s", len(back), ", ".join(back[:NAMED_MAX]))

    @property
    def failing(self) -> dict[str, str]:
        with self._lock:
            return dict(self._failing)

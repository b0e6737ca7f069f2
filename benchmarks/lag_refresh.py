"""What one lag refresh costs the driver per group: W2's groups published offline, every partition sampled.

``python -m benchmarks.lag_refresh [GROUPS ...]`` (default 5,000 and 20,000 groups of 10 partitions, W2's
shape) folds and publishes the groups as a first batch would, gives the tracker a log-end sample of every
partition, then times the book's refresh (every group's lag shown again, as after each poll round of the
log-end poller) at topic and partition granularity: the median of 3 refreshes, and the same pass with no
sample at all (nothing to show: the refresh's own walk over the groups) as the baseline. The refresh runs on
the driver beside the batches, one thread under the GIL: a refresh longer than ``--lag-poll-seconds``
(10 s) keeps that thread busy.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time

from benchmarks.driver_memory import decoded_backlog
from benchmarks.synthetic import Workload
from streaming.driver.publish import build_publishing
from streaming.driver.sink import young_garbage_only
from streaming.groups.stage import GroupStage
from streaming.lag.config import DEFAULT_INTERVAL_S
from streaming.lag.tracker import LagTracker


def refresh_seconds(groups: int, granularity: str) -> tuple[float, float]:
    """Median seconds of a refresh with every partition sampled, and without any sample (baseline)."""
    shape = Workload(groups=groups, partitions=10, records=groups * 11, generation_every=0)
    stage = GroupStage()
    changes = stage.changes(stage.apply(decoded_backlog(shape)), int(time.time() * 1000))
    del stage
    tracker = LagTracker()
    publisher = build_publishing("c", tracker, granularity)
    with young_garbage_only(), publisher.batch():
        for change in changes:
            publisher.apply(change)
    partitions = {tp for change in changes for tp in change.committed}
    del changes
    gc.collect()
    figures = []
    for sampled in (False, True):
        now = time.time()
        if sampled:
            tracker.record_offsets({tp: (0, 10_000_000) for tp in partitions}, now)
            tracker.record_round(now, {})
        times = []
        for _ in range(3):
            started = time.perf_counter()
            publisher.book.refresh(now)
            times.append(time.perf_counter() - started)
        figures.append(statistics.median(times))
    return figures[1], figures[0]


def main(argv: list[str]) -> None:
    for granularity in ("topic", "partition"):
        for groups in [int(a) for a in argv] or [5_000, 20_000]:
            sampled, baseline = refresh_seconds(groups, granularity)
            per_group = sampled / groups
            print(f"{granularity} granularity, {groups:,} groups: a refresh {sampled:.2f} s ({per_group * 1e6:.0f} us "
                  f"a group), {baseline:.2f} s with nothing sampled (baseline, same process); at 100,000 groups "
                  f"about {per_group * 100_000:.0f} s, against the {DEFAULT_INTERVAL_S:.0f} s poll interval",
                  flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])

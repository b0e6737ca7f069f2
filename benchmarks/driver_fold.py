"""A batch of commits alone touching every group, folded and published on the driver.

``python -m benchmarks.driver_fold [GROUPS] [REPEATS] [PARTITIONS] [GRANULARITY]`` (default 20,000
groups of 10 partitions at topic granularity, W2's shape; 5 repeats; ``1000 5 50 partition`` is W1's):
the first half of the backlog (every group's record and half its commits) is folded once, then the
second half (commits alone, every group touched, as each batch of a capped catch-up or of steady
load is) is folded ``REPEATS`` times in fresh sinks, alternating with the baseline in the same
process: the same sink publishing every changed group whole (summary and all its series), as the
driver did before commits alone took the short path. Prints medians and the ratio, then the top
of a profile of one run of each.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.driver_memory import decoded_records
from benchmarks.synthetic import Workload, backlog
from streaming.cluster.metadata import TopicNames
from streaming.driver.publish import build_publishing
from streaming.driver.sink import BatchSink
from streaming.groups.config import GroupsConfig
from streaming.groups.stage import GroupStage
from streaming.groups.store import StateStore
from streaming.lag.tracker import LagTracker
from streaming.logs.dead_letters import DeadLetterLog
from streaming.logs.events import EventLog
from streaming.protocol import BatchInput


class WholeStage(GroupStage):
    """The baseline's stage: every changed group's change carries its summary, whatever moved."""

    def _may_move(self, group: str, now_ms: int) -> bool:
        return True


def second_half(first: BatchInput, second: BatchInput, whole: bool, granularity: str,
                profile: cProfile.Profile | None = None) -> float:
    """Seconds to fold and publish ``second`` after ``first`` in a fresh sink (``whole``: the baseline)."""
    with tempfile.TemporaryDirectory() as tmp:
        sink = BatchSink(GroupsConfig(), WholeStage() if whole else GroupStage(), StateStore(Path(tmp) / "state"),
                         build_publishing("c", LagTracker(), granularity), EventLog(Path(tmp) / "events"),
                         DeadLetterLog(Path(tmp) / "dead-letters", "__consumer_offsets", 10),
                         TopicNames(lambda ids: {}))
        sink.handle(first, 0)
        if profile:
            profile.enable()
        started = time.perf_counter()
        sink.handle(second, 1)
        took = time.perf_counter() - started
        if profile:
            profile.disable()
        return took


def top(profile: cProfile.Profile, lines: int = 12) -> str:
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(lines)
    return "\n".join(line for line in out.getvalue().splitlines() if line.strip())


def main(argv: list[str]) -> None:
    groups = int(argv[0]) if argv else 20_000
    repeats = int(argv[1]) if len(argv) > 1 else 5
    partitions = int(argv[2]) if len(argv) > 2 else 10
    granularity = argv[3] if len(argv) > 3 else "topic"
    shape = Workload(groups=groups, partitions=partitions, records=groups * (partitions + 1), generation_every=0)
    records = list(backlog(shape, int(time.time() * 1000)))
    half = len(records) // 2
    first, second = decoded_records(records[:half]), decoded_records(records[half:])
    ours, baseline = [], []
    for _ in range(repeats):
        ours.append(second_half(first, second, False, granularity))
        baseline.append(second_half(first, second, True, granularity))
    mine, theirs = statistics.median(ours), statistics.median(baseline)
    print(f"{groups:,} groups of {partitions} partitions ({granularity} granularity), a batch of "
          f"{len(records) - half:,} commits touching every group, median of {repeats}:"
          f" {mine:.2f} s ({mine / groups * 1e6:.0f} us a group) with the short path for commits alone, "
          f"{theirs:.2f} s ({theirs / groups * 1e6:.0f} us a group) publishing each whole (baseline, same "
          f"process): {theirs / mine:.1f}x")
    for name, whole in (("short path", False), ("baseline", True)):
        profile = cProfile.Profile()
        second_half(first, second, whole, granularity, profile)
        print(f"\n{name}, by own time:\n{top(profile)}")


if __name__ == "__main__":
    main(sys.argv[1:])

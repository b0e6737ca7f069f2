"""Where the driver's memory goes per group: a W2-shaped backlog folded and published offline.

``python -m benchmarks.driver_memory [GROUPS]`` (default 20,000 groups of 10 partitions, W2's shape)
decodes the backlog in this process as the executors would, hands it to the sink as one batch,
and prints what stays allocated per group (tracemalloc), by the line that allocated it. Beside it,
in the same process, the committed offsets of the same groups held both ways: the columnar store
(:mod:`streaming.groups.offsets`) and the dict of ``(topic, partition) -> (offset, time)`` tuples
it replaced (the baseline), in bytes per partition, at W2's 10 and W1's 50 partitions per group;
the members' owned partitions the lag book keeps, in columns (:mod:`streaming.lag.owned`) and as the
dict of lists of tuples they replaced (the baseline), in bytes per group and in the time a refresh's pass
over every owned partition takes; and how far a batch of commits alone, on top of every group's state,
rises above that state while it is folded, its commits taken from Arrow in slices (as shipped) and all at
once (the baseline).
"""

from __future__ import annotations

import gc
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path

import pyarrow as pa

from benchmarks.synthetic import Workload, backlog
from streaming.cluster.metadata import TopicNames
from streaming.decode.stage import make_decoder
from streaming.driver.publish import build_publishing
from streaming.driver.sink import BatchSink
from streaming.groups import stage as stage_module
from streaming.groups.config import GroupsConfig
from streaming.groups.offsets import CommittedOffset, PartitionOffsets
from streaming.groups.stage import GroupStage
from streaming.groups.store import StateStore
from streaming.lag.owned import Owned
from streaming.lag.tracker import LagTracker
from streaming.logs.dead_letters import DeadLetterLog
from streaming.logs.events import EventLog
from streaming.protocol import STAGE_SCHEMA, BatchInput

ROOT = str(Path(__file__).resolve().parents[1]) + "/"


def decoded_backlog(shape: Workload) -> BatchInput:
    """The workload's records as one batch of stage rows (decoded here, as the executors would)."""
    return decoded_records(backlog(shape, int(time.time() * 1000)))


def decoded_records(records: Iterable[tuple[int, bytes, bytes]]) -> BatchInput:
    """``(partition, key, value)`` records as one batch of stage rows (decoded here, as the executors would)."""
    return BatchInput.from_arrow(decoded_table(records))


def decoded_table(records: Iterable[tuple[int, bytes, bytes]]) -> pa.Table:
    """The decode stage's rows of ``(partition, key, value)`` records, every kind (:data:`STAGE_SCHEMA`)."""
    by_partition: dict[int, list[tuple[bytes, bytes]]] = defaultdict(list)
    for partition, key, value in records:
        by_partition[partition].append((key, value))
    batches = [pa.RecordBatch.from_pydict({
        "key": pa.array([k for k, _ in rows], pa.binary()), "value": pa.array([v for _, v in rows], pa.binary()),
        "partition": pa.array([partition] * len(rows), pa.int32()),
        "offset": pa.array(range(len(rows)), pa.int64()),
        "timestamp": pa.array([(1_700_000_000_000 + i) * 1000 for i in range(len(rows))], pa.timestamp("us")),
    }) for partition, rows in by_partition.items()]
    return pa.Table.from_batches(list(make_decoder(1000)(iter(batches))), schema=STAGE_SCHEMA)


def retained(build: Callable[[], object]) -> tuple[int, object]:
    """Bytes ``build()``'s result holds, as tracemalloc counts them."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kept = build()
    gc.collect()
    size = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return size, kept


def retained_by_site(build: Callable[[], object], frames: int = 6) -> tuple[dict[str, int], object]:
    """Bytes ``build()``'s result holds by where they were allocated: the innermost frame in the project
    (``streaming/``) of each allocation's traceback, else its innermost frame."""
    gc.collect()
    tracemalloc.start(frames)
    before = tracemalloc.take_snapshot()
    kept = build()
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    sites: dict[str, int] = {}
    for stat in after.compare_to(before, "traceback"):
        ours = [frame for frame in stat.traceback if "/streaming/" in frame.filename]
        frame = (ours or list(stat.traceback))[-1]
        name = frame.filename.rsplit("/streaming/", 1)[-1] if ours else frame.filename.rsplit("/", 1)[-1]
        site = f"{name}:{frame.lineno}"
        sites[site] = sites.get(site, 0) + stat.size_diff
    return sites, kept


def offsets_per_partition(groups: int, partitions: int) -> tuple[float, float]:
    """Bytes per committed partition: (columnar store, dict of tuples), the same offsets."""
    def columnar() -> object:
        stores = []
        for g in range(groups):
            store, topic = PartitionOffsets(), f"bench-topic-{g}"
            for p in range(partitions):
                store.set(topic, p, 1_000_000 + p, 1_700_000_000_000 + p)
            stores.append(store)
        return stores

    def tuples() -> object:
        stores = []
        for g in range(groups):
            store: dict[tuple[str, int], CommittedOffset] = {}
            topic = f"bench-topic-{g}"
            for p in range(partitions):
                store[(topic, p)] = CommittedOffset(1_000_000 + p, 1_700_000_000_000 + p)
            stores.append(store)
        return stores

    topics = [f"bench-topic-{g}" for g in range(groups)]  # the names exist either way: not counted
    ours, _ = retained(columnar)
    baseline, _ = retained(tuples)
    del topics
    return ours / (groups * partitions), baseline / (groups * partitions)


def owned_per_group(groups: int) -> None:
    """The lag book's owned partitions of W2's groups (two members, five partitions each), built as the
    publisher hands them over (each group's label values its own strings, as unpickled): bytes a group, and a
    pass over every owned partition (a refresh makes three), columnar against the dict of lists (baseline)."""
    def handed() -> list[dict[tuple[tuple[str, str], ...], list[tuple[str, int]]]]:
        return [{(("member", ""), ("client_id", f"consumer-{m}"), ("client_host", f"/10.0.{g % 250}.{m}")):
                 [(f"bench-topic-{g % 1000}", p) for p in range(m, 10, 2)] for m in range(2)} for g in range(groups)]

    figures = {}
    for label, build, walk in (
            ("columns", lambda: [Owned(owned) for owned in handed()],
             lambda kept: sum(1 for owned in kept for _ in owned.partitions())),
            ("dict of lists (baseline)", handed,
             lambda kept: sum(1 for owned in kept for parts in owned.values() for _ in parts))):
        size, kept = retained(build)
        times = []
        for _ in range(5):
            started = time.perf_counter()
            walk(kept)
            times.append(time.perf_counter() - started)
        figures[label] = size / groups, statistics.median(times)
        del kept
    (ours, ours_s), (base, base_s) = figures.values()
    print(f"owned partitions, {groups:,} groups of two members on 10 partitions: {ours:,.0f} bytes a group in "
          f"columns, {base:,.0f} as a dict of lists (baseline, same process): {base / ours:.1f}x; a pass over every "
          f"owned partition {ours_s * 1000:.0f} ms, {base_s * 1000:.0f} ms (median of 5): {ours_s / base_s:.2f}x")


def new_sink(tmp: Path, granularity: str = "partition") -> BatchSink:
    return BatchSink(GroupsConfig(), GroupStage(), StateStore(tmp / "state"),
                     build_publishing("c", LagTracker(), granularity), EventLog(tmp / "events"),
                     DeadLetterLog(tmp / "dead-letters", "__consumer_offsets", 10), TopicNames(lambda ids: {}))


def second_batch_peak(groups: int) -> None:
    """Bytes above the state while the second half of a W2 backlog (every group's later commits, half
    the groups' records) is folded and published at topic granularity (as bench-job runs W2): commits
    in slices as shipped, then all at once (baseline)."""
    shape = Workload(groups=groups, partitions=10, records=groups * 11, generation_every=0)
    records = list(backlog(shape, int(time.time() * 1000)))
    half = len(records) // 2
    first, second = decoded_records(records[:half]), decoded_records(records[half:])
    del records
    shipped = stage_module.COMMIT_CHUNK_ROWS
    for label, chunk in (("in slices", shipped), ("all at once (baseline)", second.commits.num_rows)):
        stage_module.COMMIT_CHUNK_ROWS = chunk  # the sorted commits are one Arrow chunk: no smaller slices
        with tempfile.TemporaryDirectory() as tmp:
            sink = new_sink(Path(tmp), "topic")
            sink.handle(first, 0)
            gc.collect()
            tracemalloc.start()
            before = tracemalloc.get_traced_memory()[0]
            sink.handle(second, 1)
            now, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            print(f"a batch of {second.commits.num_rows:,} commits on {groups:,} groups' state, commits "
                  f"{label}: peak {(peak - before) / 2**20:.0f} MiB above the state, {(now - before) / 2**20:.0f} "
                  f"MiB of it kept (new partitions, their series): {(peak - now) / 2**20:.0f} MiB transient")
            del sink
    stage_module.COMMIT_CHUNK_ROWS = shipped


def fold_profile(groups: int, top: int = 15) -> None:
    shape = Workload(groups=groups, partitions=10, records=groups * 11, generation_every=0)
    batch = decoded_backlog(shape)
    with tempfile.TemporaryDirectory() as tmp:
        sink = new_sink(Path(tmp))
        gc.collect()
        tracemalloc.start()
        started = time.perf_counter()
        sink.handle(batch, 0)
        took = time.perf_counter() - started
        del batch
        gc.collect()
        peak = tracemalloc.get_traced_memory()[1]
        stats = tracemalloc.take_snapshot().statistics("lineno")
        tracemalloc.stop()
        total = sum(s.size for s in stats)
        print(f"{groups:,} groups x 10 partitions folded and published in {took:.1f} s (traced); "
              f"{total / 2**20:.0f} MiB stay allocated = {total / groups:,.0f} bytes per group; "
              f"peak {peak / 2**20:.0f} MiB, {(peak - total) / 2**20:.0f} MiB of it transient (the batch in flight "
              f"as Python objects; Arrow's own buffers are not traced)")
        print(f"{'bytes/group':>12} {'objects':>9}  allocated at")
        for stat in stats[:top]:
            frame = stat.traceback[0]
            print(f"{stat.size / groups:12,.0f} {stat.count:9,}  {frame.filename.replace(ROOT, '')}:{frame.lineno}")
        del sink


def main(argv: list[str]) -> None:
    groups = int(argv[0]) if argv else 20_000
    for partitions in (10, 50):
        ours, baseline = offsets_per_partition(groups // partitions * 10, partitions)
        print(f"committed offsets, {partitions} partitions a group: {ours:.0f} bytes a partition columnar, "
              f"{baseline:.0f} as a dict of tuples (baseline, same process): {baseline / ours:.1f}x")
    owned_per_group(groups)
    second_batch_peak(groups)
    fold_profile(groups)


if __name__ == "__main__":
    main(sys.argv[1:])

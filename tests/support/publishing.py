"""A publisher built as the job builds it, fed with a rebalanced classic group and a KIP-848 group, and
scraped: the fixtures of the tests that publish and read back what a scrape shows."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from decoders.records import Record, Struct
from streaming.driver.publish import Publisher, build_publishing
from streaming.groups.fold import apply_record
from streaming.groups.offsets import CommittedOffset, PartitionOffsets
from streaming.groups.stage import GroupOffsets
from streaming.groups.summary import summarize
from streaming.lag.tracker import LagTracker
from streaming.protocol import GroupChange, GroupSummary, TopicPartition

T0 = 1_700_000_000_000


def member(member_id: str, assigned: dict[str, list[int]], instance: str | None = None) -> Struct:
    return Struct(
        memberId=member_id, groupInstanceId=instance, clientId=f"client-{member_id}", clientHost="/10.0.0.7",
        rebalanceTimeout=300000, sessionTimeout=45000, subscription=b"", assignment=b"",
        decodedSubscription=Struct(version=0, topics=tuple(assigned), userData=None),
        decodedAssignment=Struct(
            version=0, userData=None,
            assignedPartitions=tuple(Struct(topic=t, partitions=tuple(p)) for t, p in assigned.items()),
        ),
        payloadError=None,
    )


def classic(group: str, generation: int, members: list[Struct], ts: int) -> Record:
    value = Struct(protocolType="consumer", generation=generation, protocol="range",
                   leader=members[0]["memberId"], currentStateTimestamp=ts, members=tuple(members))
    return Record(2, Struct(group=group), 3, value)


def orders_summary():
    """Group ``orders``: a rebalance from 2 to 3 members."""
    first = [member("C0", {"t0": [0, 1]}), member("C1", {"t0": [2]})]
    snap, _ = apply_record(None, classic("orders", 1, first, T0), T0)
    snap, events = apply_record(snap, classic("orders", 2, [
        member("C0", {"t0": [0]}), member("C1", {"t0": [2]}), member("C2", {"t0": [1]}, instance="i-2"),
    ], T0 + 60_000), T0 + 60_000)
    assert len(events) == 1
    return summarize(snap, T0 + 61_000)


ORDERS_OFFSETS = GroupOffsets(PartitionOffsets({
    ("t0", 0): CommittedOffset(150, T0), ("t0", 1): CommittedOffset(200, T0), ("t1", 0): CommittedOffset(5, T0),
}), commits_total=5, last_commit_ms=T0)


def kip848_summary():
    """Group ``kip``: a KIP-848 group whose member has not reconciled yet."""
    key = Struct(groupId="kip", memberId="m1")
    records = [
        Record(5, key, 0, Struct(instanceId=None, clientId="cli", clientHost="/h",
                                 subscribedTopicNames=("t0",), serverAssignor="range")),
        Record(3, Struct(groupId="kip"), 0, Struct(epoch=4)),
        Record(7, key, 0, Struct(topicPartitions=(Struct(topicId="id0", partitions=(0, 1)),))),
        Record(6, Struct(groupId="kip"), 0, Struct(assignmentEpoch=4)),
        Record(8, key, 0, Struct(memberEpoch=3, previousMemberEpoch=2, state=0,
                                 assignedPartitions=(Struct(topicId="id0", partitions=(0,)),),
                                 partitionsPendingRevocation=())),
    ]
    snap = None
    for r in records:
        snap, _ = apply_record(snap, r, T0)
    return summarize(snap, T0)


def whole(summary: GroupSummary, offsets: GroupOffsets | None = None,
          assignments: Mapping[str, Sequence[TopicPartition]] | None = None) -> GroupChange:
    """The change the group stage hands over once a group record was folded: summary, offsets, assignments."""
    offsets = offsets or GroupOffsets()
    return GroupChange(summary.group, summary, offsets.offsets.committed(), offsets.commits_total,
                       offsets.last_commit_ms, assignments)


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def parse(text: str):
    """(samples by exposed name → [(labels, value)], HELP by family name)."""
    samples, helps = defaultdict(list), {}
    for family in text_string_to_metric_families(text):
        helps[family.name] = family.documentation
        for s in family.samples:
            samples[s.name].append((s.labels, s.value))
    return samples, helps


def scrape(exporter: Publisher):
    text = exporter.exporter.render().decode()
    return (*parse(text), text)


def value(samples, name: str, **labels) -> float:
    matches = [v for lab, v in samples[name] if all(lab.get(k) == str(x) for k, x in labels.items())]
    assert len(matches) == 1, (name, labels, samples[name])
    return matches[0]


# C0 owns t0:0 (committed 150, log end 200), C1 owns t0:2 (never committed), i-2 owns t0:1 (caught up).
ORDERS_ASSIGNMENTS = {"C0": [("t0", 0)], "C1": [("t0", 2)], "i-2": [("t0", 1)]}
NOW = 1_700_000_100.0


def make_exporter(granularity: str = "partition", max_series: int | None = None,
                  **wiring: Any) -> tuple[Publisher, Clock]:
    """The publisher with ``orders`` and ``kip`` published and sampled; ``wiring``: more of build_publishing's
    arguments (the scrape-time fetchers)."""
    clock = Clock(NOW)
    tracker = LagTracker(interval_s=10, clock=clock)
    exporter = build_publishing("prod-eu", tracker, granularity, max_series, **wiring)
    exporter.apply(whole(orders_summary(), ORDERS_OFFSETS, ORDERS_ASSIGNMENTS))
    exporter.apply(whole(kip848_summary(), None))
    # the source topic is tracked for the job's own input lag: 40 records past where the last batch ended
    exporter.instruments.observe_batch(0.3, 1, {("offsets", 0): 1000}, 1_700_000_000.5)
    exporter.instruments.observe_batch(7.0, 2, {("offsets", 0): 1060}, 1_700_000_010.5)
    exporter.book.refresh(NOW)  # tells the tracker what to poll
    tracker.record_offsets({("t0", 0): (0, 200), ("t0", 1): (0, 190), ("t0", 2): (10, 40), ("offsets", 0): (0, 1100)},
                           NOW - 1)
    # The records' own times were asked for and not found: lag in seconds is the samples' lower bound.
    tracker.record_times({}, [(("t0", 0), 150), (("t0", 1), 200), (("t1", 0), 5)], NOW - 1)
    tracker.record_round(NOW - 1, {})
    exporter.instruments.count_records({1: 5, 2: 2}, newest_record_ms=int((NOW - 30) * 1000))
    exporter.instruments.count_records({1: 1, 3: 1})
    exporter.instruments.count_decode_errors({"truncated_value": 2})
    exporter.book.refresh(NOW)
    return exporter, clock

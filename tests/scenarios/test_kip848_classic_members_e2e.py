"""Classic-protocol members inside a KIP-848 group on a real broker: killed right after a commit, or closed.

A group created by a consumer-protocol member (confluent-kafka, ``group.protocol=consumer``) that
classic kafka-python members then join, as during a rolling upgrade. Kafka renews such a member's
session on its classic heartbeats only (its commits renew nothing in a KIP-848 group), so a member
killed right after a commit is fenced less than its session timeout after that commit: the classic
rule would read it as a clean leave. Kafka is the oracle: its records give each departure's times,
its consumer-groups tool who is left.
"""

from __future__ import annotations

import pytest

from streaming.groups.boundary import fence_threshold_ms
from streaming.protocol import GroupTimeouts
from testbed.broker import LocalKafka
from testbed.workload import Admin, Member, RateProducer, start_members, wait_until
from tests.support.exposition import series
from tests.support.fault_helpers import JobProcess
from tests.support.kip848_departures import CommitWatcher, trails
from tests.support.lag_helpers import describe_members

pytestmark = pytest.mark.slow

PARTITIONS = 8
CLASSIC = 6  # of which KILLED are killed right after one of their commits, the others closed
KILLED = 4
SESSION_MS = 10_000  # the classic members' session.timeout.ms (testbed.member heartbeats every sixth of it)


def test_classic_members_of_a_kip848_group_are_fenced_by_heartbeats_not_commits(
        kafka_broker: LocalKafka, admin: Admin, members: list[Member], unique: str, kip848: None, tmp_path) -> None:
    prefix = f"kip848-classic-{unique}"
    topic, group = f"{prefix}-t", f"{prefix}-g"
    admin.create_topic(topic, PARTITIONS)
    job = JobProcess(tmp_path / "job", kafka_broker.bootstrap,
                     ["--include-groups", f"^{prefix}-", "--cluster", "mixed", "--master", "local[2]"]).start()
    producer = RateProducer(kafka_broker.bootstrap, [topic], rate=100)
    producer.start()
    try:
        anchor = Member(kafka_broker.bootstrap, group, [topic], f"{group}-anchor", protocol="consumer")
        members.append(anchor)
        start_members([anchor])
        classic = [Member(kafka_broker.bootstrap, group, [topic], f"{group}-classic-{i}", session_timeout_ms=SESSION_MS)
                   for i in range(CLASSIC)]
        members.extend(classic)
        start_members(classic, timeout=120)
        # Settled: every classic member owns something and all of them with the anchor own each partition once
        # (wait_balanced compares generations, which a consumer-protocol member does not report).
        wanted = sorted((topic, p) for p in range(PARTITIONS))
        wait_until(lambda: all(m.assignment for m in classic)
                   and sorted(tp for m in (anchor, *classic) for tp in m.assignment) == wanted,
                   120, "the classic members to own partitions")
        owned, killed = {}, set()
        watcher = CommitWatcher(kafka_broker.bootstrap, [group])
        watcher.start()
        try:
            for i, member in enumerate(classic):
                owned[member.member_id or ""] = member.assignment
                if i < KILLED:
                    assert watcher.wait_commit(group, member.assignment, 5), f"{member.client_id} committed nothing"
                    member.crash()
                    killed.add(member.member_id)
                else:
                    member.leave()
        finally:
            watcher.stop()
        samples = job.wait(lambda s: sum(series(s, "kafka_consumergroup_member_departures_total",
                                                group=group).values()) >= CLASSIC, "every classic member's departure")
        records = trails(admin, group, owned)
        sequence = "\n".join(f"{'killed' if m in killed else 'closed'} {records.trails.get(m)}" for m in owned)
        departures = {dict(labels)["how"]: v for labels, v in
                      series(samples, "kafka_consumergroup_member_departures_total", group=group).items()}
        assert departures == {"session_timeout": KILLED, "left_cleanly": CLASSIC - KILLED}, sequence

        # Kafka's records: every crash's gap reaches the threshold; at least one is below the session
        # timeout (a commit after its last heartbeat), which the classic rule would call a clean leave.
        threshold = fence_threshold_ms(GroupTimeouts(SESSION_MS, SESSION_MS // 3))
        gaps = {m: records.trails[m].gap_ms for m in owned}
        assert all(gap is not None for gap in gaps.values()), sequence
        assert all(threshold <= (gaps[m] or 0) for m in killed), sequence
        assert any((gaps[m] or 0) < SESSION_MS for m in killed), sequence
        assert all((gaps[m] or 0) < threshold for m in owned if m not in killed), sequence
        assert set(describe_members(kafka_broker.bootstrap, group)) == {anchor.client_id}
        assert not series(samples, "kafka_consumergroup_rebalance_causes_total", group=group, cause="unknown")
    finally:
        producer.stop()
        job.stop()

"""One real consumer-group member, run as its own process (``python -m testbed.member``).

A process per member makes churn real: SIGTERM closes the consumer cleanly (it leaves the
group), SIGKILL is a crash that only the session timeout notices. The member prints one
JSON line on stdout every time its assignment changes, so the parent knows exactly what
Kafka's assignor gave it.

Classic protocol members use kafka-python with the chosen assignor; ``--protocol consumer``
members use confluent-kafka with KIP-848's ``group.protocol=consumer``.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

ASSIGNORS = ("range", "roundrobin", "sticky", "cooperative-sticky")
# What a member reports: its partitions as [topic, partition] pairs, member id, generation.
State = tuple[list[list[Any]], str | None, int | None]


def _emit(**fields: Any) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def _assignor_class(name: str) -> type:
    from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

    return {
        "range": RangePartitionAssignor,
        "roundrobin": RoundRobinPartitionAssignor,
        "sticky": StickyPartitionAssignor,
        "cooperative-sticky": CooperativeStickyAssignor,
    }[name]


class _Stop:
    """Set by SIGTERM: the poll loop ends and the consumer closes (leaving the group)."""

    requested = False

    @classmethod
    def install(cls) -> None:
        signal.signal(signal.SIGTERM, lambda *_: setattr(cls, "requested", True))
        signal.signal(signal.SIGINT, lambda *_: setattr(cls, "requested", True))


def run_classic(args: argparse.Namespace) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer

    config: dict[str, Any] = {
        "bootstrap_servers": args.bootstrap_server,
        "group_id": args.group,
        "client_id": args.client_id,
        "partition_assignment_strategy": [_assignor_class(args.assignor)],
        "session_timeout_ms": args.session_timeout_ms,
        "heartbeat_interval_ms": max(300, args.session_timeout_ms // 6),
        "enable_auto_commit": True,
        "auto_commit_interval_ms": args.commit_interval_ms,
        "auto_offset_reset": "earliest",
        "metadata_max_age_ms": 2000,
    }
    if args.instance_id:
        config["group_instance_id"] = args.instance_id
    consumer = KafkaConsumer(**config)

    def state() -> State:
        generation = getattr(getattr(consumer, "_coordinator", None), "_generation", None)
        return (sorted([tp.topic, tp.partition] for tp in consumer.assignment()),
                getattr(generation, "member_id", None), getattr(generation, "generation_id", None))

    reporter = _Reporter(state)

    class ReportRebalances(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: object) -> None:
            reporter.report()

        def on_partitions_assigned(self, assigned: object) -> None:
            reporter.report()

    consumer.subscribe(args.topics, listener=ReportRebalances())
    # A long poll: kafka-python 3.0 can lose a rebalance's completion when poll's timeout runs
    # out while JoinGroup/SyncGroup are in flight (the member then believes it is stable, owns
    # nothing and stops heartbeating). The listener reports rebalances as they complete.
    _poll_loop(lambda: consumer.poll(timeout_ms=3000), reporter, consumer.close, args.process_delay_ms)


def run_kip848(args: argparse.Namespace) -> None:
    from confluent_kafka import Consumer

    config: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap_server,
        "group.id": args.group,
        "client.id": args.client_id,
        "group.protocol": "consumer",
        "enable.auto.commit": True,
        "auto.commit.interval.ms": args.commit_interval_ms,
        "auto.offset.reset": "earliest",
        "topic.metadata.refresh.interval.ms": 2000,
    }
    if args.instance_id:
        config["group.instance.id"] = args.instance_id
    consumer = Consumer(config)
    consumer.subscribe(args.topics)

    def state() -> State:
        return sorted([tp.topic, tp.partition] for tp in consumer.assignment()), consumer.memberid(), None

    _poll_loop(lambda: consumer.poll(0.2), _Reporter(state), consumer.close, args.process_delay_ms)


class _Reporter:
    """Prints the member's (assignment, member id, generation) whenever it changes."""

    def __init__(self, state: Callable[[], State]) -> None:
        self.state = state
        self.last: State | None = None

    def report(self) -> None:
        current = self.state()
        if current != self.last:
            _emit(event="assignment", partitions=current[0], member_id=current[1], generation=current[2])
            self.last = current


def _poll_loop(poll: Callable[[], object], reporter: _Reporter, close: Callable[[], object], delay_ms: int) -> None:
    """Poll until SIGTERM, reporting after every poll; then close (leaving the group)."""
    while not _Stop.requested:
        poll()
        if delay_ms:
            time.sleep(delay_ms / 1000)
        reporter.report()
    close()
    _emit(event="closed")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap-server", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topics", nargs="+", required=True)
    parser.add_argument("--client-id", required=True)
    parser.add_argument("--protocol", choices=["classic", "consumer"], default="classic")
    parser.add_argument("--assignor", choices=ASSIGNORS, default="range")
    parser.add_argument("--instance-id", help="group.instance.id: a static member")
    parser.add_argument("--session-timeout-ms", type=int, default=10000)
    parser.add_argument("--commit-interval-ms", type=int, default=1000)
    parser.add_argument("--process-delay-ms", type=int, default=0, help="slow consumer: sleep per poll")
    args = parser.parse_args(argv)
    _Stop.install()
    (run_kip848 if args.protocol == "consumer" else run_classic)(args)


if __name__ == "__main__":
    main()

"""One real consumer-group member, run as its own process (``python -m testbed.member``).

A process per member makes churn real: SIGTERM closes the consumer cleanly (it leaves the
group), SIGKILL is a crash that only the session timeout notices, SIGUSR1 stops the poll loop
while the client's heartbeat thread lives on (a stuck application: the member leaves once
max.poll.interval.ms runs out), SIGUSR2 adds ``--more-topics`` to the subscription (or, with
``--hold``, lets a member that connected and said ``ready`` join at last). The
member prints one JSON line on stdout every time its assignment changes, so the parent knows
exactly what Kafka's assignor gave it.

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
    """Flags the signal handlers set; the poll loop acts on them between polls.

    SIGTERM: end the loop and close the consumer (it leaves the group). SIGUSR1: stop
    polling but keep the process (and the client's heartbeat thread) alive. SIGUSR2:
    subscribe to ``--more-topics`` as well, or, held, subscribe at all.
    """

    requested = False
    stall = False
    resubscribe = False

    @classmethod
    def install(cls) -> None:
        signal.signal(signal.SIGTERM, lambda *_: setattr(cls, "requested", True))
        signal.signal(signal.SIGINT, lambda *_: setattr(cls, "requested", True))
        signal.signal(signal.SIGUSR1, lambda *_: setattr(cls, "stall", True))
        signal.signal(signal.SIGUSR2, lambda *_: setattr(cls, "resubscribe", True))


def _slow(assignor: type, delay_ms: int) -> type:
    """``assignor`` whose leader-side assignment takes ``delay_ms`` longer.

    Keeps a generation's sync phase open, so members joining meanwhile land in the same
    completed assignment (what group.initial.rebalance.delay.ms does for a real restart;
    the test broker sets it to 0).
    """
    if not delay_ms:
        return assignor

    def assign(self: Any, cluster: Any, members: Any) -> Any:
        time.sleep(delay_ms / 1000)
        return super(slow, self).assign(cluster, members)  # type: ignore[arg-type]  # slow is a class, made below

    slow = type(f"Slow{assignor.__name__}", (assignor,), {"assign": assign})
    return slow


def run_classic(args: argparse.Namespace) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer

    config: dict[str, Any] = {
        "bootstrap_servers": args.bootstrap_server,
        "group_id": args.group,
        "client_id": args.client_id,
        "partition_assignment_strategy": [_slow(_assignor_class(name), args.assign_delay_ms) for name in args.assignor],
        "session_timeout_ms": args.session_timeout_ms,
        "max_poll_interval_ms": args.max_poll_interval_ms,
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
            # Called only once a SyncGroup has succeeded: this generation's assignment was completed.
            _emit(event="completed", generation=state()[2])
            reporter.report()

    def subscribe(topics: list[str]) -> None:
        consumer.subscribe(topics, listener=ReportRebalances())
        # A kafka-python leader rejoins when the metadata it assigned with differs from later metadata; its
        # snapshot is taken from metadata updates, so one must arrive before the join, or the first
        # assignment is followed by a rebalance for nothing (Kafka records that as a real generation).
        consumer.topics()

    subscribe(args.topics)
    if args.hold:
        _hold()
    # A long poll: kafka-python 3.0 can lose a rebalance's completion when poll's timeout runs
    # out while JoinGroup/SyncGroup are in flight (the member then believes it is stable, owns
    # nothing and stops heartbeating). The listener reports rebalances as they complete.
    _poll_loop(lambda: consumer.poll(timeout_ms=3000), reporter, consumer.close, args.process_delay_ms,
               lambda: subscribe([*args.topics, *args.more_topics]))


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

    _poll_loop(lambda: consumer.poll(0.2), _Reporter(state), consumer.close, args.process_delay_ms,
               lambda: consumer.subscribe([*args.topics, *args.more_topics]))


def _hold() -> None:
    """Say ``ready`` (connected, subscribed, not joined) and wait for SIGUSR2: members released
    together send their JoinGroup within milliseconds of each other, whatever their start-up took."""
    _emit(event="ready")
    while not (_Stop.resubscribe or _Stop.requested):
        time.sleep(0.01)
    _Stop.resubscribe = False


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


def _poll_loop(poll: Callable[[], object], reporter: _Reporter, close: Callable[[], object], delay_ms: int,
               resubscribe: Callable[[], object]) -> None:
    """Poll until SIGTERM, reporting after every poll; then close (leaving the group).

    After SIGUSR1 the loop only waits for SIGTERM: no poll, no commit, heartbeats go on; it
    says so once (``stalled``), when the poll in flight has returned.
    """
    stalled = False
    while not _Stop.requested:
        if _Stop.stall:
            if not stalled:
                stalled = True
                _emit(event="stalled")
            time.sleep(0.1)
            continue
        if _Stop.resubscribe:
            _Stop.resubscribe = False
            resubscribe()
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
    parser.add_argument("--assignor", choices=ASSIGNORS, nargs="+", default=["range"],
                        help="classic only: the assignors the member supports, preferred first")
    parser.add_argument("--instance-id", help="group.instance.id: a static member")
    parser.add_argument("--more-topics", nargs="*", default=[], help="added to the subscription on SIGUSR2")
    parser.add_argument("--session-timeout-ms", type=int, default=10000)
    parser.add_argument("--max-poll-interval-ms", type=int, default=300000,
                        help="classic only: the heartbeat thread leaves the group when poll stops for this long")
    parser.add_argument("--hold", action="store_true", help="classic only: join on SIGUSR2, not at start")
    parser.add_argument("--assign-delay-ms", type=int, default=0,
                        help="classic only: the leader's assignment takes this much longer")
    parser.add_argument("--commit-interval-ms", type=int, default=1000)
    parser.add_argument("--process-delay-ms", type=int, default=0, help="slow consumer: sleep per poll")
    args = parser.parse_args(argv)
    _Stop.install()
    (run_kip848 if args.protocol == "consumer" else run_classic)(args)


if __name__ == "__main__":
    main()

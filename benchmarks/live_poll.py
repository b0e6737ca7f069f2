"""The live group-state poll's admin traffic at many groups: requests and seconds per poll.

Starts a local KRaft broker, creates N groups cheaply (one OffsetCommit each through the admin
API: Empty classic groups, as many as the coordinator holds), then runs
:meth:`streaming.live.poller.LivePoller.poll_once` against them: the first poll (every group
new, so up to ``--live-describe-max`` of them described) and then steady polls (no group
changed: ListGroups only). Prints requests by API and the poll's wall time.
Run: ``python -m benchmarks.live_poll [N ...]`` (several N reuse the groups already made).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from kafka import KafkaAdminClient
from kafka import TopicPartition as KafkaTopicPartition
from kafka import errors as Errors
from kafka.structs import OffsetAndMetadata

from streaming.live.config import DEFAULT_DESCRIBE_MAX
from streaming.live.poller import LivePoller
from streaming.live.state import LiveStates
from streaming.live.view import StateView
from testbed.broker import LocalKafka
from testbed.workload import Admin


def make_groups(admin: KafkaAdminClient, topic: str, start: int, stop: int) -> None:
    offsets = {KafkaTopicPartition(topic, 0): OffsetAndMetadata(0, "", -1)}
    for i in range(start, stop):
        for attempt in range(60):  # the first commit creates __consumer_offsets: no coordinator until it exists
            try:
                admin.alter_group_offsets(f"bench-{i:06d}", offsets)
                break
            except Errors.CoordinatorNotAvailableError:
                if attempt == 59:
                    raise
                time.sleep(0.5)


def measure(bootstrap: str, steady_polls: int = 5) -> dict[str, object]:
    view = StateView(LiveStates(), lambda *_: None, stale_after_s=30.0)
    poller = LivePoller(bootstrap, view, 10.0, DEFAULT_DESCRIBE_MAX)
    try:
        poller.poll_once()  # connects and lists every group for the first time
        first = (poller.last_seconds, dict(poller.requests))
        times = []
        for _ in range(steady_polls):
            before = dict(poller.requests)
            poller.poll_once()
            times.append(poller.last_seconds)
        steady = {api: poller.requests[api] - before.get(api, 0) for api in poller.requests}
        return {"groups": poller.groups, "first_s": round(first[0], 3), "first_requests": first[1],
                "steady_median_s": round(statistics.median(times), 3), "steady_requests": steady,
                "errors": dict(poller.errors)}
    finally:
        poller.stop()


def main(counts: list[int]) -> None:
    broker = LocalKafka(Path(tempfile.mkdtemp(prefix="live-bench-")))
    broker.start()
    try:
        Admin(broker.bootstrap).create_topic("bench", 1)
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        made = 0
        for count in sorted(counts):
            started = time.monotonic()
            make_groups(admin, "bench", made, count)
            made = count
            print(f"{count} groups made in {time.monotonic() - started:.0f}s; Kafka {broker.version}", flush=True)
            print(measure(broker.bootstrap), flush=True)
        admin.close()
    finally:
        broker.stop()


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [1000, 10000])

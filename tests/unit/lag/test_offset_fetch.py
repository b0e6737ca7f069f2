"""The scrape-time OffsetFetch: one failing group costs only itself, and what the book keeps when it fails."""

from __future__ import annotations

from kafka import errors as Errors
from kafka.structs import OffsetAndMetadata
from kafka.structs import TopicPartition as KafkaTopicPartition

from streaming.lag.poller import LogEndPoller
from streaming.lag.tracker import LagTracker


class GroupAdmin:
    """An OffsetFetch that fails the whole call when it includes a refused group (kafka-python raises on
    any group-level error), or times out altogether."""

    def __init__(self, refused: set[str], timeout: bool = False) -> None:
        self.refused, self.timeout = refused, timeout
        self.calls: list[list[str]] = []

    def list_group_offsets(self, specs):
        self.calls.append(sorted(specs))
        if self.timeout:
            raise Errors.KafkaTimeoutError("timed out")
        if self.refused & specs.keys():
            raise Errors.GroupAuthorizationFailedError("OffsetFetch failed")
        return {g: {KafkaTopicPartition("t", 0): OffsetAndMetadata(len(g), "", -1),
                    KafkaTopicPartition("t", 1): OffsetAndMetadata(-1, "", -1)} for g in specs}

    def close(self) -> None:
        pass


def poller_with(admin: GroupAdmin) -> tuple[LogEndPoller, LagTracker]:
    tracker = LagTracker(interval_s=10)
    return LogEndPoller("unused", tracker, admin_factory=lambda **_: admin), tracker


def test_a_refused_group_costs_only_itself() -> None:
    admin = GroupAdmin({"secret"})
    poller, tracker = poller_with(admin)
    found = poller.fetch_committed(["a", "bb", "secret", "dddd"])
    assert found == {"a": {("t", 0): 1}, "bb": {("t", 0): 2}, "dddd": {("t", 0): 4}}  # -1: no commit, left out
    assert tracker.errors() == {"auth": 1}
    assert len(admin.calls) <= 5  # halves, not one request per group


def test_a_timeout_answers_nothing_and_asks_no_further() -> None:
    admin = GroupAdmin(set(), timeout=True)
    poller, tracker = poller_with(admin)
    assert poller.fetch_committed(["a", "b", "c"]) == {}
    assert len(admin.calls) == 1 and tracker.errors() == {"timeout": 3}

"""The lag book driven by data alone: committed offsets, owned partitions and log-end samples in, rows out.

No publisher, exporter or thread: a tracker on a test clock and a list that records what the book shows.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping

import pytest

from streaming.lag.book import GroupLag, LagBook
from streaming.lag.config import LagConfig, TopicFilter
from streaming.lag.tracker import LagTracker
from streaming.protocol import TopicPartition
from streaming.settings import OptionError

NOW = 1_700_000_000.0
A: tuple[tuple[str, str], ...] = (("client_id", "a"),)
B: tuple[tuple[str, str], ...] = (("client_id", "b"),)


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


class Shown:
    """What the book hands over: every group view, the last log ends."""

    def __init__(self) -> None:
        self.views: list[GroupLag] = []
        self.ends: Mapping[TopicPartition, tuple[int, int]] = {}

    def group(self, view: GroupLag) -> None:
        self.views.append(view)

    def log_ends(self, offsets: Mapping[TopicPartition, tuple[int, int]]) -> None:
        self.ends = offsets

    def last(self, group: str) -> GroupLag:
        return [v for v in self.views if v.group == group][-1]


def book() -> tuple[LagBook, LagTracker, Shown, Clock]:
    clock = Clock()
    tracker = LagTracker(interval_s=10, clock=clock)
    shown = Shown()
    return LagBook(tracker, shown), tracker, shown, clock


def sample(tracker: LagTracker, clock: Clock, offsets: Mapping[TopicPartition, tuple[int, int]]) -> None:
    """One poll round: log starts and ends sampled now."""
    tracker.record_offsets(offsets, clock.now)
    tracker.record_round(clock.now, {})


def test_the_book_alone_tells_the_tracker_what_to_poll() -> None:
    lag, tracker, shown, _ = book()
    lag.update("g", {("t", 0): 5, ("t", 1): 7}, {A: [("t", 0)], B: [("t", 2)]})
    assert not shown.views  # nothing sampled yet: nothing to show
    lag.refresh(NOW)
    assert tracker.partitions() == {("t", 0), ("t", 1), ("t", 2)}  # committed, and t/2 owned but never committed
    lag.remove("g")
    lag.refresh(NOW)
    assert tracker.partitions() == set()


def test_rows_uncommitted_partitions_members_and_log_ends() -> None:
    lag, tracker, shown, clock = book()
    lag.update("g", {("t", 0): 5, ("t", 1): 7}, {A: [("t", 0)], B: [("t", 2)]}, NOW)
    lag.refresh(NOW)
    sample(tracker, clock, {("t", 0): (0, 20), ("t", 1): (0, 7), ("t", 2): (3, 13)})
    lag.refresh(NOW)
    view = shown.last("g")
    assert {tp: row[0] for tp, row in view.rows.items()} == {("t", 0): 15, ("t", 1): 0}
    assert view.uncommitted == {("t", 2): 10}  # log end − log start: what an earliest reset reads
    assert {owner: list(parts) for owner, parts in view.owned.items()} == {A: [("t", 0)], B: [("t", 2)]}
    assert view.margins == {("t", 0): 5, ("t", 1): 7} and view.lost == {}
    assert sorted(view.compat_rows) == [("t", 0, 5, 15), ("t", 1, 7, 0), ("t", 2, -1, -1)]
    assert shown.ends == {("t", 0): (0, 20), ("t", 1): (0, 7), ("t", 2): (3, 13)}


def test_a_commit_past_its_sample_waits_for_a_newer_sample() -> None:
    lag, tracker, shown, clock = book()
    lag.update("g", {("t", 0): 5}, {})
    lag.refresh(NOW)
    sample(tracker, clock, {("t", 0): (0, 20)})
    lag.refresh(NOW)
    assert shown.last("g").rows == {("t", 0): (15, None)}
    lag.update("g", {("t", 0): 25}, None)  # the consumer moved on since the sample
    assert shown.last("g").rows == {} and lag.overtaken == 1


def test_truncations_are_counted_once_per_commit() -> None:
    lag, tracker, shown, clock = book()
    lag.update("g", {("t", 0): 50}, {})
    lag.refresh(NOW)  # the commit is wanted (first seen now) before the sample that finds it truncated
    clock.now += 1
    sample(tracker, clock, {("t", 0): (0, 30)})
    lag.refresh(clock.now)
    lag.refresh(clock.now + 1)
    assert shown.last("g").truncations == {"t": 1}


def test_a_group_committing_past_a_truncated_log_counts_each_commit_and_holds_one_entry_a_partition() -> None:
    lag, tracker, shown, clock = book()
    for commit in range(50, 250):
        lag.update("g", {("t", 0): commit}, {})
        lag.refresh(clock.now)  # seen before the sample that finds it past the log end
        clock.now += 1
        sample(tracker, clock, {("t", 0): (0, 30)})
        lag.refresh(clock.now)
        lag.refresh(clock.now)
    assert shown.last("g").truncations == {"t": 200}
    assert lag._truncated == {"g": {("t", 0): 249}}


def test_records_deleted_below_a_commit_are_lost_once() -> None:
    lag, tracker, shown, clock = book()
    lag.update("g", {("t", 0): 10}, {})
    lag.refresh(NOW)
    sample(tracker, clock, {("t", 0): (40, 100)})
    lag.refresh(NOW)
    assert shown.last("g").lost == {}  # the job may not have folded the group's newer commit yet
    lag.folded_through(int((NOW + 5) * 1000))  # a batch folded commits written after the sample
    lag.refresh(NOW)
    lag.refresh(NOW)
    view = shown.last("g")
    assert view.lost == {"t": 30} and view.margins == {("t", 0): -30}


def test_the_verdict_follows_the_samples() -> None:
    """Records keep arriving, the group's commit stays put and its last commit is older than the window."""
    lag, tracker, shown, clock = book()
    lag.update("g", {("t", 0): 10}, {}, last_commit_s=NOW - 3600)
    for i in range(12):  # a whole window, sampled without a gap
        clock.now = NOW + 60 * i
        sample(tracker, clock, {("t", 0): (0, 100 + 50 * i)})
        lag.refresh(clock.now)
    assert shown.last("g").verdict == ("ERR", "stopped")


def test_no_verdict_before_a_sample_of_the_groups_partitions() -> None:
    lag, tracker, shown, clock = book()
    lag.update("g", {("t", 0): 10}, {})
    lag.update("h", {("u", 0): 10}, {})
    lag.refresh(NOW)
    sample(tracker, clock, {("u", 0): (0, 20)})
    lag.refresh(NOW)
    assert [v.group for v in shown.views] == ["h"] and shown.last("h").verdict == ("OK", "ok")


def test_a_group_changed_meanwhile_is_not_shown_from_its_older_offsets() -> None:
    """Every view is built from the offsets the book holds when it is handed over."""
    lag, tracker, shown, clock = book()
    lag.update("g", {("t", 0): 5}, {})
    lag.refresh(NOW)
    sample(tracker, clock, {("t", 0): (0, 20)})
    lag.refresh(NOW)
    lag.update("g", {("t", 0): 12}, None)
    assert shown.last("g").rows[("t", 0)][0] == 8


def test_a_failed_or_partial_offset_fetch_keeps_the_fresh_offsets_and_is_no_rewind() -> None:
    """A scrape's OffsetFetch answers g and h, then only h (g's coordinator failed), then nothing (a timeout):
    g keeps the offsets the first fetch found rather than falling back to the job's older ones, and its
    verdict never reads the difference as a rewind."""
    import time

    clock = Clock()
    tracker = LagTracker(interval_s=10, clock=clock)
    shown = Shown()
    answers: list[dict[str, dict[TopicPartition, int]]] = [
        {"g": {("t", 0): 150}, "h": {("u", 0): 15}}, {"h": {("u", 0): 18}}, {}]

    def fetch_log_ends() -> bool:
        clock.now += 10
        sample(tracker, clock, {("t", 0): (0, 200), ("u", 0): (0, 20)})
        return True

    lag = LagBook(tracker, shown, fetch_log_ends=fetch_log_ends, max_age_s=0.25,
                  fetch_committed=lambda groups: answers.pop(0))
    lag.update("g", {("t", 0): 100}, {}, time.time())  # committing now: a scrape fetches its offsets
    lag.update("h", {("u", 0): 10}, {}, time.time())
    sample(tracker, clock, {("t", 0): (0, 200), ("u", 0): (0, 20)})
    lag.refresh(clock.now)
    assert shown.last("g").rows[("t", 0)][0] == 100
    for h_lag in (5, 2, 2):
        lag.freshen()
        assert shown.last("g").rows[("t", 0)][0] == 50  # 200 − the fetched 150, kept through both failures
        assert shown.last("h").rows[("u", 0)][0] == h_lag
        assert shown.last("g").verdict == ("OK", "ok")
    assert not answers


def test_a_fetched_offset_older_than_the_jobs_is_not_laid_over_it() -> None:
    """The scrape's OffsetFetch is answered, then a batch folds a newer commit before the answer is taken:
    the older fetched offset must not hide the job's newer one (the group would read behind by what it
    consumed since, until the next fetch)."""
    import time

    clock = Clock()
    tracker = LagTracker(interval_s=10, clock=clock)
    shown = Shown()
    lag: LagBook

    def fetch_committed(groups: list[str]) -> dict[str, dict[TopicPartition, int]]:
        lag.update("g", {("t", 0): 190}, None, time.time())  # the batch thread, while the answer travels
        return {"g": {("t", 0): 150}}

    def fetch_log_ends() -> bool:
        clock.now += 10
        sample(tracker, clock, {("t", 0): (0, 200)})
        return True

    lag = LagBook(tracker, shown, fetch_log_ends=fetch_log_ends, max_age_s=0.25, fetch_committed=fetch_committed)
    lag.update("g", {("t", 0): 100}, {}, time.time())
    sample(tracker, clock, {("t", 0): (0, 200)})
    lag.refresh(clock.now)
    lag.freshen()
    assert shown.last("g").rows[("t", 0)][0] == 10  # 200 − the job's 190, not 200 − the fetched 150


def test_topics_left_out_are_never_polled_shown_or_counted_lost() -> None:
    """--exclude-topics (a principal without Describe on some topics, a topic nobody needs lag for) wins over
    --include-topics: the book drops those partitions on the way in, committed and owned alike."""
    clock = Clock()
    tracker = LagTracker(interval_s=10, clock=clock)
    shown = Shown()
    lag = LagBook(tracker, shown, topics=TopicFilter(include="^(orders|audit)", exclude="^audit"))
    lag.update("g", {("orders", 0): 10, ("audit", 0): 10, ("other", 0): 1},
               {A: [("orders", 0), ("audit", 0)], B: [("other", 1)]}, NOW)
    lag.refresh(NOW)
    assert tracker.partitions() == {("orders", 0)}
    sample(tracker, clock, {("orders", 0): (40, 100), ("audit", 0): (40, 100), ("other", 0): (40, 100)})
    lag.folded_through(int((NOW + 5) * 1000))
    lag.refresh(NOW)
    view = shown.last("g")
    assert set(view.rows) == {("orders", 0)}
    assert {owner: list(parts) for owner, parts in view.owned.items()} == {A: [("orders", 0)], B: []}
    assert view.lost == {"orders": 30}
    lag.update("g", {("orders", 0): 50, ("audit", 0): 5}, None, NOW)  # commits alone keep the filter too
    assert set(shown.last("g").rows) == {("orders", 0)}


def test_the_topic_filter_options() -> None:
    assert LagConfig().topic_filter() is None, "by default every topic's lag is followed"
    only = LagConfig(include_topics="^orders$").topic_filter()
    assert only is not None and only.follows("orders") and not only.follows("orders-dlq")
    with pytest.raises(OptionError, match=r"--exclude-topics '\(': missing \)"):
        LagConfig(exclude_topics="(")


def test_a_scrape_asks_for_committed_offsets_before_the_log_ends() -> None:
    """As kafka-consumer-groups does. Between the two requests a consumer caught up at log end 100 commits 100
    and the producer writes 97 more: asked in this order the lag reads high for a moment (137); asked the other
    way it read 0, at a log end the group had already passed, while Kafka's tool said 97."""
    clock = Clock()
    tracker = LagTracker(interval_s=10, clock=clock)
    shown = Shown()
    asked: list[str] = []
    world = {"committed": 60, "end": 100}

    def meanwhile() -> None:
        world.update(committed=100, end=197)

    def fetch_committed(groups: list[str]) -> dict[str, dict[TopicPartition, int]]:
        asked.append("committed")
        found = {g: {("t", 0): world["committed"]} for g in groups}
        meanwhile()
        return found

    def fetch_log_ends() -> bool:
        asked.append("log ends")
        tracker.record_offsets({("t", 0): (0, world["end"])}, clock.now)
        meanwhile()
        return True

    lag = LagBook(tracker, shown, fetch_log_ends=fetch_log_ends, max_age_s=0.25, fetch_committed=fetch_committed,
                  clock=clock)
    lag.update("g", {("t", 0): 60}, {}, time.time())  # a group that commits now
    lag.freshen()
    assert asked == ["committed", "log ends"]
    assert shown.last("g").rows[("t", 0)][0] == 137


def test_a_fresh_poll_round_does_not_spare_a_scrape_its_commit_fetch() -> None:
    """The poller's round brings log ends, not committed offsets: a scrape right after it still asks for the
    active groups' commits (and the log ends after them), or it would set new log ends against the last
    scrape's commits, seconds older (read 214 above Kafka's tool)."""
    clock = Clock()
    tracker = LagTracker(interval_s=10, clock=clock)
    asked: list[str] = []

    def fetch_committed(groups: list[str]) -> dict[str, dict[TopicPartition, int]]:
        asked.append("committed")
        return {g: {("t", 0): 150} for g in groups}

    def fetch_log_ends() -> bool:
        asked.append("log ends")
        return True

    lag = LagBook(tracker, Shown(), fetch_log_ends=fetch_log_ends, max_age_s=0.25, fetch_committed=fetch_committed,
                  clock=clock)
    lag.update("g", {("t", 0): 60}, {}, time.time())
    lag.freshen()
    assert asked == ["committed", "log ends"]
    tracker.record_offsets({("t", 0): (0, 200)}, time.time())  # a poll round, just now
    tracker.record_round(time.time(), {})
    lag.freshen()  # within max_age of that round, and of the first fetch: nothing asked
    assert asked == ["committed", "log ends"]
    lag._commits_asked_at -= 1.0  # the first fetch a second ago
    lag.freshen()
    assert asked == ["committed", "log ends"] * 2


def test_a_bounded_scrape_serves_what_was_rendered_while_a_slow_round_goes_on() -> None:
    """A cluster slow to answer: the scrape waits for the round only ``wait_s``, a second scrape meanwhile waits
    for the same round instead of starting another, and what the round found is shown once it ends."""
    clock = Clock()
    tracker = LagTracker(interval_s=10, clock=clock)
    shown = Shown()
    answer = threading.Event()
    asked: list[float] = []

    def fetch_log_ends() -> bool:
        asked.append(time.monotonic())
        answer.wait(10)
        tracker.record_offsets({("t", 0): (0, 90)}, time.time())
        return True

    lag = LagBook(tracker, shown, fetch_log_ends=fetch_log_ends, max_age_s=0.25, clock=clock)
    lag.update("g", {("t", 0): 60}, {}, time.time())
    started = time.monotonic()
    assert lag.freshen(wait_s=1.0) is False
    waited = time.monotonic() - started
    assert 1.0 <= waited < 5  # its share, not the cluster's 10 s
    started = time.monotonic()
    assert lag.freshen(wait_s=1.0) is False
    assert time.monotonic() - started < 0.5  # the round began a share ago: not waited for again
    assert len(asked) == 1  # one round, shared
    assert not shown.views  # nothing sampled before the round
    answer.set()
    assert lag.freshen(wait_s=5) is True  # the same round, now ended (or a new one, at once)
    assert shown.last("g").rows[("t", 0)][0] == 30


def test_a_round_that_fails_ends_the_scrapes_wait(caplog: pytest.LogCaptureFixture) -> None:
    def fetch_log_ends() -> bool:
        raise RuntimeError("the admin client broke")

    lag = LagBook(LagTracker(interval_s=10), Shown(), fetch_log_ends=fetch_log_ends, max_age_s=0.25)
    lag.update("g", {("t", 0): 60}, {}, time.time())
    with caplog.at_level(logging.ERROR, logger="streaming.lag.book"):
        assert lag.freshen(wait_s=5) is True
    assert "freshening the lag for a scrape failed" in caplog.text
    with pytest.raises(RuntimeError):
        lag.freshen()  # unbounded, the caller's own: it sees the error


def test_a_topic_the_members_dropped_is_no_verdict_on_the_group() -> None:
    """The group's members consume "kept" (committing as records come) and dropped "old" long ago: records
    still arriving on "old" below its last commit do not make the group stopped; unassigned, it would be."""
    lag, tracker, shown, clock = book()
    for i in range(12):  # a whole window, sampled without a gap
        clock.now = NOW + 60 * i
        lag.update("g", {("kept", 0): 100 + 50 * i, ("old", 0): 10}, {A: [("kept", 0)]}, last_commit_s=clock.now)
        sample(tracker, clock, {("kept", 0): (0, 100 + 50 * i), ("old", 0): (0, 100 + 50 * i)})
        lag.refresh(clock.now)
    assert shown.last("g").verdict[0] == "OK", shown.last("g").verdict
    lag.update("g", {("kept", 0): 650, ("old", 0): 10}, {A: []}, last_commit_s=clock.now)  # members without topics
    for i in range(12, 24):
        clock.now = NOW + 60 * i
        sample(tracker, clock, {("kept", 0): (0, 650), ("old", 0): (0, 100 + 50 * i)})
        lag.refresh(clock.now)
    assert shown.last("g").verdict != ("OK", "ok")  # nothing assigned: every committed topic is judged

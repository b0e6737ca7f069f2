"""Records lost, counted only when certain: from data alone (a tracker on a test clock, a recording show).

The Streams purge sequence, a re-created topic, a restart keeping the counter, a job not ready yet, and a
loss the job cannot confirm (a quiet offsets topic) confirmed by an OffsetFetch instead.
"""

from __future__ import annotations

from pathlib import Path

from streaming.lag.book import FOLD_MARGIN_S, LagBook
from streaming.lag.loss_file import LossFile
from streaming.lag.tracker import LagTracker
from streaming.protocol import TopicPartition
from tests.unit.lag.test_book import NOW, Clock, Shown, sample

TP: TopicPartition = ("repartition", 0)


class Fetches:
    """An OffsetFetch answering from a dict of committed offsets, recording who was asked."""

    def __init__(self) -> None:
        self.committed: dict[str, dict[TopicPartition, int]] = {}
        self.asked: list[list[str]] = []

    def __call__(self, groups: list[str]) -> dict[str, dict[TopicPartition, int]]:
        self.asked.append(list(groups))
        return {g: dict(self.committed[g]) for g in groups if g in self.committed}


def book(ready: bool = True, fetch: Fetches | None = None, path: Path | None = None,
         ) -> tuple[LagBook, LagTracker, Shown, Clock, list[bool]]:
    clock = Clock()
    tracker = LagTracker(interval_s=10, clock=clock)
    shown = Shown()
    is_ready = [ready]
    lag = LagBook(tracker, shown, fetch_committed=fetch, ready=lambda: is_ready[0],
                  loss_file=LossFile(path) if path is not None else None, loss_save_s=60, clock=clock)
    return lag, tracker, shown, clock, is_ready


def batch(lag: LagBook, committed: int, newest_record_s: float) -> None:
    """A batch folds the group's commit; its newest record was written at ``newest_record_s``."""
    with lag.batch():
        lag.update("streams-app", {TP: committed}, {}, newest_record_s)
        lag.folded_through(int(newest_record_s * 1000))


def test_a_streams_purge_after_its_commit_is_no_loss_and_a_real_one_is_counted() -> None:
    lag, tracker, shown, clock, _ = book()
    batch(lag, 900, NOW - 1)  # the job folded the commit at 900 (every commit up to NOW - 1)
    lag.refresh(NOW)
    # The app commits 1000 at NOW and purges below it within milliseconds; the poller samples the new log
    # start before the job's next trigger has folded that commit.
    clock.now = NOW + 0.5
    sample(tracker, clock, {TP: (1000, 1040)})
    lag.refresh(clock.now)
    assert shown.last("streams-app").lost == {}  # 100 records below the job's 900 were consumed, not lost
    clock.now = NOW + 3
    batch(lag, 1000, NOW + 3)  # the next batch folds the commit at 1000 (and records written until NOW + 3)
    lag.refresh(clock.now)
    assert shown.last("streams-app").lost == {}
    # The app dies at 1000; retention (or a delete-records) passes its commit while the job keeps folding.
    clock.now = NOW + 60
    sample(tracker, clock, {TP: (1300, 1400)})
    lag.refresh(clock.now)
    assert shown.last("streams-app").lost == {}  # not yet known that 1000 is still the group's commit
    batch(lag, 1000, clock.now + FOLD_MARGIN_S + 1)  # other groups' commits folded past the sample
    lag.refresh(clock.now)
    assert shown.last("streams-app").lost == {"repartition": 300}
    lag.refresh(clock.now)
    assert shown.last("streams-app").lost == {"repartition": 300}  # counted once


def test_nothing_is_counted_before_the_job_is_ready() -> None:
    lag, tracker, shown, clock, ready = book(ready=False)
    batch(lag, 10, NOW + 60)  # a catch-up: hours-old commits folded, the job not ready yet
    sample(tracker, clock, {TP: (500, 600)})
    lag.refresh(NOW)
    assert shown.last("streams-app").lost == {}
    ready[0] = True
    lag.refresh(NOW)
    assert shown.last("streams-app").lost == {"repartition": 490}


def test_a_loss_the_job_cannot_confirm_is_confirmed_by_an_offset_fetch_within_a_budget() -> None:
    fetch = Fetches()
    lag, tracker, shown, clock, _ = book(fetch=fetch)
    batch(lag, 100, NOW - 30)  # a quiet offsets topic: the job folded nothing since
    sample(tracker, clock, {TP: (250, 300)})
    fetch.committed = {"streams-app": {TP: 260}}  # it did commit meanwhile: past the new log start
    lag.refresh(clock.now)
    assert fetch.asked == [["streams-app"]] and shown.last("streams-app").lost == {}
    lag.refresh(clock.now)
    assert fetch.asked == [["streams-app"]]  # once per log-start sample
    clock.now += 10
    sample(tracker, clock, {TP: (400, 500)})  # the group stopped at 260 (the job has not seen it: no batch)
    lag.refresh(clock.now)
    assert len(fetch.asked) == 2 and shown.last("streams-app").lost == {"repartition": 140}
    lag.refresh(clock.now)
    assert len(fetch.asked) == 2 and shown.last("streams-app").lost == {"repartition": 140}


def test_a_recreated_topic_counts_afresh() -> None:
    lag, tracker, shown, clock, _ = book()
    batch(lag, 1000, NOW + 30)
    sample(tracker, clock, {TP: (5000, 6000)})
    lag.refresh(clock.now)
    assert shown.last("streams-app").lost == {"repartition": 4000}
    # Deleted and created again; the group's reset committed 0, then 800 records are deleted unread.
    clock.now += 10
    batch(lag, 0, clock.now + 30)
    sample(tracker, clock, {TP: (0, 1000)})
    lag.refresh(clock.now)
    clock.now += 10
    sample(tracker, clock, {TP: (800, 1000)})
    lag.refresh(clock.now)
    assert shown.last("streams-app").lost == {"repartition": 4800}


def test_a_restart_keeps_what_was_counted_and_counts_nothing_twice(tmp_path: Path) -> None:
    path = tmp_path / "monitor" / "lost-records.json"
    lag, tracker, shown, clock, _ = book(path=path)
    batch(lag, 100, NOW + 30)
    sample(tracker, clock, {TP: (400, 500)})
    lag.refresh(clock.now)
    assert shown.last("streams-app").lost == {"repartition": 300}
    assert not path.exists()  # written at most every loss_save_s...
    lag.close()  # ...and at stop
    assert path.exists() and not path.with_name(path.name + ".tmp").exists()

    lag, tracker, shown, clock, _ = book(path=path)  # the next run, the same stuck group
    batch(lag, 100, NOW + 30)
    assert shown.views == [] or shown.last("streams-app").lost == {"repartition": 300}
    sample(tracker, clock, {TP: (450, 500)})
    lag.refresh(clock.now)
    assert shown.last("streams-app").lost == {"repartition": 350}  # 300 kept, 50 newly deleted, none again
    clock.now += 61
    sample(tracker, clock, {TP: (450, 500)})
    lag.refresh(clock.now)  # changed since the last write and LOSS_SAVE_S passed: written
    assert '"repartition":350' in path.read_text()


def test_an_unreadable_loss_file_is_set_aside(tmp_path: Path) -> None:
    path = tmp_path / "lost-records.json"
    path.write_text("{half")
    assert LossFile(path).load() == {}
    assert path.with_name("lost-records.json.unreadable").exists()

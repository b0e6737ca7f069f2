"""The one lifecycle: start in order, stop in reverse, a failed start undone, a failed stop not fatal;
and the polling thread both pollers are."""

from __future__ import annotations

import threading

import pytest

from streaming.lifecycle import Lifecycle, PollingThread


class Part:
    def __init__(self, name: str, log: list[str], fail_start: bool = False, fail_stop: bool = False) -> None:
        self.name, self.log, self.fail_start, self.fail_stop = name, log, fail_start, fail_stop

    def start(self) -> None:
        if self.fail_start:
            raise RuntimeError(f"{self.name} cannot start")
        self.log.append(f"start {self.name}")

    def stop(self) -> None:
        self.log.append(f"stop {self.name}")
        if self.fail_stop:
            raise RuntimeError(f"{self.name} cannot stop")


def test_started_in_order_and_stopped_in_reverse() -> None:
    log: list[str] = []
    lifecycle = Lifecycle([Part("server", log), Part("query", log)])
    lifecycle.add(Part("poller", log))
    lifecycle.start()
    assert lifecycle.started == ["server", "query", "poller"]
    lifecycle.stop()
    assert log == ["start server", "start query", "start poller", "stop poller", "stop query", "stop server"]
    assert lifecycle.started == []
    lifecycle.stop()  # twice: nothing left to stop
    assert len(log) == 6


def test_a_failed_start_stops_what_started_before_it() -> None:
    log: list[str] = []
    lifecycle = Lifecycle([Part("server", log), Part("query", log, fail_start=True), Part("poller", log)])
    with pytest.raises(RuntimeError, match="query cannot start"):
        lifecycle.start()
    assert log == ["start server", "stop server"]
    assert lifecycle.started == []


def test_a_failed_stop_does_not_keep_the_others_running(caplog: pytest.LogCaptureFixture) -> None:
    log: list[str] = []
    lifecycle = Lifecycle([Part("server", log), Part("query", log, fail_stop=True), Part("poller", log)])
    lifecycle.start()
    lifecycle.stop()
    assert log[-3:] == ["stop poller", "stop query", "stop server"]
    assert "query failed to stop" in caplog.text


class Rounds(PollingThread):
    def __init__(self) -> None:
        super().__init__("rounds")
        self.rounds, self.closed, self.threads = 0, 0, set()
        self.ran = threading.Event()

    def _run(self) -> None:
        while not self._stopping.is_set():
            self.rounds += 1
            self.threads.add(threading.current_thread().name)
            self.ran.set()
            self._stopping.wait(0.01)

    def _close(self) -> None:
        self.closed += 1


def test_a_polling_thread_runs_until_stopped_and_closes_once_on_its_way_out() -> None:
    rounds = Rounds()
    rounds.start()
    assert rounds.ran.wait(5)
    rounds.stop()
    assert rounds.threads == {"rounds"} and rounds.rounds >= 1 and rounds.closed == 1
    assert rounds._thread is not None and not rounds._thread.is_alive()
    stopped_at = rounds.rounds
    rounds.ran.clear()
    rounds.start()  # a component may be started again after a stop
    assert rounds.ran.wait(5)
    rounds.stop()
    assert rounds.rounds > stopped_at and rounds.closed == 2


def test_a_polling_thread_never_started_still_closes_its_clients_at_stop() -> None:
    rounds = Rounds()
    rounds.stop()
    rounds.stop()
    assert rounds.rounds == 0 and rounds.closed == 2

"""The health verdict's rules, each on a recorded sequence of lag refreshes (every 60 s, a 600 s window).

Sequences are (committed, log end) sums per refresh, as :class:`HealthWindows` records them from the
lag series; ``commits`` says when the group last wrote a commit at each refresh.
"""

from __future__ import annotations

from streaming.lag.health import HealthWindows, Sample, evaluate

T0 = 1_700_000_000.0


def run(offsets: list[tuple[int, int]], commits: list[float] | None = None, state: str = "Stable",
        rebalances: list[float] | None = None) -> tuple[str, str]:
    windows = HealthWindows(600.0)
    now = T0
    for i, (committed, end) in enumerate(offsets):
        now = T0 + 60 * i
        windows.record("g", {("t", 0): committed}, {("t", 0): end}, (commits or [now] * len(offsets))[i], now)
    windows.state("g", state)
    windows.rebalanced("g", 0, T0)
    for n, at in enumerate(rebalances or [], start=1):
        windows.rebalanced("g", n, at)
    return windows.verdict("g", now)


def test_a_group_keeping_up_is_ok():
    assert run([(100 * i, 100 * i + 5) for i in range(8)]) == ("OK", "ok")
    assert run([(0, 0)]) == ("OK", "ok")  # one sample says nothing yet


def test_stopped_no_commit_in_the_window_while_records_arrive():
    commits = [T0 - 2000] * 12  # one commit seen: no cadence yet, so three windows without one
    assert run([(50, 100 + 10 * i) for i in range(12)], commits) == ("ERR", "stopped")
    # Nothing arriving: an idle topic and an idle group are fine.
    assert run([(100, 100)] * 12, commits) == ("OK", "ok")


def test_stalled_commits_keep_coming_with_the_same_offset_while_lag_grows():
    assert run([(50, 100 + 10 * i) for i in range(6)]) == ("ERR", "stalled")


def test_rewinding_a_committed_offset_went_back():
    assert run([(100, 120), (200, 220), (20, 230), (120, 240)]) == ("WARN", "rewinding")


def test_rebalancing_is_err_when_nothing_moves_and_warn_when_it_does():
    assert run([(50, 100 + 10 * i) for i in range(4)], state="PreparingRebalance") == ("ERR", "rebalancing")
    assert run([(50 + 20 * i, 100 + 20 * i) for i in range(4)], state="Reconciling") == ("WARN", "rebalancing")


def test_storm_three_rebalances_in_the_window_and_not_older_ones():
    steady = [(100 * i, 100 * i + 5) for i in range(8)]
    assert run(steady, rebalances=[T0 + 100, T0 + 200, T0 + 300]) == ("WARN", "storm")
    windows = HealthWindows(600.0)
    windows.rebalanced("g", 0, T0)
    windows.rebalanced("g", 3, T0)  # three at once, then ten minutes of quiet
    for i in range(12):
        windows.record("g", {("t", 0): 100 * i}, {("t", 0): 100 * i + 5}, T0 + 60 * i, T0 + 60 * i)
    assert windows.verdict("g", T0 + 660) == ("OK", "ok")


def test_lagging_lag_grows_at_every_refresh_though_the_group_progresses():
    assert run([(100 * i, 150 * i + 10) for i in range(5)]) == ("WARN", "lagging")
    assert run([(100 * i, 150 * i + 10) for i in range(2)]) == ("OK", "ok")  # two samples are not a trend
    wobbly = [(0, 10), (100, 160), (300, 310), (400, 460)]
    assert run(wobbly) == ("OK", "ok")


def test_samples_older_than_the_window_do_not_count():
    old = [Sample(T0, 50, 100, False, T0), Sample(T0 + 60, 0, 100, True, T0 + 60)]
    recent = [Sample(T0 + 700 + 60 * i, 100 * i, 100 * i + 5, False, T0 + 700 + 60 * i) for i in range(3)]
    assert evaluate([*old, *recent], [], "Stable", T0 + 820, 600.0) == ("OK", "ok")
    assert evaluate([*old, *recent], [], "Stable", T0 + 820, 1000.0, max_gap_s=1000) == ("WARN", "rewinding")
    # The same samples with the poller's gap limit: 640 s without a sample, the window starts after it.
    assert evaluate([*old, *recent], [], "Stable", T0 + 820, 1000.0, max_gap_s=90) == ("OK", "ok")


def test_verdict_reaches_metrics_as_one_series_per_group():
    from tests.support.publishing import make_exporter, scrape

    publisher, _ = make_exporter()
    samples = scrape(publisher)[0]
    health = [(lab["status"], lab["reason"]) for lab, v in samples["kafka_consumergroup_health"]
              if lab["group"] == "orders" and v == 1]
    assert health == [("OK", "ok")]


def flink(minutes: int, period_s: float = 1200.0, stop_at_s: float | None = None) -> list[tuple[str, str]]:
    """A Flink job committing on each checkpoint every ``period_s`` (its group Empty: no members, no
    rebalances), records arriving all the time, sampled every 10 s; it stops committing at ``stop_at_s``.
    The verdict at every sample."""
    windows = HealthWindows(600.0, max_gap_s=30.0)
    verdicts = []
    last_commit, committed = T0 - 3 * period_s, 0
    for step in range(minutes * 6):
        now = T0 + 10 * step
        log_end = 10 * step + 1000
        if now - last_commit >= period_s and (stop_at_s is None or now < T0 + stop_at_s):
            last_commit, committed = now, log_end - 5  # everything read up to the checkpoint
        windows.record("g", {("t", 0): committed}, {("t", 0): log_end}, last_commit, now)
        windows.state("g", "Empty")
        verdicts.append(windows.verdict("g", now))
    return verdicts


def test_a_group_committing_every_20_minutes_is_never_stopped_while_it_keeps_its_cadence():
    verdicts = flink(120)
    assert ("ERR", "stopped") not in verdicts and ("ERR", "stalled") not in verdicts
    assert set(verdicts) <= {("OK", "ok"), ("WARN", "lagging")}


def test_a_group_missing_its_20_minute_cadence_by_a_margin_is_stopped():
    verdicts = flink(90, stop_at_s=1800)  # its last commit at 20 minutes (T0 + 1200): none after
    first = next(i for i, v in enumerate(verdicts) if v == ("ERR", "stopped"))
    assert T0 + 10 * first == T0 + 1200 + 2 * 1200 + 10  # twice its interval after its last commit


def test_one_record_on_a_quiet_topic_is_not_a_verdict():
    # A caught-up group committing every 5 s; one record arrives, read before the next commit is seen.
    assert run([(100, 100)] * 8 + [(100, 101)], commits=[T0 + 60 * i for i in range(9)]) == ("OK", "ok")
    # One arrives, and the consumer never reads it while it keeps committing the same offset: stalled once
    # the window holds no caught-up sample and lag grew.
    offsets = [(100, 101)] * 5 + [(100, 102)] * 6
    assert run(offsets, commits=[T0 + 60 * i for i in range(11)]) == ("ERR", "stalled")


def test_a_sampling_gap_is_not_a_verdict():
    windows = HealthWindows(600.0, max_gap_s=30.0)
    last_commit = T0 - 3000  # a dead group: records arrive, no commit for long
    for i in range(12):
        windows.record("g", {("t", 0): 50}, {("t", 0): 100 + i}, last_commit, T0 + 10 * i)
    # 40 s without a sample (the cluster unreachable), then samples again.
    for i in range(3):
        windows.record("g", {("t", 0): 50}, {("t", 0): 200 + i}, last_commit, T0 + 150 + 10 * i)
    assert windows.verdict("g", T0 + 170)[0] != "ERR"
    for i in range(3, 62):
        windows.record("g", {("t", 0): 50}, {("t", 0): 200 + i}, last_commit, T0 + 150 + 10 * i)
        verdict = windows.verdict("g", T0 + 150 + 10 * i)
        assert verdict == ("ERR", "stopped") or 10 * i < 600 - 30  # a whole window after the gap
    assert verdict == ("ERR", "stopped")

"""Live group series: the state shown per group (see :mod:`streaming.live.view`), how long it has
held, the rebalance the offsets topic cannot see yet, and the live poller's own cost.

:func:`state_lines` renders one group's state series whenever its shown state is reconciled
(cached in the exporter like the other group series); :func:`poller_text` renders the
poller's instruments at scrape time.
"""

from __future__ import annotations

from collections.abc import Mapping

from streaming.live.poller import LivePollStats
from streaming.live.view import Shown
from streaming.metrics.exposition import Family, Lines, escape, number
from streaming.metrics.groups import histogram
from streaming.protocol import TopicPartition

G, C = "gauge", "counter"
STATE = Family("kafka_consumergroup_state", G,
               "1 for the group's current state, Kafka's own name (classic: PreparingRebalance, CompletingRebalance, "
               "Stable, Empty, Dead; KIP-848: Assigning, Reconciling, Stable, Empty; streams: NotReady too): the "
               "coordinator's answer to the "
               "live poll while it is fresh, else derived from the offsets topic (docs/metrics.md: which wins when).")
STATE_SINCE = Family("kafka_consumergroup_state_since_timestamp_seconds", G,
                     "When the monitor first saw the group in its current state (label state); time in state is "
                     "time() minus this.")
REBALANCING_SINCE = Family("kafka_consumergroup_rebalancing_since_timestamp_seconds", G,
                           "While the group rebalances (PreparingRebalance, CompletingRebalance, Assigning, "
                           "Reconciling): when the monitor first saw it rebalancing; absent once Stable or Empty.")
REBALANCE_TIMEOUT = Family("kafka_consumergroup_rebalance_timeout_seconds", G,
                           "Longest rebalance timeout of the group's members (classic: max.poll.interval.ms) in its "
                           "records: how long Kafka waits for members to rejoin a rebalance.")
REBALANCING_MEMBERS = Family("kafka_consumergroup_rebalancing_members", G,
                             "Members the coordinator lists while a classic group rebalances (DescribeGroups): those "
                             "that rejoined and those it still waits for.")
OBSERVED_DURATION = Family("kafka_consumergroup_observed_rebalance_duration_seconds", "histogram",
                           "Rebalances as the live poll saw them: from the first poll finding the group rebalancing "
                           "to the first finding it Stable or Empty (join phase included; exact to a poll interval).")
LIVE_FAMILIES = (STATE, STATE_SINCE, REBALANCING_SINCE, REBALANCE_TIMEOUT, REBALANCING_MEMBERS, OBSERVED_DURATION)
LIVE_NAMES = tuple(f.name for f in LIVE_FAMILIES)

RECORDS_LOST = Family("kafka_consumergroup_records_lost_total", C,
                      "Records deleted (retention, kafka-delete-records) below the group's committed offset: never "
                      "consumed by the group. Counted once each, when a log-start sample passes the commit.")
MARGIN = Family("kafka_consumergroup_retention_margin_records", G,
                "Committed offset minus the partition's log start: records retention may still delete before the "
                "group loses any (negative: lost); --lag-granularity partition only.")
MIN_MARGIN = Family("kafka_consumergroup_min_retention_margin_records", G,
                    "Smallest retention margin over the group's committed partitions.")
DEADLINE = Family("kafka_consumergroup_retention_deadline_timestamp_seconds", G,
                  "Earliest time retention.ms lets the log delete a record the group has not read yet (the "
                  "oldest unread record's timestamp plus its topic's retention.ms; Kafka deletes whole segments, "
                  "so the record may live longer); the margin in seconds is this minus time(). Absent when "
                  "nothing is unread or no topic has time-based retention.")
RETENTION_FAMILIES = (RECORDS_LOST, MARGIN, MIN_MARGIN, DEADLINE)
HEALTH = Family("kafka_consumergroup_health", G,
                "1 for the group's verdict over a sliding window: status OK, WARN or ERR, reason ok, rebalancing, "
                "stopped, stalled, storm, rewinding or lagging (rules: streaming/lag/health.py, docs/metrics.md).")

POLLER_FAMILIES = {
    "rounds": Family("rebalance_monitor_live_polls_total", C, "Live group state polls done."),
    "requests": Family("rebalance_monitor_live_requests_total", C,
                       "Admin requests the live poll sent, by API (ListGroups, DescribeGroups)."),
    "errors": Family("rebalance_monitor_live_poll_errors_total", C, "Live poll requests that failed, by reason."),
    "seconds": Family("rebalance_monitor_live_poll_duration_seconds", G, "How long the last live poll took."),
    "groups": Family("rebalance_monitor_live_groups", G, "Groups the last live poll listed."),
    "last": Family("rebalance_monitor_live_last_poll_timestamp_seconds", G,
                   "When the last live poll in which a broker answered ended."),
}


def state_lines(cluster: str, group: str, shown: Shown, durations: tuple[tuple[int, ...], float]) -> Lines:
    """One group's state series (every family of LIVE_FAMILIES it has a value for)."""
    lines = Lines(cluster)
    g = f'group="{escape(group)}"'
    lines.add_text(STATE, f'{g},state="{escape(shown.state)}"', 1)
    lines.add_text(STATE_SINCE, f'{g},state="{escape(shown.state)}"', shown.since_s)
    if shown.rebalancing_since_s is not None:
        lines.add_text(REBALANCING_SINCE, g, shown.rebalancing_since_s)
    if shown.rebalance_timeout_s is not None:
        lines.add_text(REBALANCE_TIMEOUT, g, shown.rebalance_timeout_s)
    if shown.members is not None:
        lines.add_text(REBALANCING_MEMBERS, g, shown.members)
    cumulative, total = durations
    if cumulative:
        histogram(lines, OBSERVED_DURATION, (("group", group),), cumulative, total)
    return lines


def retention_lines(lines: Lines, group: str, margins: Mapping[TopicPartition, int], lost: Mapping[str, int],
                    per_partition: bool, deadline_s: float | None = None) -> None:
    """A group's retention margins (per partition when ``per_partition``, and the smallest), the earliest
    deadline retention.ms sets on its unread records, and records lost."""
    if deadline_s is not None:
        lines.add(DEADLINE, (("group", group),), deadline_s)
    if per_partition:
        lines.add_many(MARGIN, (("group", group),), sorted(margins.items()))
    if margins:
        lines.add(MIN_MARGIN, (("group", group),), min(margins.values()))
    # Zero for every committed topic, so that the first loss is an increase Prometheus can see.
    for topic in sorted({topic for topic, _ in margins} | lost.keys()):
        lines.add(RECORDS_LOST, (("group", group), ("topic", topic)), lost.get(topic, 0))


def poller_text(cluster: str, stats: LivePollStats) -> bytes:
    """The live poller's instruments as exposition text."""
    c = f'cluster="{escape(cluster)}"'
    f = POLLER_FAMILIES
    parts = [f["rounds"].header.decode(), f"{f['rounds'].name}{{{c}}} {stats.rounds}\n", f["requests"].header.decode()]
    parts += [f'{f["requests"].name}{{{c},api="{api}"}} {count}\n' for api, count in sorted(stats.requests.items())]
    parts.append(f["errors"].header.decode())
    parts += [f'{f["errors"].name}{{{c},reason="{reason}"}} {count}\n'
              for reason, count in sorted(stats.errors.items())]
    for key, value in (("seconds", stats.last_seconds), ("groups", stats.groups), ("last", stats.last_ok_s)):
        parts += [f[key].header.decode(), f"{f[key].name}{{{c}}} {number(value)}\n"]
    return "".join(parts).encode()

"""Generates dashboards/rebalance-monitor.json, the Grafana dashboard, for clusters of tens of
thousands of groups.

``python -m dashboards.build`` rewrites the JSON (then ``python deploy/helm/sync_files.py``);
``--check`` exits 1 when the committed file differs from what this code generates.

Rules the layout follows (tests/deploy/test_dashboard.py checks them):

* The first row says what is wrong now; the overview rows never draw one line per group: each
  ranks groups with ``topk($topn, ...)`` (``bottomk`` where the smallest is the worst). The detail
  row repeats over the groups picked in ``$group`` (no "All": a repeat over every group would be
  thousands of rows).
* Every query reads families present at both ``--lag-granularity`` settings (the group and topic
  aggregates), except panels titled "per partition", which say they are empty at ``topic``.
* A sum over ``$__range`` is one number for the range: an instant query in a stat or a table.
* Rebalances are annotations (at the time ``last_rebalance_timestamp_seconds`` holds) on the
  lag and state panels: of the top-N lagging groups in the overview, of the picked groups in
  the detail row.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from dashboards.grafana import (
    DATASOURCE,
    Column,
    Json,
    Layout,
    Query,
    bargauge,
    heatmap,
    stat,
    state_timeline,
    table,
    thresholds,
    timeseries,
)

TARGET = Path(__file__).resolve().parent / "rebalance-monitor.json"

C = 'cluster=~"$cluster"'
G = 'cluster=~"$cluster", group=~"$group"'
STORM_REBALANCES = 10  # in 10m: RebalanceStorm's threshold (deploy/prometheus/rules.yml)
BEHIND_SECONDS = 300  # ConsumerGroupLagSecondsHigh's warning threshold
STUCK_SECONDS = 120  # GroupRebalanceStuck's bound when half the group's rebalance timeout is longer
PER_PARTITION = "Per partition: empty at --lag-granularity topic (only the group and topic aggregates exist there)."

# Kafka's state names, classic, KIP-848 and streams, in the order the state panels draw them.
STATES = [("Empty", "text"), ("Stable", "green"), ("PreparingRebalance", "orange"),
          ("CompletingRebalance", "orange"), ("Assigning", "yellow"), ("Reconciling", "orange"),
          ("NotReady", "purple"), ("Dead", "red")]


def state_index(selector: str) -> str:
    """The index in STATES of each group's current state (len(STATES) for a state not listed)."""
    known = "|".join(name for name, _ in STATES)
    terms = [f'{i} * (kafka_consumergroup_state{{{selector}, state="{name}"}} == 1)'
             for i, (name, _) in enumerate(STATES)]
    terms.append(f'{len(STATES)} * (kafka_consumergroup_state{{{selector}, state!~"{known}"}} == 1)')
    return "max by (cluster, group) (\n  " + "\n  or ".join(terms) + "\n)"


# The health verdict's statuses, in order of severity, with their colors (kafka_consumergroup_health).
VERDICTS = [("OK", "green"), ("WARN", "orange"), ("ERR", "red")]


def verdict_index(selector: str) -> str:
    """Each group's verdict as its index in VERDICTS (reason and status kept as labels)."""
    terms = [f'{i} * (kafka_consumergroup_health{{{selector}, status="{name}"}} == 1)'
             for i, (name, _) in enumerate(VERDICTS)]
    return "max by (cluster, group, status, reason) (\n  " + "\n  or ".join(terms) + "\n)"


def zero_per_cluster(expr: str) -> str:
    """``expr`` (by cluster), 0 for a cluster where it has no series: a stat says 0, not "No data"."""
    return f"({expr}) or (0 * max by (cluster) (rebalance_monitor_groups{{{C}}}))"


def what_is_wrong_now(layout: Layout) -> None:
    layout.row("What is wrong now")
    red_above = thresholds(("green", None), ("red", 1))
    layout.add(
        stat("Groups storming", f"Groups with more than {STORM_REBALANCES} rebalances in the last 10 minutes "
             "(RebalanceStorm's threshold).",
             [Query(f"sum by (cluster) (increase(kafka_consumergroup_rebalances_total{{{C}}}[10m]) "
                    f"> bool {STORM_REBALANCES})", "{{cluster}}", instant=True)],
             width=4, unit="short", steps=red_above),
        stat("Groups rebalancing", "Groups in a rebalance right now: neither Stable nor Empty nor Dead, by "
             "Kafka's live state (one --live-poll-seconds old at most; the offsets topic's view while the live "
             "poll is off or failing).",
             [Query(zero_per_cluster(f'count by (cluster) (kafka_consumergroup_state{{{C}, '
                                     f'state!~"Stable|Empty|Dead"}} == 1)'), "{{cluster}}", instant=True)],
             width=4, unit="short", steps=thresholds(("green", None), ("orange", 1))),
        stat("Longest rebalance now", "How long the group rebalancing longest has been at it, since the live poll "
             f"first saw it rebalancing (GroupRebalanceStuck fires past half its rebalance timeout, at most "
             f"{STUCK_SECONDS} s); 0 while no group rebalances.",
             [Query(zero_per_cluster(f"time() - min by (cluster) "
                                     f"(kafka_consumergroup_rebalancing_since_timestamp_seconds{{{C}}})"),
                    "{{cluster}}", instant=True)],
             width=4, unit="s", steps=thresholds(("green", None), ("orange", 30), ("red", STUCK_SECONDS))),
        stat("Groups in ERR", "Groups whose health verdict is ERR: records arrive and the committed offsets do "
             "not follow (stopped, stalled, or stuck rebalancing; GroupUnhealthy). \"Least healthy groups\" "
             "below says which and why.",
             [Query(zero_per_cluster(f'count by (cluster) (kafka_consumergroup_health{{{C}, status="ERR"}} == 1)'),
                    "{{cluster}}", instant=True)], width=4, unit="short", steps=red_above),
        stat("Groups behind", f"Groups whose oldest unread record is more than {BEHIND_SECONDS} s old "
             "(ConsumerGroupLagSecondsHigh's warning threshold).",
             [Query(f"sum by (cluster) (kafka_consumergroup_max_lag_seconds{{{C}}} > bool {BEHIND_SECONDS})",
                    "{{cluster}}", instant=True)], width=4, unit="short", steps=red_above),
        stat("Worst lag", "The oldest unread record of any group: its age now.",
             [Query(f"max by (cluster) (kafka_consumergroup_max_lag_seconds{{{C}}})", "{{cluster}}", instant=True)],
             width=4, unit="s", steps=thresholds(("green", None), ("orange", 60), ("red", BEHIND_SECONDS))),
        stat("Monitor ready", "1 while /-/ready answers 200: restored from its checkpoint and caught up with "
             "the offsets topic. Before that, figures are old.",
             [Query(f"max by (cluster) (rebalance_monitor_ready{{{C}}})", "{{cluster}}", instant=True)],
             width=6, unit="short", steps=thresholds(("red", None), ("green", 1)), no_value="down",
             mappings=[{"type": "value", "options": {"0": {"text": "not ready", "color": "red", "index": 0},
                                                     "1": {"text": "ready", "color": "green", "index": 1}}}]),
        stat("Since last batch", "Time since the monitor last made progress (MonitorStalled fires past 5m): "
             "while it grows, every other figure here is frozen.",
             [Query(f"time() - max by (cluster) (rebalance_monitor_last_batch_timestamp_seconds{{{C}}})",
                    "{{cluster}}", instant=True)],
             width=6, unit="s", steps=thresholds(("green", None), ("orange", 60), ("red", 300))),
        stat("Since last lag poll", "Time since the lag poller last fetched log ends (LagPollerStalled fires "
             "past 60 s).",
             [Query(f"time() - max by (cluster) (rebalance_monitor_log_end_poll_timestamp_seconds{{{C}}})",
                    "{{cluster}}", instant=True)],
             width=6, unit="s", steps=thresholds(("green", None), ("orange", 30), ("red", 60))),
        stat("Left out by limits", "Series the last scrape left out (--max-series), new groups turned away "
             "(--max-groups), member series cut (--max-members-per-group). Anything but 0: groups are "
             "missing from this dashboard; raise the limit named.",
             [Query(f"max by (cluster) (rebalance_monitor_series_dropped{{{C}}})", "series ({{cluster}})",
                    instant=True),
              Query(f"max by (cluster) (rebalance_monitor_groups_dropped{{{C}}})", "groups ({{cluster}})",
                    instant=True),
              Query(f"max by (cluster) (rebalance_monitor_members_dropped{{{C}}})", "members ({{cluster}})",
                    instant=True)],
             width=6, unit="short", steps=red_above),
    )
    top_lag = f"topk($topn, max by (cluster, group) (kafka_consumergroup_max_lag_seconds{{{C}}}))"

    def of_top_lag(expr: str) -> str:
        return f"{expr} and on (cluster, group) {top_lag}"

    layout.add(
        table("Top $topn groups by lag now", "The groups whose oldest unread record is oldest, with their lag "
              "in records, members and rebalances in the last 10 minutes.", ["cluster", "group"], [
                  Column("Lag", top_lag, "s", colored=True),
                  Column("Lag (records)", of_top_lag(
                      f"max by (cluster, group) (kafka_consumergroup_total_lag{{{C}}})")),
                  Column("Members", of_top_lag(
                      f"max by (cluster, group) (kafka_consumergroup_current_members{{{C}}})")),
                  Column("Rebalances (10m)", of_top_lag(
                      f"max by (cluster, group) (increase(kafka_consumergroup_rebalances_total{{{C}}}[10m]))")),
              ], steps=thresholds(("green", None), ("orange", 60), ("red", BEHIND_SECONDS))),
        rebalance_storms(),
    )


def rebalance_storms() -> Json:
    ranked = (f"topk($topn, max by (cluster, group) "
              f"(increase(kafka_consumergroup_rebalances_total{{{C}}}[$__range])) > 0)")

    def of_ranked(expr: str) -> str:
        return f"{expr} and on (cluster, group) {ranked}"

    return table(
        "Rebalance storms in the range", "The groups that rebalanced most in the time range (a group's worst "
        "10 minutes: its row below).",
        ["cluster", "group"], [
            Column("Rebalances", ranked, colored=True),
            Column("Partitions moved", of_ranked(
                f"max by (cluster, group) (increase(kafka_consumergroup_partitions_moved_total{{{C}}}[$__range]))")),
            Column("Members", of_ranked(f"max by (cluster, group) (kafka_consumergroup_current_members{{{C}}})")),
            Column("Last rebalance ago", of_ranked(
                f"time() - max by (cluster, group) (kafka_consumergroup_last_rebalance_timestamp_seconds{{{C}}})"),
                   "s"),
        ], steps=thresholds(("green", None), ("orange", 5), ("red", STORM_REBALANCES)))


def overview(layout: Layout) -> list[int]:
    """The top-N rows; returns the ids of the lag and state panels (the overview annotation's)."""
    layout.row("Overview: top $topn groups")
    annotated = layout.add(
        timeseries("Lag (seconds), top $topn groups", "Age of the oldest unread record of the groups that are "
                   "furthest behind at each moment; markers: their rebalances.",
                   [Query(f"topk($topn, max by (cluster, group) (kafka_consumergroup_max_lag_seconds{{{C}}}))",
                          "{{group}} ({{cluster}})")], unit="s", width=12),
        timeseries("Lag (records), top $topn groups", "Records left to read, summed over the group's partitions; "
                   "markers: rebalances of the groups furthest behind in seconds.",
                   [Query(f"topk($topn, max by (cluster, group) (kafka_consumergroup_total_lag{{{C}}}))",
                          "{{group}} ({{cluster}})")], unit="short", width=12),
        timeseries("Groups by state", "How many groups are in each of Kafka's states; markers: rebalances of "
                   "the groups furthest behind.",
                   [Query(f"count by (cluster, state) (kafka_consumergroup_state{{{C}}} == 1)",
                          "{{state}} ({{cluster}})")], unit="short", stacked=True),
    )
    layout.add(
        timeseries("Rebalances per minute, top $topn groups", "The groups rebalancing most at each moment.",
                   [Query(f"topk($topn, 60 * max by (cluster, group) "
                          f"(rate(kafka_consumergroup_rebalances_total{{{C}}}[$__rate_interval])))",
                          "{{group}} ({{cluster}})")], unit="cpm"),
        heatmap("Rebalance durations", "How long rebalances took, all groups: classic, the sync phase; "
                "KIP-848, until the assignment epoch caught up. Cells count rebalances.",
                Query(f"sum by (le) (increase(kafka_consumergroup_rebalance_duration_seconds_bucket{{{C}}}"
                      f"[$__rate_interval]))", "{{le}}", format="heatmap")),
        timeseries("Partitions moved per minute, top $topn groups", "Partitions whose owner changed at rebalances.",
                   [Query(f"topk($topn, 60 * max by (cluster, group) "
                          f"(rate(kafka_consumergroup_partitions_moved_total{{{C}}}[$__rate_interval])))",
                          "{{group}} ({{cluster}})")], unit="cpm", width=6),
        timeseries("Assignment imbalance, top $topn groups", "Busiest member's partitions / mean per member "
                   "(1 = even).",
                   [Query(f"topk($topn, max by (cluster, group) "
                          f"(kafka_consumergroup_assignment_imbalance_ratio{{{C}}}))", "{{group}} ({{cluster}})")],
                   unit="none", width=6),
        timeseries("Offset commits, top $topn groups", "Offset commit records per second.",
                   [Query(f"topk($topn, sum by (cluster, group) "
                          f"(rate(kafka_consumergroup_offset_commits_total{{{C}}}[$__rate_interval])))",
                          "{{group}} ({{cluster}})")], unit="cps", width=6),
        table("Members behind the churn, top $topn", "Clients that joined and left most in the hour before "
              "their group's last change.", ["cluster", "group", "client_id", "client_host"],
              [Column("Joins + leaves", f"topk($topn, max by (cluster, group, client_id, client_host) "
                                        f"(kafka_consumergroup_member_churn{{{C}}}))", colored=True)],
              width=6, steps=thresholds(("green", None), ("orange", 5), ("red", 20))),
    )
    return annotated


def health_and_retention(layout: Layout) -> None:
    """What the offsets topic alone cannot show, ranked: live rebalances, verdicts, records lost."""
    layout.row("Health, live rebalances and data loss: top $topn groups")
    lost = (f"topk($topn, sum by (cluster, group, topic) "
            f"(increase(kafka_consumergroup_records_lost_total{{{C}}}[$__range])))")
    lowest = f"bottomk($topn, min by (cluster, group) (kafka_consumergroup_min_retention_margin_records{{{C}}}))"
    layout.add(
        timeseries("Time rebalancing (seconds), top $topn groups", "How long each group rebalancing at each moment "
                   "has been at it, since the live poll first saw it rebalancing: the join phase the offsets "
                   "topic never records included. Empty while no group rebalances.",
                   [Query(f"topk($topn, time() - max by (cluster, group) "
                          f"(kafka_consumergroup_rebalancing_since_timestamp_seconds{{{C}}}))",
                          "{{group}} ({{cluster}})")], unit="s", width=12),
        table("Least healthy groups, top $topn", "Each group's health verdict over the last 10 minutes, worst "
              "first (2 ERR, 1 WARN, 0 OK) with its reason; the rules are in docs/metrics.md.",
              ["cluster", "group", "status", "reason"],
              [Column("Verdict", f"topk($topn, {verdict_index(C)})", "none", colored=True)],
              steps=thresholds(("green", None), ("orange", 1), ("red", 2))),
        table("Records lost in the range, top $topn", "Records retention (or kafka-delete-records) deleted below "
              "the group's committed offset before it read them, in the time range (GroupRecordsLost).",
              ["cluster", "group", "topic"], [Column("Records lost", lost, colored=True)],
              steps=thresholds(("green", None), ("red", 1))),
        table("Lowest retention margins, top $topn", "Committed offset minus log start, the smallest over the "
              "group's partitions: records retention may still delete before the group loses any (negative: "
              "lost already), beside the group's lag.", ["cluster", "group"], [
                  Column("Margin (records)", lowest, colored=True),
                  Column("Lag (records)", f"max by (cluster, group) (kafka_consumergroup_total_lag{{{C}}}) "
                         f"and on (cluster, group) {lowest}"),
              ], ascending=True, steps=thresholds(("red", None), ("orange", 0), ("green", 1))),
    )
    abandoned = (f"topk($topn, time() - max by (cluster, group) "
                 f"(kafka_consumergroup_last_commit_timestamp_seconds{{{C}}}) "
                 f"and on (cluster, group) kafka_consumergroup_activity{{{C}, activity=\"abandoned\"}})")
    unassigned = (f"topk($topn, max by (cluster, group, topic) (kafka_consumergroup_topic_max_lag_seconds{{{C}}}) "
                  f"and on (cluster, group, topic) (kafka_consumergroup_topic_assigned{{{C}}} == 0))")
    layout.add(
        table("Abandoned groups still holding offsets, top $topn", "Groups without members that have had none and "
              "committed nothing for longer than --abandoned-after (kafka_consumergroup_activity abandoned; "
              "ConsumerGroupAbandoned), longest silent first. Their lag, losses and health page no more; Kafka "
              "deletes their offsets offsets.retention.minutes after they emptied (classic) or after each "
              "offset's last commit (KIP-848). Delete the ones nobody will bring back.", ["cluster", "group"], [
                  Column("Since last commit (seconds)", abandoned, "s"),
                  Column("Since last member (seconds)", f"time() - max by (cluster, group) "
                         f"(kafka_consumergroup_last_member_timestamp_seconds{{{C}}}) and on (cluster, group) "
                         f"{abandoned}", "s"),
                  Column("Lag (records)", f"max by (cluster, group) (kafka_consumergroup_total_lag{{{C}}}) "
                         f"and on (cluster, group) {abandoned}"),
              ]),
        table("Committed topics outside the assignment, top $topn", "Topics a group with members holds old "
              "commits on but no member is assigned (kafka_consumergroup_topic_assigned 0): it stopped "
              "consuming them and the commits wait for Kafka to expire them. Their lag is no alert's business; "
              "worst lag first. Empty where assignments are not known (share and streams groups).",
              ["cluster", "group", "topic"], [Column("Lag (seconds)", unassigned, "s")]),
    )


def group_detail(layout: Layout) -> None:
    """One row per picked group (Grafana repeats it): every query filters on that group."""
    layout.row("Group $group", repeat="group")
    layout.add(
        state_timeline("State", "Kafka's state of the group (GroupStuckReconciling fires after 10m in Assigning "
                       "or Reconciling); markers: its rebalances.", Query(state_index(G), "{{group}} ({{cluster}})"),
                       [*STATES, ("other", "red")], width=24, height=4),
        timeseries("Lag (seconds) by topic", "Age of the oldest unread record on each topic; markers: rebalances.",
                   [Query(f"max by (cluster, group, topic) (kafka_consumergroup_topic_max_lag_seconds{{{G}}})",
                          "{{topic}} ({{cluster}})")], unit="s", width=12),
        timeseries("Lag (records) by topic", "Records left to read on each topic; markers: rebalances.",
                   [Query(f"max by (cluster, group, topic) (kafka_consumergroup_topic_total_lag{{{G}}})",
                          "{{topic}} ({{cluster}})")], unit="short", width=12),
        timeseries("Members and generation", "Members in the current generation, and the generation (KIP-848: "
                   "group epoch).",
                   [Query(f"max by (cluster, group) (kafka_consumergroup_current_members{{{G}}})",
                          "members ({{cluster}})"),
                    Query(f"max by (cluster, group) (kafka_consumergroup_generation{{{G}}})",
                          "generation ({{cluster}})")], unit="short"),
        timeseries("Rebalance causes per minute", "Why each rebalance happened (one rebalance may have several "
                   "causes).",
                   [Query(f"60 * sum by (cluster, group, cause) "
                          f"(rate(kafka_consumergroup_rebalance_causes_total{{{G}}}[$__rate_interval]))",
                          "{{cause}} ({{cluster}})")], unit="cpm"),
        timeseries("How members left, per minute", "left_cleanly, session_timeout, poll_timeout (inferred from "
                   "the member's last commit), unknown.",
                   [Query(f"60 * sum by (cluster, group, how) "
                          f"(rate(kafka_consumergroup_member_departures_total{{{G}}}[$__rate_interval]))",
                          "{{how}} ({{cluster}})")], unit="cpm"),
        heatmap("Rebalance durations (this group)", "This group's rebalances by duration.",
                Query(f"sum by (le) (increase(kafka_consumergroup_rebalance_duration_seconds_bucket{{{G}}}"
                      f"[$__rate_interval]))", "{{le}}", format="heatmap")),
        timeseries("Partitions moved per minute", "Partitions whose owner changed at rebalances.",
                   [Query(f"60 * max by (cluster, group) "
                          f"(rate(kafka_consumergroup_partitions_moved_total{{{G}}}[$__rate_interval]))",
                          "moved ({{cluster}})")], unit="cpm"),
        timeseries("Empty, re-created, raw generation steps", "Times the group went Empty, was deleted and "
                   "created again, and Kafka's raw generation steps, per interval (not rebalances).",
                   [Query(f"sum by (cluster, group) (increase(kafka_consumergroup_empty_transitions_total{{{G}}}"
                          f"[$__rate_interval]))", "went empty ({{cluster}})"),
                    Query(f"sum by (cluster, group) (increase(kafka_consumergroup_recreations_total{{{G}}}"
                          f"[$__rate_interval]))", "re-created ({{cluster}})"),
                    Query(f"sum by (cluster, group) (increase(kafka_consumergroup_generations_advanced_total{{{G}}}"
                          f"[$__rate_interval]))", "generation steps ({{cluster}})")], unit="short"),
        table("Group", "Current state, protocol, leader and size.",
              ["cluster", "group", "state", "group_type", "protocol_type", "protocol", "leader"], [
                  Column("Generation", f"max by (cluster, group) (kafka_consumergroup_generation{{{G}}}) "
                         f"* on (cluster, group) group_left (state) max by (cluster, group, state) "
                         f"(kafka_consumergroup_state{{{G}}} == 1) * on (cluster, group) group_left (group_type, "
                         f"protocol_type, protocol, leader) max by (cluster, group, group_type, protocol_type, "
                         f"protocol, leader) (kafka_consumergroup_info{{{G}}})"),
                  Column("Members", f"max by (cluster, group) (kafka_consumergroup_current_members{{{G}}})"),
                  Column("Partitions", f"max by (cluster, group) (kafka_consumergroup_assigned_partitions{{{G}}})"),
              ], width=18, height=4),
        # A subquery per minute of the range: cheap for one group, too costly over every group.
        stat("Worst 10 minutes", f"The most rebalances in any 10 minutes of the time range (RebalanceStorm fires "
             f"above {STORM_REBALANCES}).",
             [Query(f"max by (cluster, group) (max_over_time(increase(kafka_consumergroup_rebalances_total{{{G}}}"
                    f"[10m])[$__range:1m]))", "{{cluster}}", instant=True)], unit="short", width=6,
             steps=thresholds(("green", None), ("orange", 3), ("red", STORM_REBALANCES + 1))),
        stat("Time in state", "Since the monitor first saw the group in its current state (live while the "
             "live poll is fresh).",
             [Query(f"time() - max by (cluster, group, state) "
                    f"(kafka_consumergroup_state_since_timestamp_seconds{{{G}}})", "{{state}}", instant=True)],
             unit="s", width=6, steps=thresholds(("text", None))),
        stat("Health", "The verdict over the last 10 minutes and its reason (docs/metrics.md: the rules; "
             "GroupUnhealthy fires after 5m in ERR).",
             [Query(verdict_index(G), "{{reason}}", instant=True)], unit="none", width=6,
             steps=thresholds(("text", None)),
             mappings=[{"type": "value", "options": {str(i): {"text": name, "color": color, "index": i}
                                                     for i, (name, color) in enumerate(VERDICTS)}}]),
        stat("Records lost in the range", "Records deleted below the group's committed offset before it read "
             "them, in the time range (GroupRecordsLost): the group skipped them.",
             [Query(f"sum by (cluster, group) (increase(kafka_consumergroup_records_lost_total{{{G}}}"
                    f"[$__range]))", "{{cluster}}", instant=True)],
             unit="short", width=6, steps=thresholds(("green", None), ("red", 1))),
        stat("Smallest retention margin", "Records retention may still delete from the group's closest partition "
             "before the group loses any (committed offset - log start; negative: lost).",
             [Query(f"min by (cluster, group) (kafka_consumergroup_min_retention_margin_records{{{G}}})",
                    "{{cluster}}", instant=True)],
             unit="short", width=6, steps=thresholds(("red", None), ("orange", 0), ("green", 1))),
        stat("Time before retention deletes unread records", "Until retention.ms lets the log delete the "
             "oldest record the group has not read (a lower bound: Kafka deletes whole segments; negative: "
             "past); no value while nothing is unread or retention is unlimited.",
             [Query(f"min by (cluster, group) (kafka_consumergroup_retention_deadline_timestamp_seconds{{{G}}}) "
                    f"- time()", "{{cluster}}", instant=True)],
             unit="s", width=6, steps=thresholds(("red", None), ("orange", 0), ("green", 3600))),
        bargauge("Partitions per member", "Partitions assigned to each member (client id @ host; member: a "
                 "static member's instance id, see --member-labels).",
                 [Query(f"max by (cluster, group, client_id, client_host, member) "
                        f"(kafka_consumergroup_member_assigned_partitions{{{G}}})",
                        "{{client_id}}@{{client_host}} {{member}}", instant=True)], unit="short"),
        table("Lag by member", "Lag of the partitions each member owns: records summed, seconds the oldest.",
              ["cluster", "group", "member", "client_id", "client_host"], [
                  Column("Lag", f"max by (cluster, group, member, client_id, client_host) "
                         f"(kafka_consumergroup_member_lag_seconds{{{G}}})", "s", colored=True),
                  Column("Lag (records)", f"max by (cluster, group, member, client_id, client_host) "
                         f"(kafka_consumergroup_member_lag{{{G}}})"),
              ], steps=thresholds(("green", None), ("orange", 60), ("red", BEHIND_SECONDS))),
        table("Members behind their target", "KIP-848 groups: target assignment epochs a member has not caught "
              "up with (above 0: it has not revoked what its target takes away; GroupMemberBehindTarget fires "
              "after 2m), and partitions it must still give up or take up.",
              ["cluster", "group", "member", "client_id", "client_host"], [
                  Column("Epoch lag", f"max by (cluster, group, member, client_id, client_host) "
                         f"(kafka_consumergroup_member_epoch_lag{{{G}}})", colored=True),
                  Column("Unreconciled partitions", f"max by (cluster, group, member, client_id, client_host) "
                         f"(kafka_consumergroup_member_unreconciled_partitions{{{G}}})"),
              ], width=8, steps=thresholds(("green", None), ("red", 1))),
        table("Assignor advisor", "The imbalance Kafka's assignors would give the current members (a "
              "background pass; classic groups) beside the current one.", ["cluster", "group", "assignor"], [
                  Column("Would give", f"max by (cluster, group, assignor) "
                         f"(kafka_consumergroup_assignor_imbalance_ratio{{{G}}})", "none"),
                  Column("Now", f"max by (cluster, group) (kafka_consumergroup_assignment_imbalance_ratio{{{G}}})",
                         "none"),
              ], width=8),
        timeseries("Produced and consumed by topic", "Log-end offset growth of the group's topics and the "
                   "group's progress on them (growth minus the change in lag), records per second.",
                   [Query(f"sum by (cluster, topic) (deriv(kafka_topic_partition_log_end_offset{{{C}}}"
                          f"[$__rate_interval])) and on (cluster, topic) group by (cluster, topic) "
                          f"(kafka_consumergroup_topic_total_lag{{{G}}})", "{{topic}} produced ({{cluster}})"),
                    Query(f"sum by (cluster, topic) (deriv(kafka_topic_partition_log_end_offset{{{C}}}"
                          f"[$__rate_interval])) - on (cluster, topic) group_right "
                          f"deriv(kafka_consumergroup_topic_total_lag{{{G}}}[$__rate_interval])",
                          "{{topic}} consumed ({{cluster}})")], unit="recps"),
        table("Commits beyond the log end", "Commits found beyond the log end in the time range, by topic: the "
              "log was truncated (unclean leader election, deleted records).", ["cluster", "group", "topic"], [
                  Column("Commits", f"sum by (cluster, group, topic) "
                         f"(increase(kafka_consumergroup_lag_truncations_total{{{G}}}[$__range]))", colored=True),
              ], width=8, steps=thresholds(("green", None), ("red", 1))),
    )
    layout.add(
        timeseries("Lag (seconds), top $topn partitions (per partition)", PER_PARTITION,
                   [Query(f"topk($topn, max by (cluster, group, topic, partition) "
                          f"(kafka_consumergroup_partition_lag_seconds{{{G}}}))", "{{topic}}/{{partition}}")],
                   unit="s", width=12),
        table("Partitions furthest behind (per partition)", PER_PARTITION + " Assigned partitions never "
              "committed show their whole log (log end - log start); retention margin: committed offset - log "
              "start.",
              ["cluster", "group", "topic", "partition"], [
                  Column("Lag (records)", f"topk($topn, max by (cluster, group, topic, partition) "
                         f"(kafka_consumergroup_partition_lag{{{G}}}))", colored=True),
                  Column("Committed", f"max by (cluster, group, topic, partition) "
                         f"(kafka_consumergroup_committed_offset{{{G}}})"),
                  Column("Never committed", f"max by (cluster, group, topic, partition) "
                         f"(kafka_consumergroup_partition_lag_uncommitted{{{G}}})"),
                  Column("Retention margin", f"max by (cluster, group, topic, partition) "
                         f"(kafka_consumergroup_retention_margin_records{{{G}}})"),
              ], steps=thresholds(("green", None), ("orange", 1000), ("red", 100000))),
    )


def monitor_health(layout: Layout) -> None:
    layout.row("Monitor health")
    of_monitor = f"and on (instance, job) rebalance_monitor_build_info{{{C}}}"
    layout.add(
        timeseries("Batch duration", "Micro-batch duration quantiles and mean.", [
            *(Query(f"histogram_quantile({q}, sum by (cluster, le) "
                    f"(rate(rebalance_monitor_batch_duration_seconds_bucket{{{C}}}[$__rate_interval])))",
                    f"p{round(q * 100)} ({{{{cluster}}}})") for q in (0.5, 0.95, 0.99)),
            Query(f"sum by (cluster) (rate(rebalance_monitor_batch_duration_seconds_sum{{{C}}}[$__rate_interval])) "
                  f"/ sum by (cluster) (rate(rebalance_monitor_batch_duration_seconds_count{{{C}}}"
                  f"[$__rate_interval]))", "mean ({{cluster}})")], unit="s"),
        timeseries("Input lag (records)", "Offsets-topic records not read yet (MonitorFallingBehind).",
                   [Query(f"max by (cluster) (rebalance_monitor_input_lag_records{{{C}}})", "{{cluster}}")],
                   unit="short"),
        timeseries("Input lag (seconds)", "Age of the newest processed record while records remain unread.",
                   [Query(f"max by (cluster) (rebalance_monitor_input_lag_seconds{{{C}}})", "{{cluster}}")],
                   unit="s"),
        timeseries("Records by type", "Offsets-topic records read per second, by type.",
                   [Query(f"sum by (cluster, record_type) (rate(rebalance_monitor_records_total{{{C}}}"
                          f"[$__rate_interval]))", "{{record_type}} ({{cluster}})")], unit="recps"),
        timeseries("Decode errors and skipped offsets", "Undecodable records by reason (a sample is kept in "
                   "CHECKPOINT_DIR/monitor/dead-letters) and offsets spanned without a record.",
                   [Query(f"sum by (cluster, reason) (rate(rebalance_monitor_decode_errors_total{{{C}}}"
                          f"[$__rate_interval]))", "decode errors: {{reason}} ({{cluster}})"),
                    Query(f"sum by (cluster) (rate(rebalance_monitor_skipped_offsets_total{{{C}}}"
                          f"[$__rate_interval]))", "skipped offsets ({{cluster}})")], unit="cps"),
        timeseries("Lag poll errors", "Lag poller failures per second, by reason (LagPollErrors).",
                   [Query(f"sum by (cluster, reason) (rate(rebalance_monitor_log_end_poll_errors_total{{{C}}}"
                          f"[$__rate_interval]))", "{{reason}} ({{cluster}})")], unit="cps"),
        timeseries("Offsets topic held by open transactions", "Records and seconds an open transaction holds "
                   "back an offsets-topic partition (OffsetsTopicPartitionFrozen).",
                   [Query(f"max by (cluster, partition) (rebalance_monitor_offsets_topic_unstable_offsets{{{C}}})",
                          "partition {{partition}} records ({{cluster}})"),
                    Query(f"max by (cluster, partition) (rebalance_monitor_offsets_topic_unstable_seconds{{{C}}})",
                          "partition {{partition}} seconds ({{cluster}})")], unit="short",
                   overrides=[{"matcher": {"id": "byFrameRefID", "options": "B"},
                               "properties": [{"id": "unit", "value": "s"},
                                              {"id": "custom.axisPlacement", "value": "right"}]}]),
        timeseries("Limits hit and query restarts", "Series, groups and members left out (gauges) and, per "
                   "interval, limit hits and streaming query restarts.",
                   [*(Query(f"max by (cluster) (rebalance_monitor_{name}_dropped{{{C}}})",
                            f"{legend} ({{{{cluster}}}})")
                      for name, legend in (("groups", "groups not tracked"), ("members", "member series cut"),
                                           ("series", "series dropped"))),
                    Query(f"sum by (cluster, limit) (increase(rebalance_monitor_limit_hits_total{{{C}}}"
                          f"[$__rate_interval]))", "{{limit}} hits ({{cluster}})"),
                    Query(f"sum by (cluster) (increase(rebalance_monitor_query_restarts_total{{{C}}}"
                          f"[$__rate_interval]))", "query restarts ({{cluster}})")], unit="short"),
        timeseries("Groups and series exported", "Groups exported and group series in the last scrape.",
                   [Query(f"max by (cluster) (rebalance_monitor_groups{{{C}}})", "groups ({{cluster}})"),
                    Query(f"max by (cluster) (rebalance_monitor_series{{{C}}})", "series ({{cluster}})")],
                   unit="short"),
        timeseries("Driver memory", "Resident memory of the driver's Python process and of its JVM, and the "
                   "JVM's heap (the job's real risk is memory).",
                   [Query(f"max by (instance) (process_resident_memory_bytes {of_monitor})",
                          "Python resident ({{instance}})"),
                    Query(f"max by (instance) (rebalance_monitor_jvm_process_resident_memory_bytes {of_monitor})",
                          "JVM resident ({{instance}})"),
                    Query(f'max by (cluster, kind) (rebalance_monitor_jvm_memory_bytes{{{C}, area="heap"}})',
                          "JVM heap {{kind}} ({{cluster}})")], unit="bytes"),
        timeseries("Driver CPU and GC", "CPU seconds per second of the driver's Python process and JVM "
                   "(1 = one core), and the share of time the JVM spent in garbage collection.",
                   [Query(f"max by (instance) (rate(process_cpu_seconds_total[$__rate_interval]) {of_monitor})",
                          "Python CPU ({{instance}})"),
                    Query(f"max by (instance) (rate(rebalance_monitor_jvm_process_cpu_seconds_total"
                          f"[$__rate_interval]) {of_monitor})", "JVM CPU ({{instance}})"),
                    Query(f"sum by (cluster) (rate(rebalance_monitor_jvm_gc_collection_seconds_total{{{C}}}"
                          f"[$__rate_interval]))", "JVM GC ({{cluster}})"),
                    Query(f"sum by (cluster) (rate(rebalance_monitor_jvm_gc_collections_total{{{C}}}"
                          f"[$__rate_interval]))", "JVM GC collections/s ({{cluster}})")], unit="percentunit",
                   overrides=[{"matcher": {"id": "byFrameRefID", "options": "D"},
                               "properties": [{"id": "unit", "value": "cps"},
                                              {"id": "custom.axisPlacement", "value": "right"}]}]),
        timeseries("Live state poll", "Admin requests the live group-state poll sends per second, by API, and "
                   "its failures by reason; on the right axis, seconds since the last poll a broker answered and "
                   "the last poll's duration (the state shown falls back to the offsets topic's when polls stop).",
                   [Query(f"sum by (cluster, api) (rate(rebalance_monitor_live_requests_total{{{C}}}"
                          f"[$__rate_interval]))", "{{api}} ({{cluster}})"),
                    Query(f"sum by (cluster, reason) (rate(rebalance_monitor_live_poll_errors_total{{{C}}}"
                          f"[$__rate_interval]))", "errors: {{reason}} ({{cluster}})"),
                    Query(f"time() - max by (cluster) (rebalance_monitor_live_last_poll_timestamp_seconds{{{C}}})",
                          "since last poll ({{cluster}})"),
                    Query(f"max by (cluster) (rebalance_monitor_live_poll_duration_seconds{{{C}}})",
                          "poll duration ({{cluster}})")], unit="cps",
                   overrides=[{"matcher": {"id": "byFrameRefID", "options": ref},
                               "properties": [{"id": "unit", "value": "s"},
                                              {"id": "custom.axisPlacement", "value": "right"}]}
                              for ref in ("C", "D")]),
        timeseries("Unresolved topic ids", "KIP-848 topic ids no name was found for, per interval, by reason "
                   "(unknown_topic_id: a deleted topic; metadata_error: the lookup failed): their partitions are "
                   "left out of member lag and assignments.",
                   [Query(f"sum by (cluster, reason) (increase(rebalance_monitor_unresolved_topic_ids_total{{{C}}}"
                          f"[$__rate_interval]))", "{{reason}} ({{cluster}})")], unit="short"),
        table("Build", "Which version runs on which runtimes.",
              ["cluster", "version", "python_version", "spark_version", "java_version"],
              [Column("Instances", f"count by (cluster, version, python_version, spark_version, java_version) "
                                   f"(rebalance_monitor_build_info{{{C}}})")], width=8, height=8),
    )


def rebalance_markers(overview_ids: list[int], outside_detail_ids: list[int]) -> Json:
    """Rebalances as markers, at the time ``last_rebalance_timestamp_seconds`` holds (Grafana reads the
    value, in ms, as the time; repeats of one value are one marker). The picked groups' markers go
    on every panel but those listed: the repeated row's copies get new ids, unknown here."""

    def rebalances(name: str, expr: str, ids: list[int], exclude: bool, color: str) -> Json:
        return {"name": name, "datasource": DATASOURCE, "enable": True, "hide": False, "iconColor": color,
                "expr": expr, "useValueForTime": True, "step": "$__interval", "titleFormat": "Rebalance: {{group}}",
                "textFormat": "{{cluster}}", "tagKeys": "cluster,group",
                "filter": {"exclude": exclude, "ids": ids}}

    stamp = "1000 * max by (cluster, group) (kafka_consumergroup_last_rebalance_timestamp_seconds{%s})"
    return {"list": [
        {"builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "enable": True, "hide": True,
         "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts", "type": "dashboard"},
        rebalances("Rebalances of the top $topn groups by lag", f"{stamp % C} and on (cluster, group) "
                   f"topk($topn, max by (cluster, group) (kafka_consumergroup_max_lag_seconds{{{C}}}))",
                   overview_ids, False, "orange"),
        rebalances("Rebalances of the picked groups", stamp % G, outside_detail_ids, True, "red"),
    ]}


def variables() -> list[Json]:
    def query(name: str, label: str, definition: str, *, include_all: bool) -> Json:
        variable: Json = {"type": "query", "name": name, "label": label, "datasource": DATASOURCE,
                          "definition": definition, "query": definition, "refresh": 2, "sort": 1, "multi": True,
                          "includeAll": include_all, "hide": 0, "regex": "", "options": [], "current": {}}
        if include_all:
            variable |= {"allValue": ".*", "current": {"selected": True, "text": ["All"], "value": ["$__all"]}}
        return variable

    sizes = ["5", "10", "20", "50"]
    return [
        {"type": "datasource", "name": "datasource", "label": "Data source", "query": "prometheus", "current": {},
         "hide": 0, "includeAll": False, "multi": False, "options": [], "refresh": 1, "regex": ""},
        query("cluster", "Cluster", "label_values(rebalance_monitor_build_info, cluster)", include_all=True),
        {"type": "custom", "name": "topn", "label": "Top N", "query": ",".join(sizes), "multi": False,
         "includeAll": False, "hide": 0, "current": {"selected": True, "text": "10", "value": "10"},
         "options": [{"selected": s == "10", "text": s, "value": s} for s in sizes]},
        query("group", "Groups (detail rows)", 'label_values(kafka_consumergroup_info{cluster=~"$cluster"}, group)',
              include_all=False),
    ]


def build() -> Json:
    layout = Layout()
    what_is_wrong_now(layout)
    overview_ids = overview(layout)
    health_and_retention(layout)
    before = len(layout.panels)
    group_detail(layout)
    detail = range(before + 2, len(layout.panels) + 1)  # the repeated row's panels, not the row itself
    monitor_health(layout)
    outside_detail = [p["id"] for p in layout.panels if p["id"] not in detail]
    return {
        "uid": "kafka-rebalance-monitor", "title": "Kafka consumer group rebalances",
        "description": "Rebalances, assignments and lag reconstructed from __consumer_offsets by "
                       "kafka-rebalance-monitor. Generated by dashboards/build.py: edit that, not this file.",
        "tags": ["kafka", "consumer-groups", "rebalance"], "schemaVersion": 39, "version": 1, "editable": True,
        "graphTooltip": 1, "time": {"from": "now-6h", "to": "now"}, "timepicker": {}, "timezone": "browser",
        "refresh": "1m", "fiscalYearStartMonth": 0, "liveNow": False, "links": [],
        "annotations": rebalance_markers(overview_ids, outside_detail),
        "templating": {"list": variables()},
        "panels": layout.panels,
    }


def render() -> str:
    return json.dumps(build(), indent=2) + "\n"


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        if TARGET.read_text() != render():
            print(f"stale: {TARGET.name} (run python -m dashboards.build)")
            return 1
        return 0
    if argv:
        print("usage: python -m dashboards.build [--check]", file=sys.stderr)
        return 2
    TARGET.write_text(render())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

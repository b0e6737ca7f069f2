"""Group series: what a group is and how it rebalances, rendered to text when the group changes.

One function per rendering: :func:`group_lines` for the summary and committed offsets (the
sink calls it for each changed group), :func:`advice_lines` for the assignor advisor's
imbalance per assignor (its background pass publishes them).
"""

from __future__ import annotations

from collections.abc import Mapping

from streaming.metrics import compat
from streaming.metrics.exposition import Family, Lines, escape, number
from streaming.protocol import DURATION_BUCKET_LABELS, GroupSummary, MemberSummary, TopicPartition

MemberLabels = tuple[tuple[str, str], ...]
MEMBER_LABEL_MODES = ("client", "member")


def member_labels(m: MemberSummary, mode: str) -> MemberLabels:
    """A member's labels on the member series.

    ``member``: ``member`` is the owner key (a static member's instance id, else its member id),
    one series per member, new series at every rejoin. ``client``: ``member`` is the instance id
    of a static member and empty otherwise, so a dynamic member that rejoins under a new member
    id keeps its series (its client id and host stay), and members sharing a client id and host
    are one series (their figures added up).
    """
    member = m.member if mode == "member" else (m.instance_id or "")
    return ("member", member), ("client_id", m.client_id), ("client_host", m.client_host)

G, C = "gauge", "counter"
GROUP_FAMILIES = (
    Family("kafka_consumergroup_generation", G, "Classic group generation, or KIP-848 group epoch."),
    Family("kafka_consumergroup_rebalances_total", C,
           "Rebalances: completed assignments with a member whose generation (classic) or target assignment "
           "epoch (KIP-848) changed. Group creation is a baseline; going Empty and re-creation are counted apart."),
    Family("kafka_consumergroup_last_rebalance_timestamp_seconds", G, "Time of the group's last rebalance."),
    Family("kafka_consumergroup_current_members", G, "Members in the group."),
    Family("kafka_consumergroup_info", G,
           "Group description; always 1. Leader is the classic leader's instance id or member id."),
    Family("kafka_consumergroup_assigned_partitions", G,
           "Partitions assigned to the group's members (KIP-848: current assignments; share groups: each partition "
           "once however many members share it)."),
    Family("kafka_consumergroup_member_assigned_partitions", G,
           "Partitions assigned to a member; with --member-labels client (the default) members are told apart by "
           "client id, host and static instance id (member), with --member-labels member by member id too."),
    Family("kafka_consumergroup_member_epoch_lag", G,
           "KIP-848 groups: target assignment epoch minus the member's epoch; above 0 while the member has not "
           "revoked what its target takes away (the member holding the group in Reconciling). Max over members "
           "sharing labels."),
    Family("kafka_consumergroup_member_unreconciled_partitions", G,
           "KIP-848 groups: partitions a member must still give up or take up to own exactly its target "
           "assignment; 0 when reconciled."),
    Family("kafka_consumergroup_assignment_imbalance_ratio", G,
           "Busiest member's partitions over the mean per member; 1 is even. Not for share groups (members share "
           "partitions by design)."),
    Family("kafka_consumergroup_partitions_moved_total", C, "Partitions whose owner changed across rebalances."),
    Family("kafka_consumergroup_offset_commits_total", C, "Offset commit records written for the group."),
    Family("kafka_consumergroup_empty_transitions_total", C,
           "Times the group went Empty (its last members left); not counted as rebalances."),
    Family("kafka_consumergroup_recreations_total", C,
           "Times the group was deleted and created again (tombstone, or a generation going down): a new baseline."),
    Family("kafka_consumergroup_generations_advanced_total", C,
           "Raw sum of the generation (classic) or group epoch (KIP-848) steps Kafka took."),
    Family("kafka_consumergroup_rebalance_causes_total", C,
           "Rebalances by cause; one rebalance may have several causes (see the README)."),
    Family("kafka_consumergroup_member_departures_total", C,
           "Members that left, by how (inferred from their last commit against their timeouts; see the README)."),
    Family("kafka_consumergroup_member_churn", G,
           "Joins plus leaves of one client in the hour before the group's last change (top 10 per group)."),
    Family("kafka_consumergroup_rebalance_duration_seconds", "histogram",
           "Measurable part of each rebalance: classic = the sync phase (from the end of the join phase to the "
           "leader's assignment being stored; records of Kafka 2.1+); KIP-848 = from the group epoch bump to the "
           "target assignment catching up (members' reconciliation after it not included)."),
    Family("kafka_consumergroup_activity", G,
           "1 for what the group is doing (docs/how-it-works.md): active (it has members), inactive (none, but it had "
           "members or committed within --abandoned-after) or abandoned (neither for longer: its offsets wait for "
           "Kafka's offsets.retention.minutes)."),
    Family("kafka_consumergroup_last_member_timestamp_seconds", G,
           "Groups without members: when they last had members as far as their records tell (classic: the Empty "
           "record's state timestamp, what Kafka counts offset retention from; other types: their last record)."),
    Family("kafka_consumergroup_last_commit_timestamp_seconds", G,
           "Groups without members: when they last committed an offset (to a minute)."),
    Family("kafka_consumergroup_topic_assigned", G,
           "Groups with members: 1 for a topic their members are assigned (KIP-848: or being assigned), 0 for one "
           "they only hold old commits on (they stopped consuming it; the commits stay until they expire). Absent "
           "where assignments name no topics (share and streams groups, other protocol types)."),
)
# Written by the advisor pass's thread (streaming/advisor/background.py), not with the group's other series.
ADVISOR_FAMILY = Family("kafka_consumergroup_assignor_imbalance_ratio", G,
                        "Imbalance (busiest member over the mean) that each of Kafka's built-in assignors would give "
                        "the classic group's current members and subscriptions; evaluated in the background, so it "
                        "can trail a rebalance by a few seconds.")
OFFSET_FAMILIES = (
    Family("kafka_consumergroup_committed_offset", G,
           "Latest committed offset (the next record the group will read); --lag-granularity partition only."),
)
_F = {f.name: f for f in (*GROUP_FAMILIES, *OFFSET_FAMILIES)}
# What one group_lines call covers: every family it can write, so a series it no longer writes goes.
GROUP_NAMES = tuple(_F)
# What one offset_lines call covers.
OFFSET_NAMES = ("kafka_consumergroup_offset_commits_total", "kafka_consumergroup_committed_offset")


def group_lines(cluster: str, summary: GroupSummary, committed: Mapping[TopicPartition, int], commits_total: int,
                per_partition: bool, member_mode: str = "client", kafka_exporter: bool = False) -> Lines:
    """The group's summary series and, at partition granularity, its committed offsets (and, with
    ``kafka_exporter``, kafka_exporter's member count)."""
    lines = offset_lines(cluster, summary.group, committed, commits_total, per_partition)
    _summary_lines(lines, summary, member_mode)
    _assigned_lines(lines, summary, committed)
    if kafka_exporter:
        compat.members_lines(lines, summary.group, summary.member_count)
    return lines


def offset_lines(cluster: str, group: str, committed: Mapping[TopicPartition, int], commits_total: int,
                 per_partition: bool) -> Lines:
    """The group's series that commits alone move (:data:`OFFSET_NAMES`): its commit count and, at partition
    granularity, its committed offsets."""
    lines = Lines(cluster)
    lines.add_text(_F["kafka_consumergroup_offset_commits_total"], f'group="{escape(group)}"', commits_total)
    if per_partition:
        lines.add_many(_F["kafka_consumergroup_committed_offset"], (("group", group),), sorted(committed.items()))
    return lines


def advice_lines(cluster: str, group: str, ratios: Mapping[str, float] | None) -> Lines:
    """The advisor's imbalance per assignor for ``group`` (None: no lines, its series go)."""
    lines = Lines(cluster)
    for assignor, ratio in sorted((ratios or {}).items()):
        lines.add(ADVISOR_FAMILY, (("group", group), ("assignor", assignor)), ratio)
    return lines


def _summary_lines(lines: Lines, s: GroupSummary, member_mode: str) -> None:
    g = f'group="{escape(s.group)}"'  # every line's first label, escaped once
    add = lines.add_text
    if s.generation is not None:
        add(_F["kafka_consumergroup_generation"], g, s.generation)
    add(_F["kafka_consumergroup_rebalances_total"], g, s.rebalances_total)
    if s.last_rebalance_ms is not None:
        add(_F["kafka_consumergroup_last_rebalance_timestamp_seconds"], g, s.last_rebalance_ms / 1000)
    add(_F["kafka_consumergroup_current_members"], g, s.member_count)
    add(_F["kafka_consumergroup_info"], f'{g},group_type="{escape(s.group_type)}",protocol_type='
        f'"{escape(s.protocol_type)}",protocol="{escape(s.protocol)}",leader="{escape(s.leader)}"', 1)
    add(_F["kafka_consumergroup_assigned_partitions"], g, s.assigned_partitions)
    assigned: dict[MemberLabels, int] = {}
    epoch_lag: dict[MemberLabels, int] = {}
    unreconciled: dict[MemberLabels, int] = {}
    for m in s.members:
        key = member_labels(m, member_mode)
        assigned[key] = assigned.get(key, 0) + m.assigned_partitions
        if m.epoch_lag is not None:
            epoch_lag[key] = max(epoch_lag.get(key, 0), m.epoch_lag)
        if m.unreconciled_partitions is not None:
            unreconciled[key] = unreconciled.get(key, 0) + m.unreconciled_partitions
    for family, values in (("kafka_consumergroup_member_assigned_partitions", assigned),
                           ("kafka_consumergroup_member_epoch_lag", epoch_lag),
                           ("kafka_consumergroup_member_unreconciled_partitions", unreconciled)):
        for key, count in values.items():
            add(_F[family], g + "," + ",".join([f'{k}="{escape(v)}"' for k, v in key]), count)
    if s.imbalance_ratio is not None:
        add(_F["kafka_consumergroup_assignment_imbalance_ratio"], g, s.imbalance_ratio)
    add(_F["kafka_consumergroup_partitions_moved_total"], g, s.partitions_moved_total)
    add(_F["kafka_consumergroup_empty_transitions_total"], g, s.empty_transitions_total)
    add(_F["kafka_consumergroup_recreations_total"], g, s.recreations_total)
    add(_F["kafka_consumergroup_generations_advanced_total"], g, s.generations_advanced_total)
    for cause, count in sorted(s.rebalance_causes.items()):
        add(_F["kafka_consumergroup_rebalance_causes_total"], f'{g},cause="{escape(cause)}"', count)
    for how, count in sorted(s.departures.items()):
        add(_F["kafka_consumergroup_member_departures_total"], f'{g},how="{escape(how)}"', count)
    for churn in s.member_churn:
        add(_F["kafka_consumergroup_member_churn"],
            f'{g},client_id="{escape(churn.client_id)}",client_host="{escape(churn.client_host)}"',
            churn.joins_and_leaves)
    if s.rebalance_durations:
        histogram(lines, _F["kafka_consumergroup_rebalance_duration_seconds"], (("group", s.group),),
                   s.rebalance_durations, s.rebalance_duration_sum_ms / 1000)
    if s.activity:
        add(_F["kafka_consumergroup_activity"], f'{g},activity="{s.activity}"', 1)
    if s.last_member_ms is not None:
        add(_F["kafka_consumergroup_last_member_timestamp_seconds"], g, s.last_member_ms / 1000)
    if s.last_commit_ms is not None and not s.member_count:
        add(_F["kafka_consumergroup_last_commit_timestamp_seconds"], g, s.last_commit_ms / 1000)


def _assigned_lines(lines: Lines, s: GroupSummary, committed: Mapping[TopicPartition, int]) -> None:
    """1 for each topic the members are assigned, 0 for each the group only committed (when assignments are known)."""
    if s.assigned_topics is None:
        return
    assigned = set(s.assigned_topics)
    g = f'group="{escape(s.group)}"'
    for topic in sorted(assigned | {topic for topic, _ in committed}):
        lines.add_text(_F["kafka_consumergroup_topic_assigned"], f'{g},topic="{escape(topic)}"', int(topic in assigned))


def histogram(lines: Lines, family: Family, labels: tuple[tuple[str, str], ...], cumulative: tuple[int, ...],
               total: float) -> None:
    """A histogram's _bucket/_sum/_count lines under ``family`` (cumulative counts per DURATION_BUCKET_LABELS)."""
    head = ",".join([f'{k}="{escape(v)}"' for k, v in labels])
    rows = lines.by_family.setdefault(family.name, [])
    for le, count in zip(DURATION_BUCKET_LABELS, cumulative, strict=True):
        rows.append(f'{family.name}_bucket{{{lines.prefix},{head},le="{le}"}} {count}\n')
    rows.append(f"{family.name}_sum{{{lines.prefix},{head}}} {number(total)}\n")
    rows.append(f"{family.name}_count{{{lines.prefix},{head}}} {cumulative[-1]}\n")
    lines.count += len(cumulative) + 2

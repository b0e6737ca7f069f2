"""What the group stage keeps at most, and how long a silent group is kept."""

from __future__ import annotations

from dataclasses import dataclass, field

from streaming.settings import Config, positive, setting

# A day without members and without a commit. Kafka keeps an Empty group's offsets for
# offsets.retention.minutes (7 days by default) and a consumer commits every few seconds
# (auto.commit.interval.ms 5 s) to minutes while it runs: a day of silence is thousands of missed
# commits, long enough for a daily batch job between runs and for an outage to have been handled,
# and leaves six of the seven days for the low-severity alert before Kafka deletes the offsets.
DEFAULT_ABANDONED_AFTER_S = 24 * 3600.0
FOLDS = ("driver", "state-store")


@dataclass(frozen=True)
class GroupsConfig(Config):
    """Limits bound what a flood of group ids or members can make the driver keep and export
    (None: no limit); groups with no members and no record for ``group_ttl_seconds`` go."""

    group_ttl_seconds: float = field(default=7 * 24 * 3600.0, metadata=setting(
        "drop a group's state after this long without any record", type=float))
    expiry_sweep_seconds: float = field(default=300.0, metadata=setting(
        "how often groups past their TTL are looked for", type=float))
    max_groups: int | None = field(default=None, metadata=setting(
        "most groups tracked; records of further groups are dropped and counted (default: no limit)", type=int))
    max_members_per_group: int | None = field(default=None, metadata=setting(
        "most members with their own series per group; the rest are left out and counted (default: no limit)",
        type=int))
    abandoned_after_seconds: float = field(default=DEFAULT_ABANDONED_AFTER_S, metadata=setting(
        "a group without members that has had none and committed nothing for this long is abandoned "
        "(kafka_consumergroup_activity): it pages no more and gets one low-severity alert (keep it below "
        "--group-ttl-seconds, or groups are forgotten first)", flag="--abandoned-after", type=float))

    fold: str = field(default="driver", metadata=setting(
        "where groups are folded: driver (the driver's Python, the default) or state-store (Spark's RocksDB state "
        "store on the executors, keyed by offsets-topic partition: for more groups than one driver holds; "
        "docs/scale-out.md); a checkpoint keeps the fold it was started with", choices=FOLDS))

    def problems(self) -> list[str]:
        problems = positive(self, "group_ttl_seconds", "expiry_sweep_seconds", "max_groups", "max_members_per_group",
                            "abandoned_after_seconds")
        if self.fold not in FOLDS:
            problems.append(f"--fold must be one of {', '.join(FOLDS)}, not {self.fold!r}")
        elif self.fold == "state-store" and self.max_groups is not None:
            problems.append("--max-groups needs --fold driver: a limit over every group needs the one place that "
                            "sees them all, and the state-store fold sees one offsets-topic partition at a time")
        return problems

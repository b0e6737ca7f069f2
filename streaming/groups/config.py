"""What the group stage keeps at most, and how long a silent group is kept."""

from __future__ import annotations

from dataclasses import dataclass, field

from streaming.settings import Config, positive, setting


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

    def problems(self) -> list[str]:
        return positive(self, "group_ttl_seconds", "expiry_sweep_seconds", "max_groups", "max_members_per_group")

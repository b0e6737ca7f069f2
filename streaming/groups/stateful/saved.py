"""What a group keeps in the state store: one pickled value, put back into a fresh stage on the next batch."""

from __future__ import annotations

import pickle

from streaming.groups.model import GroupSnapshot
from streaming.groups.stage import GroupOffsets, GroupStage

# Spark's schemas of the map state: offsets-topic partition key -> group -> pickled Saved.
MAP_KEY_SCHEMA = "group string"
MAP_VALUE_SCHEMA = "saved binary"
STATE_NAME = "groups"

# The group's snapshot, its committed offsets, whether the last summary handed over showed member churn, and
# the activity and last commit it showed (what GroupStage.change reads besides the fold's own state).
Saved = tuple[GroupSnapshot | None, GroupOffsets | None, bool | None, tuple[str, int] | None]


def load(stage: GroupStage, group: str, saved: Saved) -> None:
    """Put a group's saved state back into ``stage``."""
    snapshot, offsets, whole, activity = saved
    if snapshot is not None:
        stage.snapshots[group] = snapshot
    if offsets is not None:
        stage.offsets[group] = offsets
    if whole is not None:
        stage._whole[group] = whole
    if activity is not None:
        stage._activity[group] = activity


def save(stage: GroupStage, group: str) -> Saved:
    return (stage.snapshots.get(group), stage.offsets.get(group), stage._whole.get(group),
            stage._activity.get(group))


def dumps(saved: Saved) -> bytes:
    return pickle.dumps(saved, pickle.HIGHEST_PROTOCOL)


def loads(value: bytes) -> Saved:
    saved: Saved = pickle.loads(value)
    return saved

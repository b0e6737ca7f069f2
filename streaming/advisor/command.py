"""``rebalance-monitor advise``: the assignors side by side for one classic group, and a recommendation."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TextIO

from streaming.advisor.assignors import Outcome, advise, members_of
from streaming.groups.boundary import imbalance_ratio
from streaming.groups.model import GroupSnapshot

# Tie-break when assignors balance equally well: incremental rebalancing first (members
# keep consuming what they keep), then stickiness, then the simplest.
_PREFERENCE = ("cooperative-sticky", "sticky", "roundrobin", "range")


def recommend(current_protocol: str | None, outcomes: Mapping[str, Outcome]) -> str:
    """The assignor to use: the best balanced one, ties by :data:`_PREFERENCE`."""
    def key(name: str) -> tuple[float, int]:
        ratio = outcomes[name].imbalance_ratio
        return (round(ratio, 9) if ratio is not None else 1.0, _PREFERENCE.index(name))

    best = min(outcomes, key=key)
    if current_protocol is not None and current_protocol in outcomes and key(current_protocol)[0] <= key(best)[0]:
        return current_protocol  # already as balanced as any: switching only costs a rebalance
    return best


def advice_table(snapshot: GroupSnapshot, outcomes: Mapping[str, Outcome]) -> str:
    """The side-by-side comparison and the recommendation, as ``advise`` prints it."""
    classic = snapshot.classic
    protocol = classic.protocol if classic is not None else None
    members = members_of(snapshot)
    now = imbalance_ratio([sum(len(p) for p in m.assigned.values()) for m in members])
    rows = [(f"current ({protocol or '-'})", now, 0)]
    rows += [(name, o.imbalance_ratio, o.partitions_moved) for name, o in outcomes.items()]
    width = max(len(name) for name, _, _ in rows)
    lines = [
        f"group {snapshot.group}: {len(members)} member(s), generation {classic.generation if classic else '-'}",
        f"{'assignor':<{width}}  imbalance  moved",
    ]
    lines += [f"{name:<{width}}  {_ratio(ratio):>9}  {moved:>5}" for name, ratio, moved in rows]
    choice = recommend(protocol, outcomes)
    if choice == protocol:
        lines.append(f"recommendation: keep {choice} (no built-in assignor balances this group better)")
    else:
        chosen = outcomes[choice]
        lines.append(
            f"recommendation: {choice} (imbalance {_ratio(chosen.imbalance_ratio)} instead of {_ratio(now)}; "
            f"switching moves {chosen.partitions_moved} partition(s) once)"
        )
    return "\n".join(lines)


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


SnapshotLoader = Callable[[Path, str], GroupSnapshot | None]


def advise_parser(checkpoint_dir: Path = Path(".local/checkpoint")) -> argparse.ArgumentParser:
    """``advise``'s options; ``checkpoint_dir``: --checkpoint-dir's default (the ``rebalance-monitor`` command
    passes the one ``run`` would use, REBALANCE_MONITOR_CHECKPOINT_DIR included)."""
    parser = argparse.ArgumentParser(prog="rebalance-monitor advise",
                                     description="compare Kafka's built-in assignors on a classic group")
    parser.add_argument("--group", required=True)
    parser.add_argument("--checkpoint-dir", type=Path, default=checkpoint_dir,
                        help=f"the job's checkpoint directory (default: {checkpoint_dir})")
    parser.add_argument("--snapshot", type=Path, help="a group snapshot JSON file instead of the checkpoint")
    parser.add_argument("--partitions", action="append", default=[], metavar="TOPIC=N",
                        help="a topic's partition count (default: what the current assignment shows)")
    return parser


def advise_command(argv: list[str], load: SnapshotLoader | None = None, out: TextIO = sys.stdout,
                   checkpoint_dir: Path = Path(".local/checkpoint")) -> int:
    """``rebalance-monitor advise --group G``: print the advice for one group; returns an exit code.

    The group's snapshot comes from ``--snapshot FILE`` (the JSON of
    :meth:`GroupSnapshot.to_json`) or from ``load(checkpoint_dir, group)``, the core's
    reader of the snapshots it persists under the checkpoint directory (``checkpoint_dir`` when
    --checkpoint-dir is not given).
    """
    parser = advise_parser(checkpoint_dir)
    args = parser.parse_args(argv)
    snapshot: GroupSnapshot | None
    if args.snapshot is not None:
        snapshot = GroupSnapshot.from_json(args.snapshot.read_text())
    elif load is not None:
        snapshot = load(args.checkpoint_dir, args.group)
    else:
        parser.error("--snapshot FILE is needed without a checkpoint reader")
    if snapshot is None or snapshot.group != args.group:
        print(f"group {args.group!r} not found", file=out)
        return 1
    try:
        partitions = dict(_topic_count(spec) for spec in args.partitions) or None
        outcomes = advise(snapshot, partitions)
    except ValueError as e:
        print(e, file=out)
        return 1
    print(advice_table(snapshot, outcomes), file=out)
    return 0


def _topic_count(spec: str) -> tuple[str, int]:
    topic, _, count = spec.rpartition("=")
    if not topic or not count.isdigit():
        raise ValueError(f"--partitions {spec!r}: expected TOPIC=N")
    return topic, int(count)

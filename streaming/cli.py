"""``rebalance-monitor``: run the job; read a group's history, the assignor advice, the undecodable records."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from streaming.driver.config import DriverConfig
from streaming.options import default, parse_args


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--version":
        from streaming.metrics.runtime import version

        print(f"rebalance-monitor {version()}")
        return
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: rebalance-monitor [--version] {run,history,advise,dead-letters} ...\n\n"
              "  run           run the monitor job (rebalance-monitor run --help)\n"
              "  history       print a group's generation timeline from the event log\n"
              "  advise        compare Kafka's built-in assignors on a classic group's current members\n"
              "  dead-letters  print the kept sample of undecodable records\n\n"
              "Options of run also come from REBALANCE_MONITOR_<OPTION> variables (rebalance-monitor run --help).")
        return
    command, rest = argv[0], argv[1:]
    if command == "run":
        run_command(rest)
    elif command == "history":
        history_command(rest)
    elif command == "advise":
        from streaming.advisor.command import advise_command
        from streaming.groups.store import load_snapshot

        raise SystemExit(advise_command(rest, load=load_snapshot))
    elif command == "dead-letters":
        dead_letters_command(rest)
    else:
        raise SystemExit(f"rebalance-monitor: unknown command {command!r} (run, history, advise, dead-letters)")


def run_command(argv: list[str]) -> None:
    """Run the job on a cluster; the local demo lives in the test bed (``make run``)."""
    from streaming.job import run

    run(parse_args(argv))


def history_command(argv: list[str]) -> None:
    from streaming.logs.events import print_history

    parser = argparse.ArgumentParser(prog="rebalance-monitor history",
                                     description="Print a group's generation timeline from the event log.")
    parser.add_argument("--group", required=True)
    parser.add_argument("--event-log", type=Path, default=None,
                        help="Parquet event log (default: CHECKPOINT_DIR/events)")
    parser.add_argument("--checkpoint-dir", type=Path, default=default(DriverConfig, "checkpoint_dir"))
    args = parser.parse_args(argv)
    print_history(args.event_log or args.checkpoint_dir / "events", args.group, sys.stdout)


def dead_letters_command(argv: list[str]) -> None:
    from streaming.logs.dead_letters import print_dead_letters

    parser = argparse.ArgumentParser(prog="rebalance-monitor dead-letters",
                                     description="Print the newest undecodable records the job kept, bytes in hex.")
    parser.add_argument("--checkpoint-dir", type=Path, default=default(DriverConfig, "checkpoint_dir"))
    parser.add_argument("--limit", type=int, default=50)
    args = parser.parse_args(argv)
    print_dead_letters(args.checkpoint_dir / "monitor" / "dead-letters", sys.stdout, args.limit)


if __name__ == "__main__":
    main()

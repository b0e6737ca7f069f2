"""``rebalance-monitor``: run the job, or read a group's rebalance history."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from streaming.options import default, parse_args


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: rebalance-monitor {run,history} ...\n\n"
              "  run      run the monitor job (rebalance-monitor run --help)\n"
              "  history  print a group's generation timeline from the event log")
        return
    command, rest = argv[0], argv[1:]
    if command == "run":
        run_command(rest)
    elif command == "history":
        history_command(rest)
    else:
        raise SystemExit(f"rebalance-monitor: unknown command {command!r} (run, history)")


def run_command(argv: list[str]) -> None:
    """Run the job on a cluster; the local demo lives in the test bed (``make run``)."""
    from streaming.job import run

    run(parse_args(argv))


def history_command(argv: list[str]) -> None:
    from streaming.history import print_history

    parser = argparse.ArgumentParser(prog="rebalance-monitor history",
                                     description="Print a group's generation timeline from the event log.")
    parser.add_argument("--group", required=True)
    parser.add_argument("--event-log", type=Path, default=None,
                        help="Parquet event log (default: CHECKPOINT_DIR/events)")
    parser.add_argument("--checkpoint-dir", type=Path, default=default("checkpoint_dir"))
    args = parser.parse_args(argv)
    print_history(args.event_log or args.checkpoint_dir / "events", args.group, sys.stdout)


if __name__ == "__main__":
    main()

"""``rebalance-monitor``: run the job; read a group's history, the assignor advice, the undecodable records."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from streaming.driver.config import DriverConfig
from streaming.options import default, env_name, parse_args


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
              "Options of run also come from REBALANCE_MONITOR_<OPTION> variables (rebalance-monitor run --help);\n"
              "history, advise and dead-letters read REBALANCE_MONITOR_CHECKPOINT_DIR (and history\n"
              "REBALANCE_MONITOR_EVENT_LOG) as run does, so they find the checkpoint run writes.")
        return
    command, rest = argv[0], argv[1:]
    if command == "run":
        run_command(rest)
    elif command == "history":
        history_command(rest)
    elif command == "advise":
        from streaming.advisor.command import advise_command
        from streaming.groups.store import load_snapshot

        raise SystemExit(advise_command(rest, load=load_snapshot, checkpoint_dir=checkpoint_default()))
    elif command == "dead-letters":
        dead_letters_command(rest)
    else:
        raise SystemExit(f"rebalance-monitor: unknown command {command!r} (run, history, advise, dead-letters)")


def run_command(argv: list[str]) -> None:
    """Run the job on a cluster; the local demo lives in the test bed (``make run``)."""
    from streaming.job import run

    run(parse_args(argv))


def checkpoint_default(environ: Mapping[str, str] | None = None) -> Path:
    """--checkpoint-dir's default for history, advise and dead-letters: the directory ``run`` would use with the
    same environment (REBALANCE_MONITOR_CHECKPOINT_DIR, else run's default); the command line still wins."""
    environ = os.environ if environ is None else environ
    value = environ.get(env_name("--checkpoint-dir"))
    return Path(value) if value else default(DriverConfig, "checkpoint_dir")


def history_parser(environ: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    environ = os.environ if environ is None else environ
    checkpoint = checkpoint_default(environ)
    event_log = environ.get(env_name("--event-log"))
    parser = argparse.ArgumentParser(prog="rebalance-monitor history",
                                     description="Print a group's generation timeline from the event log.")
    parser.add_argument("--group", required=True)
    parser.add_argument("--event-log", type=Path, default=Path(event_log) if event_log else None,
                        help=f"Parquet event log (default: {env_name('--event-log')}, else CHECKPOINT_DIR/events)")
    parser.add_argument("--checkpoint-dir", type=Path, default=checkpoint,
                        help=f"the job's checkpoint directory (default: {checkpoint}; "
                        f"{env_name('--checkpoint-dir')} as for run)")
    return parser


def history_command(argv: list[str], environ: Mapping[str, str] | None = None) -> None:
    from streaming.logs.events import print_history

    args = history_parser(environ).parse_args(argv)
    print_history(args.event_log or args.checkpoint_dir / "events", args.group, sys.stdout)


def dead_letters_parser(environ: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    checkpoint = checkpoint_default(environ)
    parser = argparse.ArgumentParser(prog="rebalance-monitor dead-letters",
                                     description="Print the newest undecodable records the job kept, bytes in hex.")
    parser.add_argument("--checkpoint-dir", type=Path, default=checkpoint,
                        help=f"the job's checkpoint directory (default: {checkpoint}; "
                        f"{env_name('--checkpoint-dir')} as for run)")
    parser.add_argument("--limit", type=int, default=50)
    return parser


def dead_letters_command(argv: list[str], environ: Mapping[str, str] | None = None) -> None:
    from streaming.logs.dead_letters import print_dead_letters

    args = dead_letters_parser(environ).parse_args(argv)
    print_dead_letters(args.checkpoint_dir / "monitor" / "dead-letters", sys.stdout, args.limit)


if __name__ == "__main__":
    main()

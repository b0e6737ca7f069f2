"""``rebalance-monitor``: run the job, or read a group's rebalance history."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from streaming.options import parse_args


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
    """``run --demo`` starts a local broker and demo groups first (what ``make run`` does)."""
    from streaming.job import run

    if "--demo" not in argv:
        run(parse_args(argv))
        return
    from testbed.broker import DEFAULT_STATE_DIR, LocalKafka, port_open
    from testbed.demo import Demo

    argv = [a for a in argv if a != "--demo"]
    port = 9092
    broker = None
    if not port_open(port):
        broker = LocalKafka(DEFAULT_STATE_DIR, port=port)
        print(f"Starting a local Kafka {broker.version} broker at {broker.bootstrap} ...", flush=True)
        print(f"Broker ready in {broker.start():.1f}s (logs in {broker.log_dir})", flush=True)
    else:
        print(f"Using the broker already listening on 127.0.0.1:{port}", flush=True)
    demo = Demo(f"127.0.0.1:{port}").start()
    print(f"Demo groups running: {', '.join(demo.members)}", flush=True)
    try:
        run(parse_args(["--bootstrap-server", f"127.0.0.1:{port}", "--cluster", "demo",
                        "--trigger-seconds", "2", *argv]))
    finally:
        demo.stop()
        if broker is not None:
            broker.stop()


def history_command(argv: list[str]) -> None:
    from streaming.history import print_history

    parser = argparse.ArgumentParser(prog="rebalance-monitor history",
                                     description="Print a group's generation timeline from the event log.")
    parser.add_argument("--group", required=True)
    parser.add_argument("--event-log", type=Path, default=None,
                        help="Parquet event log (default: CHECKPOINT_DIR/events)")
    parser.add_argument("--checkpoint-dir", type=Path, default=Path(".local/checkpoint"))
    args = parser.parse_args(argv)
    print_history(args.event_log or args.checkpoint_dir / "events", args.group, sys.stdout)


if __name__ == "__main__":
    main()

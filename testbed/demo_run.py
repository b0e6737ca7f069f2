"""``make run``: the monitor with everything around it that a newcomer needs to see it work.

Without ``--bootstrap-server`` it starts a local Kafka broker (or uses one on 127.0.0.1:9092)
and the demo groups; in every case a local Prometheus loads the shipped rules and scrapes the
job. Ctrl-C stops the job, then Prometheus, the demo groups and the broker. Every argument
it does not know is a job option (``rebalance-monitor run --help``).
"""

from __future__ import annotations

import argparse
import sys
from contextlib import ExitStack
from pathlib import Path

from streaming.job import run
from streaming.options import parse_args
from testbed.broker import DEFAULT_STATE_DIR, LocalKafka, free_port, port_open
from testbed.demo import Demo
from testbed.jvm import PROJECT_ROOT
from testbed.prometheus import SHIPPED_RULES, LocalPrometheus, fast_rules

PROMETHEUS_DIR = PROJECT_ROOT / ".local" / "prometheus"
DEMO_PORT = 9092


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m testbed.demo_run", description=__doc__,
        epilog="Any other argument goes to the job: see `rebalance-monitor run --help`.")
    parser.add_argument("--bootstrap-server", default=None,
                        help="monitor this cluster instead of a local broker with demo groups")
    parser.add_argument("--prometheus-port", type=int, default=9090,
                        help="port of the local Prometheus (a free one if taken)")
    parser.add_argument("--no-prometheus", action="store_true", help="run without the local Prometheus")
    parser.add_argument("--shipped-for", action="store_true",
                        help="keep the rules' `for:` durations as shipped (15m and more) instead of 1m, "
                        "so alerts take as long to fire as in production")
    return parser


def main(argv: list[str] | None = None) -> None:
    args, job_args = build_parser().parse_known_args(sys.argv[1:] if argv is None else argv)
    demo = args.bootstrap_server is None
    bootstrap = args.bootstrap_server or f"127.0.0.1:{DEMO_PORT}"
    defaults = ["--cluster", "demo", "--trigger-seconds", "2"] if demo else []
    options = parse_args(["--bootstrap-server", bootstrap, *defaults, *job_args], prog="python -m testbed.demo_run")
    if not args.no_prometheus and options.metrics.port == 0:
        raise SystemExit("python -m testbed.demo_run: Prometheus needs a fixed --metrics-port, not 0")
    with ExitStack() as stack:
        if demo:
            start_demo_cluster(stack)
        if not args.no_prometheus:
            start_prometheus(stack, args, options.metrics.port)
        run(options)  # until Ctrl-C; the stack then stops the rest in reverse order


def start_demo_cluster(stack: ExitStack) -> None:
    if port_open(DEMO_PORT):
        print(f"Using the broker already listening on 127.0.0.1:{DEMO_PORT}", flush=True)
    else:
        broker = LocalKafka(DEFAULT_STATE_DIR, port=DEMO_PORT)
        print(f"Starting a local Kafka {broker.version} broker at {broker.bootstrap} ...", flush=True)
        stack.callback(broker.stop)
        print(f"Broker ready in {broker.start():.1f}s (logs in {broker.log_dir})", flush=True)
    demo = Demo(f"127.0.0.1:{DEMO_PORT}")
    stack.callback(demo.stop)
    demo.start()
    print(f"Demo groups running: {', '.join(demo.members)}", flush=True)


def start_prometheus(stack: ExitStack, args: argparse.Namespace, metrics_port: int) -> None:
    PROMETHEUS_DIR.mkdir(parents=True, exist_ok=True)
    rules: Path = SHIPPED_RULES if args.shipped_for else fast_rules(PROMETHEUS_DIR / "rules.yml", "1m")
    port = args.prometheus_port if not port_open(args.prometheus_port) else free_port()
    prometheus = LocalPrometheus(PROMETHEUS_DIR, [f"localhost:{metrics_port}"], port=port, rules=rules,
                                 scrape_interval="5s", evaluation_interval="5s")
    stack.callback(prometheus.stop)
    prometheus.start()
    print(f"Prometheus: {prometheus.url} (alerts: {prometheus.page('alerts')}, rules: {prometheus.page('rules')}; "
          f"{'shipped rules' if args.shipped_for else 'shipped rules with for: 1m'}; log in {PROMETHEUS_DIR})",
          flush=True)


if __name__ == "__main__":
    main()

"""Command-line options of the monitor job, shared by spark-submit and ``rebalance-monitor run``."""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field
from pathlib import Path

# The job's own Kafka source consumer joins a group under this prefix (see DEVELOPERS.md:
# Spark needs the deprecated offset fetcher to read an internal topic, and that one joins a
# group). Excluded from the metrics by default.
JOB_GROUP_PREFIX = "rebalance-monitor-"
DEFAULT_EXCLUDE = f"^{re.escape(JOB_GROUP_PREFIX)}"


@dataclass
class JobOptions:
    bootstrap_servers: str
    cluster: str = "default"
    topic: str = "__consumer_offsets"
    checkpoint_dir: Path = Path(".local/checkpoint")
    event_log: Path | None = None
    metrics_host: str = "0.0.0.0"
    metrics_port: int = 9308
    trigger_seconds: float = 5.0
    starting_offsets: str = "earliest"
    include_groups: str = ".*"
    exclude_groups: str = DEFAULT_EXCLUDE
    lag_poll_seconds: float = 10.0
    group_ttl_seconds: float = 7 * 24 * 3600
    max_offsets_per_trigger: int | None = None
    state_partitions: int = 8
    master: str | None = None
    kafka_options: dict[str, str] = field(default_factory=dict)

    @property
    def event_log_path(self) -> Path:
        return self.event_log or self.checkpoint_dir / "events"


def build_parser(prog: str = "rebalance-monitor run") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Reconstruct every consumer group's generations and assignments from "
        "__consumer_offsets and serve rebalance, imbalance, movement and lag metrics to Prometheus.",
        epilog="Any Kafka client option passes through as --kafka.<name> VALUE (for example "
        "--kafka.security.protocol SASL_SSL --kafka.sasl.mechanism SCRAM-SHA-512 "
        "--kafka.sasl.jaas.config '...'): to Spark's Kafka source as is, and to the lag poller "
        "where kafka-python has the same setting.",
    )
    parser.add_argument("--bootstrap-server", dest="bootstrap_servers", required=True,
                        help="Kafka bootstrap servers, HOST:PORT[,HOST:PORT...]")
    parser.add_argument("--cluster", default="default", help="value of the `cluster` label on every series")
    parser.add_argument("--topic", default="__consumer_offsets",
                        help="topic to read; any topic carrying records in the __consumer_offsets format "
                        "(replays, synthetic load)")
    parser.add_argument("--checkpoint-dir", type=Path, default=Path(".local/checkpoint"),
                        help="Spark checkpoint (offsets + per-group state); restart resumes from it")
    parser.add_argument("--event-log", type=Path, default=None,
                        help="Parquet rebalance event log (default: CHECKPOINT_DIR/events)")
    parser.add_argument("--metrics-host", default="0.0.0.0", help="address of the /metrics endpoint")
    parser.add_argument("--metrics-port", type=int, default=9308, help="port of the /metrics endpoint (0: any)")
    parser.add_argument("--trigger-seconds", type=float, default=5.0, help="micro-batch interval")
    parser.add_argument("--starting-offsets", default="earliest", choices=["earliest", "latest"],
                        help="where a NEW checkpoint starts; earliest rebuilds every group's latest state "
                        "from the compacted topic")
    parser.add_argument("--include-groups", default=".*", help="regex: only groups matching it")
    parser.add_argument("--exclude-groups", default=DEFAULT_EXCLUDE,
                        help="regex: groups to leave out (default: the job's own consumer group)")
    parser.add_argument("--lag-poll-seconds", type=float, default=10.0, help="log-end offset poll interval")
    parser.add_argument("--group-ttl-seconds", type=float, default=7 * 24 * 3600,
                        help="drop a group's state after this long without any record")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None,
                        help="cap records per micro-batch (catching up on a large topic)")
    parser.add_argument("--state-partitions", type=int, default=8,
                        help="Spark shuffle partitions of the state store; fixed once a checkpoint exists")
    parser.add_argument("--master", default=None,
                        help="Spark master when started outside spark-submit (default local[*])")
    return parser


def parse_args(argv: list[str], prog: str = "rebalance-monitor run") -> JobOptions:
    parser = build_parser(prog)
    known, rest = parser.parse_known_args(argv)
    kafka_options = _kafka_options(parser, rest)
    for pattern in (known.include_groups, known.exclude_groups):
        try:
            re.compile(pattern)
        except re.error as exc:
            parser.error(f"invalid group regex {pattern!r}: {exc}")
    if known.trigger_seconds <= 0 or known.lag_poll_seconds <= 0:
        parser.error("--trigger-seconds and --lag-poll-seconds must be positive")
    return JobOptions(kafka_options=kafka_options, **vars(known))


def _kafka_options(parser: argparse.ArgumentParser, rest: list[str]) -> dict[str, str]:
    """``--kafka.NAME VALUE`` / ``--kafka.NAME=VALUE`` pairs; anything else is an error."""
    options: dict[str, str] = {}
    items = iter(rest)
    for item in items:
        if not item.startswith("--kafka."):
            parser.error(f"unrecognized argument: {item}")
        name, sep, value = item[2:].partition("=")
        if not sep:
            value = next(items, None)
            if value is None:
                parser.error(f"{item} needs a value")
        options[name] = value
    return options

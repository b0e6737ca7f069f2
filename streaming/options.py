"""Command-line options of the monitor job, shared by spark-submit and ``rebalance-monitor run``.

Each option is declared once, as a ``JobOptions`` field whose metadata carries its flag and
help; the parser is built from the fields, and ``JobOptions.__post_init__`` is the only place
values are checked, so options built in code are held to the same rules as the command line.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

# The job's own Kafka source consumer joins a group under this prefix (Spark needs the
# deprecated offset fetcher to read an internal topic, and that one joins a group).
# Excluded from the metrics by default.
JOB_GROUP_PREFIX = "rebalance-monitor-"
DEFAULT_EXCLUDE = f"^{re.escape(JOB_GROUP_PREFIX)}"
# kafka_exporter owns 9308 and Prometheus' exporter registry has handed out 9100-9999; this
# port is outside both, so the monitor and kafka_exporter can share a host.
DEFAULT_METRICS_PORT = 10308
STARTING_OFFSETS = ("earliest", "latest")
LAG_GRANULARITIES = ("partition", "topic")
# Python-only regex syntax: Spark's rlike compiles with java.util.regex, which rejects or
# reads these differently. Caught before any JVM starts; validate_group_patterns checks the rest.
PYTHON_ONLY_REGEX = {
    "(?P<": "Java names groups (?<name>...)",
    "(?P=": "Java back-references a named group as \\k<name>",
    "(?#": "Java has no inline comments",
    "\\Z": "Java's \\Z also matches before a final line break; use \\z",
}


class OptionError(ValueError):
    """An option value the job cannot run with; the message names the flag."""


def _arg(help: str, *, flag: str | None = None, **argparse_kwargs: Any) -> dict[str, Any]:
    """A field's command-line face: its help, its flag if not derived from the name, argparse extras."""
    return {"help": help, "flag": flag, **argparse_kwargs}


@dataclass
class JobOptions:
    bootstrap_servers: str = field(metadata=_arg("Kafka bootstrap servers, HOST:PORT[,HOST:PORT...]",
                                                 flag="--bootstrap-server"))
    cluster: str = field(default="default", metadata=_arg("value of the `cluster` label on every series"))
    topic: str = field(default="__consumer_offsets", metadata=_arg(
        "topic to read; any topic carrying records in the __consumer_offsets format (replays, synthetic load)"))
    checkpoint_dir: Path = field(default=Path(".local/checkpoint"), metadata=_arg(
        "Spark checkpoint (offsets + per-group state); restart resumes from it", type=Path))
    event_log: Path | None = field(default=None, metadata=_arg(
        "Parquet rebalance event log (default: CHECKPOINT_DIR/events)", type=Path))
    metrics_host: str = field(default="0.0.0.0", metadata=_arg("address of the /metrics endpoint"))
    metrics_port: int = field(default=DEFAULT_METRICS_PORT, metadata=_arg(
        "port of the /metrics endpoint (0: any free port; 9308 is kafka_exporter's)", type=int))
    metrics_tls_cert: Path | None = field(default=None, metadata=_arg(
        "PEM certificate chain: serve /metrics over HTTPS (with --metrics-tls-key)", type=Path))
    metrics_tls_key: Path | None = field(default=None, metadata=_arg(
        "PEM private key of --metrics-tls-cert", type=Path))
    metrics_basic_auth_file: Path | None = field(default=None, metadata=_arg(
        "file of user:hash lines (python -m streaming.metrics_server USER writes one): /metrics asks for "
        "HTTP basic auth", type=Path))
    trigger_seconds: float = field(default=5.0, metadata=_arg("micro-batch interval", type=float))
    starting_offsets: str = field(default="earliest", metadata=_arg(
        "where a NEW checkpoint starts; earliest rebuilds every group's latest state from the compacted topic",
        choices=STARTING_OFFSETS))
    include_groups: str = field(default=".*", metadata=_arg("Java regex (Spark rlike): only groups matching it"))
    exclude_groups: str = field(default=DEFAULT_EXCLUDE, metadata=_arg(
        "Java regex (Spark rlike): groups to leave out; the default leaves out the job's own consumer group"))
    lag_poll_seconds: float = field(default=10.0, metadata=_arg("log-end offset poll interval", type=float))
    lag_granularity: str = field(default="partition", metadata=_arg(
        "lag series per partition, or summed per topic (far fewer series on wide topics)",
        choices=LAG_GRANULARITIES))
    group_ttl_seconds: float = field(default=7 * 24 * 3600.0, metadata=_arg(
        "drop a group's state after this long without any record", type=float))
    expiry_sweep_seconds: float = field(default=300.0, metadata=_arg(
        "how often groups past their TTL are looked for", type=float))
    max_series: int = field(default=2_000_000, metadata=_arg(
        "most series /metrics serves; beyond it new series are dropped and counted", type=int))
    max_groups: int | None = field(default=None, metadata=_arg(
        "most groups tracked; records of further groups are dropped and counted (default: no limit)", type=int))
    max_members_per_group: int | None = field(default=None, metadata=_arg(
        "most members with their own series per group; the rest are left out and counted (default: no limit)",
        type=int))
    dead_letter_max: int = field(default=1000, metadata=_arg(
        "undecodable records kept as a sample for inspection", type=int))
    query_retry_seconds: float = field(default=3600.0, metadata=_arg(
        "after the streaming query fails (a batch's read outlasting the source's poll timeout, a failing "
        "checkpoint or event-log volume), start it again from the checkpoint, with backoff, for up to this "
        "long without a batch; then exit non-zero (0: exit at the first failure)", type=float))
    max_offsets_per_trigger: int | None = field(default=None, metadata=_arg(
        "cap records per micro-batch (catching up on a large topic)", type=int))
    state_partitions: int = field(default=8, metadata=_arg(
        "Spark shuffle partitions of the state store; fixed once a checkpoint exists", type=int))
    master: str | None = field(default=None, metadata=_arg(
        "Spark master when started outside spark-submit (default local[*])"))
    jars_dir: Path | None = field(default=None, metadata=_arg(
        "directory with Spark's Kafka connector jars (default: $REBALANCE_MONITOR_JARS, else build/jars of a "
        "source checkout)", type=Path))
    kafka_options: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        problems = [*self._range_problems(), *self._pattern_problems()]
        if problems:
            raise OptionError("; ".join(problems))

    def _range_problems(self) -> list[str]:
        positive = ("trigger_seconds", "lag_poll_seconds", "group_ttl_seconds", "expiry_sweep_seconds",
                    "max_series", "state_partitions")
        problems = [f"{flag(n)} must be positive" for n in positive if not getattr(self, n) > 0]
        problems += [f"{flag(n)} must not be negative" for n in ("dead_letter_max", "query_retry_seconds")
                     if getattr(self, n) < 0]
        problems += [f"{flag(n)} must be positive" for n in ("max_offsets_per_trigger", "max_groups",
                                                              "max_members_per_group")
                     if getattr(self, n) is not None and getattr(self, n) <= 0]
        if not 0 <= self.metrics_port <= 65535:
            problems.append(f"{flag('metrics_port')} must be 0-65535")
        if (self.metrics_tls_cert is None) != (self.metrics_tls_key is None):
            problems.append(f"{flag('metrics_tls_cert')} and {flag('metrics_tls_key')} go together")
        if self.starting_offsets not in STARTING_OFFSETS:
            problems.append(f"{flag('starting_offsets')} must be one of {', '.join(STARTING_OFFSETS)}")
        if self.lag_granularity not in LAG_GRANULARITIES:
            problems.append(f"{flag('lag_granularity')} must be one of {', '.join(LAG_GRANULARITIES)}")
        return problems

    def _pattern_problems(self) -> list[str]:
        return [f"{flag(name)} {pattern!r}: {why}" for name in ("include_groups", "exclude_groups")
                for pattern in [getattr(self, name)]
                for construct, why in PYTHON_ONLY_REGEX.items() if construct in pattern]

    @property
    def event_log_path(self) -> Path:
        return self.event_log or self.checkpoint_dir / "events"


def default(name: str) -> Any:
    """The default of a ``JobOptions`` field, for other commands sharing an option."""
    return JobOptions.__dataclass_fields__[name].default


def flag(name: str) -> str:
    """The command-line flag of a ``JobOptions`` field."""
    meta = next(f.metadata for f in fields(JobOptions) if f.name == name)
    return meta.get("flag") or "--" + name.replace("_", "-")


def validate_group_patterns(options: JobOptions, spark: Any) -> None:
    """Compile the group regexes with java.util.regex in Spark's JVM: the engine ``rlike`` runs.

    Python's ``re`` would both reject valid Java patterns (``\\p{Alpha}``, ``\\Q...\\E``) and
    accept ones Java refuses, so the JVM is the judge; call it once the session exists.
    """
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import IllegalArgumentException

    pattern_class = spark.sparkContext._jvm.java.util.regex.Pattern
    for name in ("include_groups", "exclude_groups"):
        try:
            pattern_class.compile(getattr(options, name))
        # PatternSyntaxException: pyspark converts it to its IllegalArgumentException once a
        # session has patched py4j, plain py4j raises Py4JJavaError.
        except (IllegalArgumentException, Py4JJavaError) as exc:
            java = getattr(exc, "java_exception", None)
            message = str(java.getMessage() if java is not None else exc).splitlines()[0]
            raise OptionError(f"{flag(name)} {getattr(options, name)!r} is not a valid Java regex: {message}") from exc


def build_parser(prog: str = "rebalance-monitor run") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Reconstruct every consumer group's generations and assignments from "
        "__consumer_offsets and serve rebalance, imbalance, movement and lag metrics to Prometheus. "
        "For a local demo (broker, churning groups, Prometheus) run `make run` or `python -m testbed.demo_run`.",
        epilog="Any Kafka client option passes through as --kafka.<name> VALUE (for example "
        "--kafka.security.protocol SASL_SSL --kafka.sasl.mechanism SCRAM-SHA-512 "
        "--kafka.sasl.jaas.config '...'): to Spark's Kafka source as is, and to the lag poller "
        "where kafka-python has the same setting.",
    )
    for f in fields(JobOptions):
        if "help" not in f.metadata:
            continue
        kwargs = {k: v for k, v in f.metadata.items() if k != "flag"}
        if f.default is MISSING:
            kwargs["required"] = True
        else:
            kwargs["default"] = f.default
            kwargs["help"] += f" (default: {f.default})" if f.default is not None else ""
        parser.add_argument(flag(f.name), dest=f.name, **kwargs)
    return parser


def parse_args(argv: list[str], prog: str = "rebalance-monitor run") -> JobOptions:
    parser = build_parser(prog)
    known, rest = parser.parse_known_args(argv)
    kafka_options = _kafka_options(parser, rest)
    try:
        return JobOptions(kafka_options=kafka_options, **vars(known))
    except OptionError as exc:
        parser.error(str(exc))


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

"""Command-line options of the monitor job, shared by spark-submit and ``rebalance-monitor run``.

The options are the packages' own configs composed (``KafkaConfig``, ``SourceConfig``,
``GroupsConfig``, ``LagConfig``, ``MetricsConfig``, ``DriverConfig``): each declares its
fields, defaults and checks beside the code that reads them, and the parser is built from
those fields, so every flag is declared once. A config checks its values when it is built,
so options built in code are held to the same rules as the command line.
"""

from __future__ import annotations

import argparse
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from streaming.cluster.config import KafkaConfig
from streaming.decode.config import SourceConfig
from streaming.driver.config import DriverConfig
from streaming.groups.config import GroupsConfig
from streaming.lag.config import LagConfig
from streaming.metrics.config import MetricsConfig
from streaming.settings import OptionError, flag

# Section name -> config class, in the order the help lists them.
SECTIONS: dict[str, type] = {
    "kafka": KafkaConfig,
    "source": SourceConfig,
    "groups": GroupsConfig,
    "lag": LagConfig,
    "metrics": MetricsConfig,
    "driver": DriverConfig,
}


@dataclass(frozen=True)
class JobOptions:
    """Every setting of the job, by the package that reads it."""

    kafka: KafkaConfig
    source: SourceConfig = field(default_factory=SourceConfig)
    groups: GroupsConfig = field(default_factory=GroupsConfig)
    lag: LagConfig = field(default_factory=LagConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    driver: DriverConfig = field(default_factory=DriverConfig)

    @classmethod
    def for_cluster(cls, bootstrap_servers: str, **sections: Any) -> JobOptions:
        return cls(KafkaConfig(bootstrap_servers), **sections)


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
    for section, config in SECTIONS.items():
        for f in fields(config):
            if "help" not in f.metadata:
                continue
            kwargs = {k: v for k, v in f.metadata.items() if k != "flag"}
            if f.default is MISSING:
                kwargs["required"] = True
            else:
                kwargs["default"] = f.default
                kwargs["help"] += f" (default: {f.default})" if f.default is not None else ""
            name = flag(config, f.name)
            if "choices" not in kwargs:
                kwargs["metavar"] = name[2:].upper().replace("-", "_")
            parser.add_argument(name, dest=f"{section}.{f.name}", **kwargs)
    return parser


def parse_args(argv: list[str], prog: str = "rebalance-monitor run") -> JobOptions:
    parser = build_parser(prog)
    known, rest = parser.parse_known_args(argv)
    values: dict[str, dict[str, Any]] = {section: {} for section in SECTIONS}
    for dest, value in vars(known).items():
        section, _, name = dest.partition(".")
        values[section][name] = value
    values["kafka"]["kafka_options"] = _kafka_options(parser, rest)
    try:
        return JobOptions(**{section: SECTIONS[section](**kwargs) for section, kwargs in values.items()})
    except OptionError as exc:
        parser.error(str(exc))


def default(config: type, name: str) -> Any:
    """The default of a config field, for other commands sharing an option."""
    return config.__dataclass_fields__[name].default  # type: ignore[attr-defined]


def _kafka_options(parser: argparse.ArgumentParser, rest: list[str]) -> dict[str, str]:
    """``--kafka.NAME VALUE`` / ``--kafka.NAME=VALUE`` pairs; anything else is an error."""
    options: dict[str, str] = {}
    items = iter(rest)
    for item in items:
        if not item.startswith("--kafka."):
            parser.error(f"unrecognized argument: {item}")
        name, sep, value = item[2:].partition("=")
        if not sep:
            following = next(items, None)
            if following is None:
                parser.error(f"{item} needs a value")
            value = following
        options[name] = value
    return options


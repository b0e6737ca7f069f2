"""Job options: one declaration per option, checked where it is declared, Java's regex dialect."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from streaming.decode.source import validate_group_patterns
from streaming.lag.config import LagConfig
from streaming.metrics.config import DEFAULT_METRICS_PORT, MetricsConfig
from streaming.options import SECTIONS, JobOptions, OptionError, build_parser, parse_args


def test_parser_defaults_are_the_field_defaults() -> None:
    parsed = parse_args(["--bootstrap-server", "b:9092"])
    assert parsed == JobOptions.for_cluster("b:9092")
    flags = {a.dest: a for a in build_parser()._actions if a.dest != "help"}
    declared = {f"{section}.{f.name}" for section, config in SECTIONS.items()
                for f in dataclasses.fields(config)} - {"kafka.kafka_options"}
    assert flags.keys() == declared, "every field has a flag and every flag a field"


def test_new_options_parse() -> None:
    options = parse_args(["--bootstrap-server", "b:9092", "--lag-granularity", "topic", "--max-series", "10",
                          "--expiry-sweep-seconds", "30", "--jars-dir", "/opt/jars", "--dead-letter-max", "0",
                          "--kafka.security.protocol=SSL"])
    assert (options.metrics.lag_granularity, options.metrics.max_series,
            options.groups.expiry_sweep_seconds) == ("topic", 10, 30.0)
    assert options.driver.jars_dir == Path("/opt/jars") and options.source.dead_letter_max == 0
    assert options.kafka.kafka_options == {"kafka.security.protocol": "SSL"}


def test_default_port_is_not_kafka_exporters() -> None:
    assert JobOptions.for_cluster("b").metrics.port == DEFAULT_METRICS_PORT != 9308


@pytest.mark.parametrize(("args", "message"), [
    (["--trigger-seconds", "0"], "--trigger-seconds must be positive"),
    (["--max-series", "0"], "--max-series must be positive"),
    (["--dead-letter-max", "-1"], "--dead-letter-max must not be negative"),
    (["--query-retry-seconds", "-5"], "--query-retry-seconds must not be negative"),
    (["--metrics-port", "70000"], "--metrics-port must be 0-65535"),
    (["--include-groups", "(?P<team>a)"], "Java names groups (?<name>...)"),
    (["--exclude-groups", "x\\Z"], "use \\z"),
    (["--lag-granularity", "group"], "invalid choice"),
    (["--nonsense", "1"], "unrecognized argument: --nonsense"),
])
def test_command_line_errors_name_the_flag(args: list[str], message: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--bootstrap-server", "b", *args])
    assert message in capsys.readouterr().err


def test_options_built_in_code_are_checked_too() -> None:
    with pytest.raises(OptionError, match="--lag-poll-seconds must be positive"):
        LagConfig(poll_seconds=0)
    with pytest.raises(OptionError, match="--lag-granularity"):
        dataclasses.replace(MetricsConfig(), lag_granularity="member")


@pytest.mark.slow
def test_group_patterns_judged_by_java(spark: object) -> None:
    """Java accepts what Python's re refuses (\\p{...}, \\Q..\\E) and refuses what it accepts."""
    from streaming.decode.config import SourceConfig

    validate_group_patterns(SourceConfig(include_groups=r"\p{Alpha}+-\Q.v1\E"), spark)
    with pytest.raises(OptionError, match=r"--exclude-groups 'a\{1,x' is not a valid Java regex"):
        validate_group_patterns(SourceConfig(exclude_groups="a{1,x"), spark)

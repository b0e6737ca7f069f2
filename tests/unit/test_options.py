"""Job options: one declaration per option, checked where it is declared, Java's regex dialect."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from streaming.decode.source import validate_group_patterns
from streaming.lag.config import LagConfig
from streaming.metrics.config import DEFAULT_METRICS_PORT, MetricsConfig
from streaming.options import SECTIONS, JobOptions, OptionError, build_parser, env_name, parse_args


def test_parser_defaults_are_the_field_defaults() -> None:
    parsed = parse_args(["--bootstrap-server", "b:9092"])
    assert parsed == JobOptions.for_cluster("b:9092")
    flags = {a.dest: a for a in build_parser()._actions
             if a.dest not in ("help", "version") and not a.dest.startswith("deprecated.")}
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


# ------------------------------------------------------------------------------ environment, habits


def test_every_option_has_an_environment_variable_and_the_command_line_wins() -> None:
    environ = {"REBALANCE_MONITOR_BOOTSTRAP_SERVER": "env:9092", "REBALANCE_MONITOR_LAG_GRANULARITY": "topic",
               "REBALANCE_MONITOR_CLUSTER": "prod", "REBALANCE_MONITOR_MAX_SERIES": "5000",
               "REBALANCE_MONITOR_METRICS_PORT": "10400"}
    options = parse_args([], environ=environ)
    assert options.kafka.bootstrap_servers == "env:9092"
    assert (options.metrics.lag_granularity, options.metrics.cluster, options.metrics.max_series,
            options.metrics.port) == ("topic", "prod", 5000, 10400)
    options = parse_args(["--bootstrap-server", "cli:9092", "--lag-granularity", "partition"], environ=environ)
    assert (options.kafka.bootstrap_servers, options.metrics.lag_granularity) == ("cli:9092", "partition")
    assert options.metrics.cluster == "prod"
    help_text = build_parser().format_help()
    for action in build_parser()._actions:
        if action.help != "==SUPPRESS==" and action.dest not in ("help", "version"):
            assert env_name(action.option_strings[0]) in help_text.replace("\n", "").replace(" ", ""), action.dest
    assert "REBALANCE_MONITOR_BOOTSTRAP_SERVER" in help_text and "command line wins" in help_text


@pytest.mark.parametrize(("environ", "message"), [
    ({"REBALANCE_MONITOR_LAG_GRANULARITY": "group"}, "REBALANCE_MONITOR_LAG_GRANULARITY: invalid choice 'group'"),
    ({"REBALANCE_MONITOR_MAX_SERIES": "many"}, "REBALANCE_MONITOR_MAX_SERIES: not a valid int"),
    ({"REBALANCE_MONITOR_TRIGGER_SECONDS": "0"}, "--trigger-seconds must be positive"),
    ({"REBALANCE_MONITOR_SPARK_CONF": "'unclosed"}, "REBALANCE_MONITOR_SPARK_CONF: No closing quotation"),
])
def test_environment_errors_name_the_variable(environ: dict[str, str], message: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--bootstrap-server", "b"], environ=environ)
    assert message in capsys.readouterr().err


def test_bootstrap_server_is_still_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args([], environ={})
    err = capsys.readouterr().err
    assert "--bootstrap-server is required" in err and "REBALANCE_MONITOR_BOOTSTRAP_SERVER" in err


def test_spark_conf_is_repeatable_and_from_the_environment(capsys: pytest.CaptureFixture[str]) -> None:
    options = parse_args(["--bootstrap-server", "b", "--spark-conf", "spark.local.dir=/tmp/spark",
                          "--spark-conf", "spark.driver.extraJavaOptions=-Xss4m -Da=b"],
                         environ={"REBALANCE_MONITOR_SPARK_CONF": "spark.local.dir=/env 'spark.x=1 2'"})
    assert options.driver.spark_settings == {"spark.local.dir": "/tmp/spark", "spark.x": "1 2",
                                             "spark.driver.extraJavaOptions": "-Xss4m -Da=b"}
    assert parse_args(["--bootstrap-server", "b"], environ={}).driver.spark_conf == ()
    with pytest.raises(SystemExit):
        parse_args(["--bootstrap-server", "b", "--spark-conf", "spark.local.dir"], environ={})
    assert "--spark-conf 'spark.local.dir': expected KEY=VALUE" in capsys.readouterr().err


def test_spark_conf_reaches_the_session_builder(monkeypatch: pytest.MonkeyPatch) -> None:
    import pyspark.sql

    from streaming import job

    seen: dict[str, str] = {}

    class Builder:
        def appName(self, _name: str) -> Builder:
            return self

        def master(self, _master: str) -> Builder:
            return self

        def config(self, key: str, value: str) -> Builder:
            seen[key] = value
            return self

        def getOrCreate(self) -> object:
            raise RuntimeError("built")

    monkeypatch.setattr(pyspark.sql.SparkSession, "builder", Builder())
    monkeypatch.setattr(job, "connector_jars", lambda _dir: [])
    options = parse_args(["--bootstrap-server", "b", "--spark-conf", "spark.ui.retainedJobs=7",
                          "--spark-conf", "spark.local.dir=/tmp/spark"], environ={})
    with pytest.raises(RuntimeError, match="built"):
        job.spark_session(options)
    assert seen["spark.ui.retainedJobs"] == "7" and seen["spark.local.dir"] == "/tmp/spark"


def test_log_level_and_quiet_kafka_clients() -> None:
    import logging

    from streaming.job import configure_logging

    assert parse_args(["--bootstrap-server", "b"], environ={}).driver.log_level == "INFO"
    kafka_log = logging.getLogger("kafka")
    before = kafka_log.level
    try:
        configure_logging("INFO")
        assert kafka_log.level == logging.WARNING
        configure_logging("ERROR")
        assert kafka_log.level == logging.ERROR
        configure_logging("DEBUG")
        assert kafka_log.level == logging.DEBUG
    finally:
        kafka_log.setLevel(before)


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from streaming.cli import main
    from streaming.metrics.runtime import version

    main(["--version"])
    assert capsys.readouterr().out.strip() == f"rebalance-monitor {version()}"
    with pytest.raises(SystemExit) as exited:
        main(["run", "--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"rebalance-monitor run {version()}"


def test_state_partitions_is_accepted_ignored_and_hidden() -> None:
    options = parse_args(["--bootstrap-server", "b", "--state-partitions", "2", "--cluster", "c",
                          "--checkpoint-dir", "/data/checkpoint"], environ={})
    assert options.notes == ("--state-partitions is deprecated and ignored: it never changed anything: the job "
                             "keeps its group state on the driver",)
    assert "--state-partitions" not in build_parser().format_help()


def test_unfit_defaults_are_warned_about() -> None:
    notes = parse_args(["--bootstrap-server", "b"], environ={}).notes
    assert any(n.startswith("--cluster is left at 'default'") for n in notes)
    assert any(n.startswith("--checkpoint-dir is the relative default") for n in notes)
    assert parse_args(["--bootstrap-server", "b", "--cluster", "prod", "--checkpoint-dir", "/data/c"],
                      environ={}).notes == ()

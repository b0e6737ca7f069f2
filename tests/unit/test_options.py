"""Job options: one declaration per option, checked where it is declared, Java's regex dialect."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from streaming.decode.source import validate_group_patterns
from streaming.driver.config import DriverConfig
from streaming.lag.config import LagConfig
from streaming.metrics.config import DEFAULT_METRICS_PORT, MetricsConfig
from streaming.options import SECTIONS, JobOptions, OptionError, build_parser, env_name, parse_args


def test_parser_defaults_are_the_field_defaults() -> None:
    parsed = parse_args(["--bootstrap-server", "b:9092"])
    assert parsed == JobOptions.for_cluster("b:9092")
    flags = {a.dest: a for a in build_parser()._actions
             if a.dest not in ("help", "version", "config") and not a.dest.startswith("deprecated.")}
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
    (["--stop-drain-seconds", "30"], "--stop-drain-seconds must be at least 0 and below 30"),
    (["--stop-drain-seconds", "-1"], "--stop-drain-seconds must be at least 0 and below 30"),
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



def test_the_event_log_retention_is_kafka_s_week_0_keeps_every_event_and_it_is_never_negative() -> None:
    assert parse_args(["--bootstrap-server", "b"]).driver.event_log_retention_seconds == 168 * 3600
    environ = {"REBALANCE_MONITOR_EVENT_LOG_RETENTION_SECONDS": "0"}
    assert parse_args(["--bootstrap-server", "b"], environ=environ).driver.event_log_retention_seconds == 0
    with pytest.raises(OptionError, match="--event-log-retention-seconds must not be negative"):
        DriverConfig(event_log_retention_seconds=-1)


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

    from streaming.logformat import configure_logging

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
        ours = [h for h in logging.getLogger().handlers if h.get_name() == "rebalance-monitor"]
        assert len(ours) == 1, "configured again, the job's handler is replaced, not added"
    finally:
        kafka_log.setLevel(before)
        for handler in [h for h in logging.getLogger().handlers if h.get_name() == "rebalance-monitor"]:
            logging.getLogger().removeHandler(handler)


def test_json_log_lines_carry_time_level_logger_message_and_no_secret() -> None:
    import json
    import logging
    import sys

    from streaming.logformat import JsonFormatter, TextFormatter

    secret = 'pa"ss\\word'  # JSON escapes quotes and backslashes: redacted before that
    try:
        raise ValueError(f"boom {secret}")
    except ValueError:
        exc_info = sys.exc_info()
    record = logging.LogRecord("rebalance_monitor", logging.WARNING, __file__, 1, "login as %s with %s failed",
                               ("monitor", secret), exc_info)
    line = JsonFormatter([secret]).format(record)
    assert len(line.splitlines()) == 1
    entry = json.loads(line)
    assert entry["level"] == "WARNING" and entry["logger"] == "rebalance_monitor"
    assert entry["message"] == "login as monitor with *** failed"
    assert entry["time"].endswith("Z") and entry["time"][:4].isdigit()
    assert "ValueError: boom ***" in entry["exception"] and secret not in entry["exception"]
    text = TextFormatter([secret]).format(record)
    assert "WARNING rebalance_monitor: login as monitor with *** failed" in text and secret not in text
    assert parse_args(["--bootstrap-server", "b", "--log-format", "json"], environ={}).driver.log_format == "json"
    assert parse_args(["--bootstrap-server", "b"], environ={}).driver.log_format == "text"


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


# ------------------------------------------------------------------------------ --config FILE


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "rebalance-monitor.toml"
    path.write_text(text)
    return path


def test_config_file_sets_options_and_the_environment_and_command_line_win(tmp_path: Path) -> None:
    kafka_config = tmp_path / "kafka.properties"
    kafka_config.write_text("bootstrap.servers=from-kafka-config:9092\nsecurity.protocol=SSL\n")
    config = write_config(tmp_path, f"""
# every key is an option of rebalance-monitor run without its dashes
bootstrap-server = "file:9092"
cluster = "file-cluster"
lag-granularity = "topic"
max-groups = 50000
trigger-seconds = 2.5
kafka-config = "{kafka_config}"
spark-conf = ["spark.local.dir=/tmp/spark", "spark.driver.memory=3g"]
log-format = "json"
""")
    options = parse_args(["--config", str(config)], environ={})
    assert options.kafka.bootstrap_servers == "file:9092"  # over --kafka-config's bootstrap.servers
    assert options.kafka.kafka_options == {"kafka.security.protocol": "SSL"}
    assert (options.metrics.cluster, options.metrics.lag_granularity, options.groups.max_groups,
            options.driver.trigger_seconds, options.driver.log_format) == ("file-cluster", "topic", 50000, 2.5, "json")
    assert options.driver.spark_settings == {"spark.local.dir": "/tmp/spark", "spark.driver.memory": "3g"}
    # environment over the file, the command line over both; unset anywhere: the default
    environ = {"REBALANCE_MONITOR_CLUSTER": "env-cluster", "REBALANCE_MONITOR_LAG_GRANULARITY": "partition"}
    options = parse_args(["--config", str(config), "--lag-granularity", "topic"], environ=environ)
    assert (options.metrics.cluster, options.metrics.lag_granularity) == ("env-cluster", "topic")
    assert options.groups.expiry_sweep_seconds == 300.0
    # the file named by its variable
    options = parse_args([], environ={"REBALANCE_MONITOR_CONFIG": str(config)})
    assert options.metrics.cluster == "file-cluster"
    help_text = build_parser().format_help()
    assert "--config FILE" in help_text and "REBALANCE_MONITOR_CONFIG" in help_text


@pytest.mark.parametrize(("text", "message"), [
    ('lag-granularity = "group"', ": lag-granularity: invalid choice 'group'"),
    ('max-series = "many"', ": max-series: not a valid int"),
    ("trigger-seconds = 0", "--trigger-seconds must be positive"),
    ('clusterr = "x"', ": clusterr: not an option of rebalance-monitor run"),
    ('"kafka.sasl.jaas.config" = "secret-value"', "Kafka client settings go in --kafka-config"),
    ('cluster = ["a", "b"]', ": cluster: takes one value, not a list"),
    ("cluster = true", ": cluster: expected a string or a number"),
    ('config = "other.toml"', ": config: not an option"),
    ('cluster = "unclosed\npassword = "secret-value"', "not valid TOML (")])
def test_config_file_errors_name_the_file_and_key_never_a_value(tmp_path: Path, text: str, message: str,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path, text + "\n")
    with pytest.raises(SystemExit):
        parse_args(["--bootstrap-server", "b", "--config", str(config)], environ={})
    err = capsys.readouterr().err
    assert message in err, err
    assert "secret-value" not in err
    if "must be positive" not in message:
        assert f"--config {config}" in err


def test_config_file_missing_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--bootstrap-server", "b", "--config", str(tmp_path / "absent.toml")], environ={})
    assert f"--config {tmp_path / 'absent.toml'}: cannot read it (No such file or directory)" in capsys.readouterr().err


# ------------------------------------------------------------------------------ the other commands


def test_history_advise_and_dead_letters_find_the_checkpoint_run_uses(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """REBALANCE_MONITOR_CHECKPOINT_DIR (and REBALANCE_MONITOR_EVENT_LOG) set for run point the read-only
    commands at the same place; their command line still wins."""
    from streaming import cli
    from streaming.advisor import command

    environ = {"REBALANCE_MONITOR_CHECKPOINT_DIR": str(tmp_path / "cp")}
    assert run_checkpoint(environ) == tmp_path / "cp"
    assert cli.history_parser(environ).parse_args(["--group", "g"]).checkpoint_dir == tmp_path / "cp"
    assert cli.dead_letters_parser(environ).parse_args([]).checkpoint_dir == tmp_path / "cp"
    assert cli.dead_letters_parser(environ).parse_args(["--checkpoint-dir", "/x"]).checkpoint_dir == Path("/x")
    assert cli.history_parser({**environ, "REBALANCE_MONITOR_EVENT_LOG": "/logs/ev"}).parse_args(
        ["--group", "g"]).event_log == Path("/logs/ev")
    assert cli.history_parser({}).parse_args(["--group", "g"]).checkpoint_dir == Path(".local/checkpoint")
    asked: list[Path] = []
    monkeypatch.setenv("REBALANCE_MONITOR_CHECKPOINT_DIR", str(tmp_path / "cp"))
    monkeypatch.setattr("streaming.groups.store.load_snapshot", lambda path, group: asked.append(path))
    with pytest.raises(SystemExit):
        cli.main(["advise", "--group", "g"])
    assert asked == [tmp_path / "cp"]
    printed: list[Path] = []
    monkeypatch.setattr("streaming.logs.dead_letters.print_dead_letters",
                        lambda path, out, limit: printed.append(path))
    cli.main(["dead-letters"])
    assert printed == [tmp_path / "cp" / "monitor" / "dead-letters"]
    assert command.advise_parser().parse_args(["--group", "g"]).checkpoint_dir == Path(".local/checkpoint")


def run_checkpoint(environ: dict[str, str]) -> Path:
    return parse_args(["--bootstrap-server", "b"], environ=environ).driver.checkpoint_dir

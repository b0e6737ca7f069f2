"""Command-line options of the monitor job, shared by spark-submit and ``rebalance-monitor run``.

The options are the packages' own configs composed (``KafkaConfig``, ``SourceConfig``,
``GroupsConfig``, ``LagConfig``, ``LiveConfig``, ``MetricsConfig``, ``DriverConfig``): each declares its
fields, defaults and checks beside the code that reads them, and the parser is built from
those fields, so every flag is declared once. A config checks its values when it is built,
so options built in code are held to the same rules as the command line.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import tomllib
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

from streaming.cluster.config import KafkaConfig, load_kafka_config
from streaming.decode.config import SourceConfig
from streaming.driver.config import DriverConfig
from streaming.groups.config import GroupsConfig
from streaming.lag.config import LagConfig
from streaming.live.config import LiveConfig
from streaming.metrics.config import MetricsConfig
from streaming.settings import OptionError, flag

# Section name -> config class, in the order the help lists them.
SECTIONS: dict[str, type] = {
    "kafka": KafkaConfig,
    "source": SourceConfig,
    "groups": GroupsConfig,
    "lag": LagConfig,
    "live": LiveConfig,
    "metrics": MetricsConfig,
    "driver": DriverConfig,
}


ENV_PREFIX = "REBALANCE_MONITOR_"
CONFIG_OPTION = "--config"
# Accepted so that existing command lines keep working, read nowhere (hidden from --help).
DEPRECATED = {"--state-partitions": "it never changed anything: the job keeps its group state on the driver"}

EPILOG = f"""\
Every option can also come from the environment as {ENV_PREFIX}<OPTION>: the option's name in capitals,
dashes as underscores (--bootstrap-server: {ENV_PREFIX}BOOTSTRAP_SERVER, --lag-granularity:
{ENV_PREFIX}LAG_GRANULARITY; --spark-conf takes several KEY=VALUE words, quoted as in a shell).
--config FILE (or {ENV_PREFIX}CONFIG) reads options from a TOML file, one key per option without its dashes
(bootstrap-server = "kafka-0:9092", max-groups = 50000, spark-conf = ["spark.local.dir=/tmp/spark"]).
The command line wins over the environment, which wins over --config, then --kafka-config, then the defaults.

Kafka client settings: --kafka-config FILE, a Java-properties file as Kafka tools' --command-config
(security.protocol=SASL_SSL, sasl.mechanism=SCRAM-SHA-512, sasl.jaas.config=..., ssl.truststore.location=...),
and --kafka.<name> VALUE for any single setting (it wins over the file). Both go to Spark's Kafka source as
kafka.<name> and to the job's own clients (lag poller, metadata) where kafka-python has the same setting.
Keep passwords in the file: a command line is visible to every user of the host. Secret values are never logged.

docs/operations.md: the options, the checkpoint, the ACLs the job needs, sizing and troubleshooting.
"""


@dataclass(frozen=True)
class JobOptions:
    """Every setting of the job, by the package that reads it."""

    kafka: KafkaConfig
    source: SourceConfig = field(default_factory=SourceConfig)
    groups: GroupsConfig = field(default_factory=GroupsConfig)
    lag: LagConfig = field(default_factory=LagConfig)
    live: LiveConfig = field(default_factory=LiveConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    driver: DriverConfig = field(default_factory=DriverConfig)
    # Warnings about the options themselves (defaults unfit for production, deprecated options),
    # logged when the job starts.
    notes: tuple[str, ...] = field(default=(), compare=False)

    @classmethod
    def for_cluster(cls, bootstrap_servers: str, **sections: Any) -> JobOptions:
        return cls(KafkaConfig(bootstrap_servers), **sections)


def env_name(option: str) -> str:
    """The environment variable of a command-line option: ``--lag-granularity`` -> REBALANCE_MONITOR_LAG_GRANULARITY."""
    return ENV_PREFIX + option.lstrip("-").upper().replace("-", "_").replace(".", "_")


def build_parser(prog: str = "rebalance-monitor run") -> argparse.ArgumentParser:
    from streaming.metrics.runtime import version

    parser = argparse.ArgumentParser(
        prog=prog,
        description="Reconstruct every consumer group's generations and assignments from __consumer_offsets\n"
        "and serve rebalance, imbalance, movement and lag metrics to Prometheus. For a local demo\n"
        "(broker, churning groups, Prometheus) run `make run` or `python -m testbed.demo_run`.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    parser.add_argument(CONFIG_OPTION, dest="config", type=Path, metavar="FILE", default=None,
                        help="a TOML file of options, one key per option without its dashes "
                        f"[{env_name(CONFIG_OPTION)}]")
    for section, config in SECTIONS.items():
        for f in fields(config):
            if "help" not in f.metadata:
                continue
            kwargs = {k: v for k, v in f.metadata.items() if k != "flag"}
            name = flag(config, f.name)
            if f.default is MISSING or kwargs.get("action") == "append":
                kwargs["default"] = None  # required ones are checked after the environment and files
            else:
                kwargs["default"] = f.default
                kwargs["help"] += f" (default: {f.default})" if f.default is not None else ""
            kwargs["help"] += f" [{env_name(name)}]"
            if "choices" not in kwargs:
                kwargs["metavar"] = name[2:].upper().replace("-", "_")
            parser.add_argument(name, dest=f"{section}.{f.name}", **kwargs)
    for name in DEPRECATED:
        parser.add_argument(name, dest=f"deprecated.{name}", default=None, help=argparse.SUPPRESS)
    return parser


def parse_args(argv: list[str], prog: str = "rebalance-monitor run",
               environ: Mapping[str, str] | None = None) -> JobOptions:
    """The job's options from the command line over ``REBALANCE_MONITOR_*`` variables over the --config
    file over the --kafka-config file and the defaults."""
    parser = build_parser(prog)
    environment = os.environ if environ is None else environ
    file_words = _config_file_args(parser, _config_path(argv, environment))
    known, rest = parser.parse_known_args([*file_words, *_environment_args(parser, environment), *argv])
    values: dict[str, dict[str, Any]] = {section: {} for section in SECTIONS}
    notes: list[str] = []
    for dest, value in vars(known).items():
        section, _, name = dest.partition(".")
        if section == "config":
            continue
        if section == "deprecated":
            if value is not None:
                notes.append(f"{name} is deprecated and ignored: {DEPRECATED[name]}")
            continue
        values[section][name] = value
    for section, config in SECTIONS.items():
        for f in fields(config):
            if f.metadata.get("action") == "append":
                values[section][f.name] = tuple(values[section][f.name] or ())
    kafka = values["kafka"]
    file_options: dict[str, str] = {}
    if kafka["config_file"] is not None:
        try:
            file_options = load_kafka_config(kafka["config_file"])
        except OptionError as exc:
            parser.error(str(exc))
    file_bootstrap = file_options.pop("bootstrap.servers", None)
    kafka["kafka_options"] = {**{f"kafka.{name}": value for name, value in file_options.items()},
                              **_kafka_options(parser, rest)}
    if kafka["bootstrap_servers"] is None:
        if file_bootstrap is None:
            parser.error(f"--bootstrap-server is required (or {env_name('--bootstrap-server')} in the environment, "
                         "or bootstrap.servers in --kafka-config)")
        kafka["bootstrap_servers"] = file_bootstrap
    try:
        options = JobOptions(**{section: SECTIONS[section](**kwargs) for section, kwargs in values.items()})
    except OptionError as exc:
        parser.error(str(exc))
    return dataclasses.replace(options, notes=(*notes, *_unfit_defaults(options)))


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """The job's settable options by their long name (--help, --version and --config aside)."""
    options = {}
    for action in parser._actions:
        option = next((o for o in action.option_strings if o.startswith("--")), None)
        if option is not None and option not in ("--help", "--version", CONFIG_OPTION):
            options[option] = action
    return options


def _words(parser: argparse.ArgumentParser, option: str, action: argparse.Action, items: list[str],
           source: str) -> list[str]:
    """``items`` as command-line words for ``option``, each checked as argparse would, an error naming
    ``source`` (a variable, a file's key) rather than a flag the operator never typed."""
    words: list[str] = []
    for item in items:
        if action.choices is not None and item not in action.choices:
            parser.error(f"{source}: invalid choice {item!r} (choose from {', '.join(map(str, action.choices))})")
        if callable(action.type):
            try:
                action.type(item)
            except (TypeError, ValueError):
                type_name = getattr(action.type, "__name__", "value")
                parser.error(f"{source}: not a valid {type_name}")
        words += [option, item]
    return words


def _environment_args(parser: argparse.ArgumentParser, environ: Mapping[str, str]) -> list[str]:
    """``REBALANCE_MONITOR_<OPTION>`` variables as command-line words, put before the real command
    line so that the real one wins; a bad value is an error naming the variable."""
    words: list[str] = []
    for option, action in _options(parser).items():
        variable = env_name(option)
        if variable not in environ:
            continue
        raw = environ[variable]
        try:
            items = shlex.split(raw) if isinstance(action, argparse._AppendAction) else [raw]
        except ValueError as exc:
            parser.error(f"{variable}: {exc}")
        words += _words(parser, option, action, items, variable)
    return words


def _config_path(argv: list[str], environ: Mapping[str, str]) -> Path | None:
    """--config from the command line, else its variable: read before the rest, which it feeds."""
    finder = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    finder.add_argument(CONFIG_OPTION, type=Path, default=None)
    path: Path | None = finder.parse_known_args(argv)[0].config
    if path is None and environ.get(env_name(CONFIG_OPTION)):
        path = Path(environ[env_name(CONFIG_OPTION)])
    return path


def _config_file_args(parser: argparse.ArgumentParser, path: Path | None) -> list[str]:
    """The --config file's options as command-line words, put first so that the environment and the
    command line win. TOML, read by the standard library (tomllib): typed values (numbers, strings,
    lists for repeatable options) and no new dependency. Kafka client settings stay in --kafka-config,
    the Java-properties file Kafka's own tools read; an unknown key is an error, not a silent no-op.
    Errors name the file and the key (a TOML syntax error its line), never a value."""
    if path is None:
        return []
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        parser.error(f"{CONFIG_OPTION} {path}: cannot read it ({exc.strerror})")
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        parser.error(f"{CONFIG_OPTION} {path}: not valid TOML ({exc})")
    options = _options(parser)
    words: list[str] = []
    for key, value in table.items():
        source = f"{CONFIG_OPTION} {path}: {key}"
        action = options.get(f"--{key}")
        if action is None:
            hint = " (Kafka client settings go in --kafka-config)" if key.startswith("kafka") else ""
            parser.error(f"{source}: not an option of rebalance-monitor run{hint}")
        repeatable = isinstance(action, argparse._AppendAction)
        if isinstance(value, list) and not repeatable:
            parser.error(f"{source}: takes one value, not a list")
        items = value if isinstance(value, list) else [value]
        if not all(isinstance(item, str | int | float) and not isinstance(item, bool) for item in items):
            parser.error(f"{source}: expected a string or a number{' (or a list of them)' if repeatable else ''}")
        words += _words(parser, f"--{key}", action, [str(item) for item in items], source)
    return words


def _unfit_defaults(options: JobOptions) -> list[str]:
    """Warnings about defaults that suit a try-out and not a deployment."""
    notes = []
    if options.metrics.cluster == default(MetricsConfig, "cluster"):
        notes.append(f"--cluster is left at {options.metrics.cluster!r}: every series carries "
                     f"cluster={options.metrics.cluster!r}; name the Kafka cluster so that dashboards and alerts "
                     "tell clusters apart")
    checkpoint = options.driver.checkpoint_dir
    if checkpoint == default(DriverConfig, "checkpoint_dir"):
        notes.append(f"--checkpoint-dir is the relative default, {checkpoint.resolve()}: the job's memory "
                     "(offsets, group state, event log) lives there; give a path on storage that survives "
                     "restarts and upgrades")
    return notes


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


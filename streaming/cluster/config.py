"""Which Kafka cluster the job reads, and the Kafka client settings every client of the job shares.

Client settings come from ``--kafka.<name> VALUE`` pairs and from a Java-properties file
(``--kafka-config FILE``, the format of Kafka tools' ``--command-config``); both end up in
:attr:`KafkaConfig.kafka_options` as ``kafka.<name>`` keys, the one place Spark's source
(:mod:`streaming.decode.source`) and the kafka-python clients (:mod:`streaming.cluster.client`)
read them from. Values are never put in a message: passwords live there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from streaming.settings import Config, OptionError, setting

# Java client setting names: dotted words (plugins' own settings may use capitals or dashes).
_SETTING_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


@dataclass(frozen=True)
class KafkaConfig(Config):
    bootstrap_servers: str = field(metadata=setting(
        "Kafka bootstrap servers, HOST:PORT[,HOST:PORT...] (default: bootstrap.servers of --kafka-config)",
        flag="--bootstrap-server"))
    # --kafka.<name> VALUE pairs (Java client names, "kafka." kept) over the --kafka-config file's
    # entries: to Spark's source as they are, mapped for the lag poller (streaming.cluster.client).
    kafka_options: dict[str, str] = field(default_factory=dict)
    config_file: Path | None = field(default=None, metadata=setting(
        "Java-properties file of Kafka client settings (as Kafka tools' --command-config: key=value lines, # and ! "
        "comments), for example security.protocol, sasl.mechanism, sasl.jaas.config, ssl.truststore.location; "
        "given to Spark's Kafka source and the job's own clients, --kafka.<name> options win over it. Keep "
        "secrets here rather than on the command line", flag="--kafka-config", type=Path))

    def problems(self) -> list[str]:
        return [] if self.bootstrap_servers else ["--bootstrap-server must not be empty"]


class KafkaConfigFileError(OptionError):
    """A --kafka-config file that cannot be read; the message names the file and line, never a value."""


def load_kafka_config(path: Path) -> dict[str, str]:
    """The settings of a Java-properties file, by name (no ``kafka.`` prefix).

    Java's format: ``key=value``, ``key: value`` or ``key value``; blank lines and lines starting
    with ``#`` or ``!`` are skipped; a line ending in a backslash continues on the next; ``\\t``,
    ``\\n``, ``\\uXXXX`` and a backslash before any other character are escapes. Stricter than
    Java in what is surely a mistake: a line with a key and no value or separator, a key that is
    no client setting name, a bad ``\\u`` escape. A later line wins over an earlier one.
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise KafkaConfigFileError(f"--kafka-config {path}: cannot read it ({exc.strerror or exc})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad_line = raw[:exc.start].count(b"\n") + 1
        raise KafkaConfigFileError(f"--kafka-config {path} line {bad_line}: not UTF-8 text") from None
    settings: dict[str, str] = {}
    for number, line in _logical_lines(text):
        try:
            name, value = _entry(line)
        except ValueError as exc:
            raise KafkaConfigFileError(f"--kafka-config {path} line {number}: {exc}") from None
        settings[name] = value
    return settings


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(number of the first natural line, text) of every entry: comments and blanks dropped,
    continuations joined with the next line's leading white space removed."""
    found: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, natural in enumerate(text.splitlines(), start=1):
        if pending is None:
            stripped = natural.lstrip(" \t\f")
            if not stripped or stripped[0] in "#!":
                continue
            start, part = number, stripped
        else:
            start, part = pending[0], pending[1] + natural.lstrip(" \t\f")
        trailing = len(part) - len(part.rstrip("\\"))
        if trailing % 2:  # an odd number of backslashes: the last one joins the next line
            pending = (start, part[:-1])
        else:
            pending = None
            found.append((start, part))
    if pending is not None:
        found.append(pending)
    return found


def _entry(line: str) -> tuple[str, str]:
    """(key, value) of one logical line; ValueError saying what is wrong, without the line's text."""
    index, key = 0, []
    while index < len(line):
        char = line[index]
        if char == "\\" and index + 1 < len(line):
            decoded, index = _escape(line, index)
            key.append(decoded)
            continue
        if char in "=: \t\f":
            break
        key.append(char)
        index += 1
    name = "".join(key)
    rest = line[index:].lstrip(" \t\f")
    had_separator = bool(rest) and rest[0] in "=:"
    if had_separator:
        rest = rest[1:].lstrip(" \t\f")
    if not name:
        raise ValueError("no key before the separator (expected KEY=VALUE)")
    if not _SETTING_NAME.fullmatch(name):
        raise ValueError("the key is not a Kafka client setting name (expected KEY=VALUE)")
    if not had_separator and not rest:
        raise ValueError(f"{name} has no '=' and no value (expected KEY=VALUE)")
    value, index = [], 0
    while index < len(rest):
        if rest[index] == "\\" and index + 1 < len(rest):
            decoded, index = _escape(rest, index)
            value.append(decoded)
        else:
            value.append(rest[index])
            index += 1
    return name, "".join(value)


def _escape(text: str, index: int) -> tuple[str, int]:
    """The character escaped at ``text[index]`` (a backslash) and the index after the escape."""
    code = text[index + 1]
    if code == "u":
        digits = text[index + 2:index + 6]
        if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
            raise ValueError("malformed \\uXXXX escape")
        return chr(int(digits, 16)), index + 6
    return _ESCAPES.get(code, code), index + 2

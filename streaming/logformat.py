"""The job's log lines: plain text for a terminal, or one JSON object per line for a log pipeline.

Both formats redact the job's secret values (passwords, JAAS configurations, tokens of its Kafka
settings) from every line, whatever logged it: the messages are meant to hold none already, and this
is the net under them. JSON lines carry ``time`` (UTC, RFC 3339 with milliseconds), ``level``,
``logger``, ``message`` and, for a logged exception, ``exception``; the secret is redacted before the
JSON escaping, which would otherwise change how a password with quotes or backslashes looks.
"""

from __future__ import annotations

import datetime
import json
import logging
from collections.abc import Sequence

from streaming.cluster.client import redact

HANDLER_NAME = "rebalance-monitor"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class TextFormatter(logging.Formatter):
    def __init__(self, secrets: Sequence[str] = ()) -> None:
        super().__init__(TEXT_FORMAT)
        self.secrets = list(secrets)

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record), self.secrets)


class JsonFormatter(logging.Formatter):
    def __init__(self, secrets: Sequence[str] = ()) -> None:
        super().__init__()
        self.secrets = list(secrets)

    def format(self, record: logging.LogRecord) -> str:
        time = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
        entry = {"time": time.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                 "level": record.levelname, "logger": record.name,
                 "message": redact(record.getMessage(), self.secrets)}
        if record.exc_info:
            entry["exception"] = redact(self.formatException(record.exc_info), self.secrets)
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(level: str, log_format: str = "text", secrets: Sequence[str] = ()) -> None:
    """The job's log format and level (--log-level, --log-format) on stderr; the Kafka clients' and
    py4j's INFO chatter left out. Called again, it replaces its own handler and no other."""
    handler = logging.StreamHandler()
    handler.set_name(HANDLER_NAME)
    handler.setFormatter(JsonFormatter(secrets) if log_format == "json" else TextFormatter(secrets))
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == HANDLER_NAME]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level))
    # py4j logs every callback at INFO, and from __del__ too: at interpreter exit that took the log
    # handler's lock held by a thread already frozen, and the process never ended.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    # kafka-python logs every connection, metadata update and coordinator change at INFO.
    logging.getLogger("kafka").setLevel(max(getattr(logging, level), logging.WARNING) if level != "DEBUG"
                                        else logging.DEBUG)

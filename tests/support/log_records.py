"""Log records a test asserts on, kept to the loggers it is about.

pytest's ``caplog`` captures every logger in the process, and the session-wide Kafka clients of other tests
log there too (kafka-python's ``Topic ... not found in cluster metadata`` once a test has deleted its topic).
"""

from __future__ import annotations

import logging

import pytest


def records(caplog: pytest.LogCaptureFixture, logger: str) -> list[logging.LogRecord]:
    """The captured records of ``logger`` and the loggers below it."""
    return [r for r in caplog.records if r.name == logger or r.name.startswith(f"{logger}.")]

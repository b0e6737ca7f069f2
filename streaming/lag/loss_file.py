"""What :class:`~streaming.lag.retention.LostRecords` counted, kept in a small JSON file beside the checkpoint.

``kafka_consumergroup_records_lost_total`` is a counter: a restart must not take it back to 0 (Prometheus
would read a reset, and ``increase()`` over it would count every loss again), nor count again records
already counted. The file is written whole to a temporary file in the same directory, flushed to disk,
then renamed over the old one: a crash leaves the old file or the new one, never half of either. A file
that cannot be read is logged and set aside (counting starts from 0 rather than the job failing).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

VERSION = 1


class LossFile:
    """Load and save the lost-records state at ``path`` (its directory is created on the first save)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def load(self) -> dict[str, Any]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        except OSError as exc:
            log.warning("cannot read %s (%s): records lost are counted from 0", self.path, exc)
            return {}
        try:
            state = json.loads(text)
            if not isinstance(state, dict) or state.get("version") != VERSION:
                raise ValueError(f"not version {VERSION}")
            return state
        except ValueError as exc:
            log.warning("%s is unreadable (%s): set aside, records lost are counted from 0", self.path, exc)
            self.path.replace(self.path.with_name(self.path.name + ".unreadable"))
            return {}

    def save(self, state: dict[str, Any]) -> bool:
        """Write ``state`` (temp file, fsync, rename); False when it failed (logged, retried by the caller)."""
        temporary = self.path.with_name(self.path.name + ".tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with temporary.open("w", encoding="utf-8") as out:
                json.dump({"version": VERSION, **state}, out, separators=(",", ":"), sort_keys=True)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, self.path)
            return True
        except OSError as exc:
            log.warning("cannot write %s (%s): a restart now would show the records lost as of the last "
                        "write", self.path, exc)
            return False

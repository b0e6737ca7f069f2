"""Ask Apache Kafka's own code (tests/jvm/KafkaOracle.java) to encode and print coordinator records.

One JVM per Kafka jar directory is started on first use and kept for the whole test session
(JVM start plus single-file compilation costs about a second), and requests are streamed to it
as JSON lines. Reusable by any test:

    format_with_kafka(jar_dir, [(key_bytes, value_bytes_or_None), ...]) -> [dict, ...]
    encode_with_kafka(jar_dir, [{"message": "OffsetCommitValue", "version": 3, "prefix": 3,
                                 "data": {...}}, ...]) -> [bytes, ...]
    sticky_user_data_with_kafka(jar_dir, [user_data_bytes, ...]) -> [dict, ...]

Each formatted dict has ``offsets`` / ``group`` (what OffsetsMessageFormatter and
GroupMetadataMessageFormatter print), ``coordinator`` (the 4.x generic coordinator-record JSON
converters, any record type) and ``dump`` (DumpLogSegments' offsets decoder, 4.x); a tool that
prints nothing or does not exist in that Kafka version gives None, a failure ``{"error": ...}``.
"""

from __future__ import annotations

import atexit
import base64
import json
import os
import subprocess
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
HELPER = REPO / "tests" / "jvm" / "KafkaOracle.java"
JARS_ROOT = Path(os.environ.get("KAFKA_JARS_DIR", REPO / "build" / "jars"))


def kafka_jar_dir(version: str) -> Path:
    """Where the Makefile puts a Kafka version's jars (``KAFKA_JARS_DIR`` overrides the root)."""
    return JARS_ROOT / f"kafka-{version}"


class KafkaOracle:
    """A running KafkaOracle.java: JSON lines in, one JSON line out per request."""

    def __init__(self, jar_dir: Path) -> None:
        if not any(jar_dir.glob("kafka-clients-*.jar")):
            raise FileNotFoundError(f"no Kafka jars in {jar_dir}")
        self.process = subprocess.Popen(
            ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
             "-cp", f"{jar_dir}/*", str(HELPER)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, encoding="utf-8",
        )
        self.lock = threading.Lock()

    def ask(self, requests: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Send all requests (from a thread, so a full pipe cannot deadlock) and read the answers."""
        assert self.process.stdin is not None and self.process.stdout is not None
        stdin = self.process.stdin

        def write() -> None:
            for request in requests:
                stdin.write(json.dumps(request) + "\n")
            stdin.flush()

        with self.lock:
            writer = threading.Thread(target=write)
            writer.start()
            answers = []
            for _ in requests:
                line = self.process.stdout.readline()
                if not line:
                    raise RuntimeError(f"Kafka oracle exited with {self.process.wait()}")
                answers.append(json.loads(line))
            writer.join()
        return answers

    def close(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


_oracles: dict[Path, KafkaOracle] = {}


def oracle(jar_dir: Path) -> KafkaOracle:
    if jar_dir not in _oracles:
        _oracles[jar_dir] = KafkaOracle(jar_dir)
    return _oracles[jar_dir]


@atexit.register
def _close_all() -> None:
    for running in _oracles.values():
        running.close()


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def format_with_kafka(jar_dir: Path, records: Iterable[tuple[bytes, bytes | None]]) -> list[dict[str, Any]]:
    """What Kafka's tools print for each (key, value) record."""
    return oracle(jar_dir).ask([{"op": "format", "key": _b64(key), "value": _b64(value)}
                                for key, value in records])


def sticky_user_data_with_kafka(jar_dir: Path, user_data: Iterable[bytes]) -> list[dict[str, Any]]:
    """What Kafka's StickyAssignor reads from each subscription user data: partitions, generation."""
    return oracle(jar_dir).ask([{"op": "sticky", "userData": _b64(data)} for data in user_data])


def encode_with_kafka(jar_dir: Path, specs: Iterable[Mapping[str, Any]]) -> list[bytes]:
    """Bytes Kafka's generated message classes write: int16 ``prefix`` + ``message`` at ``version``."""
    answers = oracle(jar_dir).ask([{"op": "encode", **spec} for spec in specs])
    failed = [answer["error"] for answer in answers if "error" in answer]
    if failed:
        raise RuntimeError(f"Kafka could not encode: {failed[:3]}")
    return [base64.b64decode(answer["bytes"]) for answer in answers]

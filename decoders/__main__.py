"""``python -m decoders``: print ``__consumer_offsets`` records as JSON lines shaped like Kafka's tools.

Without ``--bootstrap-server`` it reads JSON lines ``{"key": "<base64>", "value": "<base64>" | null}``
on stdin and writes exactly one JSON line per input line (an error line for input it cannot
read), so it can sit in a pipeline. With ``--bootstrap-server`` it reads the live topic with
kafka-python, without a consumer group and without committing, and adds each record's
partition and offset.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import io
import json
import os
import sys
from collections.abc import Iterable, Iterator
from typing import Any, TextIO

from decoders.core import decode
from decoders.json_format import dumps, to_json

OFFSETS_TOPIC = "__consumer_offsets"


def _b64_field(obj: dict[str, Any], name: str) -> bytes | None:
    field = obj.get(name)
    if field is None:
        return None
    if not isinstance(field, str):
        raise ValueError(f"{name!r} must be a base64 string or null")
    return base64.b64decode(field, validate=True)


def _input_error(detail: str) -> dict[str, Any]:
    return {"error": {"reason": "invalid_input", "detail": detail}, "key": None, "value": None}


def format_line(line: bytes) -> str:
    """The output line for one input line; never raises."""
    try:
        obj = json.loads(line)
        if not isinstance(obj, dict) or "key" not in obj:
            return dumps(_input_error('expected a JSON object with "key" and "value"'))
        key, value = _b64_field(obj, "key"), _b64_field(obj, "value")
    except (ValueError, binascii.Error, RecursionError) as exc:  # incl. JSON and UTF-8 errors
        return dumps(_input_error(f"unreadable input line: {exc}"))
    return dumps(to_json(decode(key, value)))


def run_stdin(lines: Iterable[bytes], out: TextIO) -> None:
    for line in lines:
        out.write(format_line(line.rstrip(b"\r\n")) + "\n")
        out.flush()


def _live_records(args: argparse.Namespace) -> Iterator[Any]:
    from kafka import KafkaConsumer, TopicPartition  # imported here: stdin mode needs no client

    consumer = KafkaConsumer(
        bootstrap_servers=args.bootstrap_server,
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        exclude_internal_topics=False,
        consumer_timeout_ms=args.timeout_ms if args.timeout_ms is not None else float("inf"),
    )
    try:
        numbers = sorted(consumer.partitions_for_topic(args.topic))
        partitions = [TopicPartition(args.topic, number) for number in numbers]
        if not partitions:
            raise SystemExit(f"topic {args.topic!r} not found")
        consumer.assign(partitions)
        if args.from_beginning:
            consumer.seek_to_beginning(*partitions)
        else:
            consumer.seek_to_end(*partitions)
        yield from consumer
    finally:
        consumer.close()


def run_live(args: argparse.Namespace, out: TextIO) -> None:
    for count, message in enumerate(_live_records(args), start=1):
        obj = to_json(decode(message.key, message.value))
        obj["partition"], obj["offset"] = message.partition, message.offset
        out.write(dumps(obj) + "\n")
        out.flush()
        if args.max_records is not None and count >= args.max_records:
            break


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m decoders", description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-server", help="HOST:PORT; read the live topic instead of stdin")
    parser.add_argument("--topic", default=OFFSETS_TOPIC)
    parser.add_argument("--from-beginning", action="store_true", help="start at the earliest offsets")
    parser.add_argument("--max-records", type=int, help="stop after this many records")
    parser.add_argument("--timeout-ms", type=int, help="stop after this long without a record")
    args = parser.parse_args(argv)
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(encoding="utf-8")  # group and topic names need not be ASCII
    try:
        if args.bootstrap_server:
            run_live(args, sys.stdout)
        else:
            run_stdin(sys.stdin.buffer, sys.stdout)
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:  # the reader went away (e.g. `| head`): nothing left to do
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115  (keeps the interpreter's final flush quiet)
    return 0


if __name__ == "__main__":
    sys.exit(main())

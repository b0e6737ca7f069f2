"""A bounded sample of undecodable records, kept as Parquet so an operator can look at the bytes."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

import pyarrow as pa
import pyarrow.parquet as pq

from streaming.protocol import DeadLetter

SCHEMA = pa.schema([
    ("batch_id", pa.int64()),
    ("topic", pa.string()),
    ("kafka_partition", pa.int32()),
    ("kafka_offset", pa.int64()),
    ("record_time_ms", pa.int64()),
    ("reason", pa.string()),
    ("key", pa.binary()),
    ("value", pa.binary()),
])
_FILE = re.compile(r"^batch-(\d+)\.parquet$")


class DeadLetterLog:
    """One file per batch with bad records; the oldest files go once more than ``max_rows`` are kept."""

    def __init__(self, path: Path, topic: str, max_rows: int) -> None:
        self.path, self.topic, self.max_rows = Path(path), topic, max_rows

    def _files(self) -> list[tuple[int, Path]]:
        if not self.path.is_dir():
            return []
        return sorted((int(m.group(1)), p) for p in self.path.iterdir() if (m := _FILE.match(p.name)))

    def append(self, batch_id: int, letters: Sequence[DeadLetter]) -> None:
        letters = list(letters)[: self.max_rows]
        if not letters:
            return
        self.path.mkdir(parents=True, exist_ok=True)
        table = pa.table([
            [batch_id] * len(letters), [self.topic] * len(letters),
            [d.kafka_partition for d in letters], [d.kafka_offset for d in letters],
            [d.record_time_ms for d in letters], [d.reason for d in letters],
            [d.key for d in letters], [d.value for d in letters],
        ], schema=SCHEMA)
        tmp = self.path / f".batch-{batch_id}.{os.getpid()}.tmp"
        pq.write_table(table, tmp)
        os.replace(tmp, self.path / f"batch-{batch_id}.parquet")
        self._prune()

    def _prune(self) -> None:
        files = self._files()
        rows = [pq.ParquetFile(p).metadata.num_rows for _, p in files]
        while files and sum(rows) > self.max_rows and len(files) > 1:
            files.pop(0)[1].unlink()
            rows.pop(0)

    def read(self) -> pa.Table:
        files = [str(p) for _, p in self._files()]
        return pa.concat_tables([pq.read_table(f) for f in files]) if files else SCHEMA.empty_table()


def print_dead_letters(path: Path, out: TextIO, limit: int = 50) -> int:
    """Print the newest ``limit`` kept records: where they came from, why, and their bytes in hex."""
    table = DeadLetterLog(path, "", 0).read()
    rows = table.to_pylist()[-limit:]
    if not rows:
        print(f"no undecodable records kept in {path}", file=out)
    for row in rows:
        key = row["key"].hex() if row["key"] is not None else "null"
        value = row["value"].hex() if row["value"] is not None else "null"
        print(f"{row['topic']}-{row['kafka_partition']}@{row['kafka_offset']} batch {row['batch_id']} "
              f"{row['reason']}: key={key} value={value}", file=out)
    return len(rows)

"""One micro-batch as the driver receives it: the decode stage's Arrow rows, split by kind."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from streaming.contract import STAGE_SCHEMA, OutputKind


@dataclass(frozen=True)
class BatchInput:
    """The rows of one batch by kind (each a :data:`STAGE_SCHEMA` table) and the batch's counts."""

    commits: pa.Table
    group_records: pa.Table
    dead_letters: pa.Table
    records: Counter[int] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    newest_record_ms: int | None = None

    @classmethod
    def from_arrow(cls, table: pa.Table) -> BatchInput:
        table = table.cast(STAGE_SCHEMA)
        kind = table.column("kind")

        def of(k: OutputKind) -> pa.Table:
            return table.filter(pc.equal(kind, int(k)))

        records: Counter[int] = Counter()
        newest: int | None = None
        counts = of(OutputKind.RECORD_COUNT)
        columns = (counts.column(name).to_pylist() for name in ("record_type", "count", "record_time_ms"))
        for record_type, count, when in zip(*columns, strict=True):
            records[record_type] += count
            if when is not None:
                newest = when if newest is None else max(newest, when)
        errors: Counter[str] = Counter()
        error_counts = of(OutputKind.ERROR_COUNT)
        for reason, count in zip(error_counts.column("error").to_pylist(), error_counts.column("count").to_pylist(),
                                 strict=True):
            errors[reason] += count
        return cls(of(OutputKind.COMMIT), of(OutputKind.GROUP_RECORD), of(OutputKind.DEAD_LETTER),
                   records, errors, newest)

    @classmethod
    def empty(cls) -> BatchInput:
        return cls.from_arrow(STAGE_SCHEMA.empty_table())

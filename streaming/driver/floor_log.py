"""Counter floors and the data position on disk: ``<checkpoint>/monitor/floors``.

**Floors.** The driver publishes a batch's counters before Spark commits the batch. Killed in
between, a restart reloads the state of the batch before (older) and would show lower counters, which
Prometheus reads as a reset (``increase()`` takes the whole value as new). So the sink raises the
floors (:class:`~streaming.driver.floors.CounterFloors`) for the whole batch first, writes what rose
here, and only then publishes: whatever ``/metrics`` showed is on disk, and a new process loads it
before it publishes anything. Each write holds only the groups whose floors rose or went since the
last one; once those add up to twice the floors held (or :data:`COMPACT_FILES` files), one write holds
every floor and the older files go. Files are written whole (temporary name, ``fsync``, rename,
``fsync`` of the directory) and read in order: the newest complete one holding everything, then the
later ones. A rebuild (:mod:`streaming.driver.rebuild`) leaves this directory alone, and the
rebase it starts (each group's counters start again from its floors at its first hold, see
:mod:`streaming.driver.floors`) is written the same way: the rebuild itself, each group's rebase
as it happens, and in a file holding everything the groups still to be rebased.

**Data position.** Each write also says which batch it was for, of which Spark query (the id in
Spark's checkpoint ``metadata``: a rebuilt checkpoint has a new one), and the newest record time
folded up to that batch. :func:`data_position_ms` reads it back for the last batch Spark committed:
the checkpoint's age counts from there (see :mod:`streaming.driver.rebuild`). Only the first line of
a file (its header) is read for that.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streaming.driver.floors import CounterFloors
from streaming.groups.store import last_committed_batch
from streaming.logs.events import spark_run_id
from streaming.protocol import SUMMARY_COUNTERS

log = logging.getLogger("rebalance_monitor")

VERSION = 1
COMPACT_MIN_ROWS = 10_000
COMPACT_FACTOR = 2.0
COMPACT_FILES = 500
_ENTRY = re.compile(r"^floors-(\d+)\.jsonl$")
_EMPTY: dict[str, Any] = {"total": 0, "by_label": {}, "histogram": ()}


def floors_dir(checkpoint_dir: Path) -> Path:
    return Path(checkpoint_dir) / "monitor" / "floors"


@dataclass(frozen=True)
class Header:
    """A file's first line: what it holds and which batch of which query wrote it."""

    full: bool
    query: str | None
    batch: int | None  # None: written outside a batch (after a restore published what it reloaded)
    newest_record_ms: int | None  # every record before this time is folded up to ``batch`` (this query's batches)


def _entries(path: Path) -> list[tuple[int, Path]]:
    if not path.is_dir():
        return []
    return sorted((int(m.group(1)), p) for p in path.iterdir() if (m := _ENTRY.match(p.name)))


def _header(path: Path) -> Header | None:
    try:
        with path.open() as f:
            head = json.loads(f.readline())
        return Header(bool(head["full"]), head["query"], head["batch"], head["newest_record_ms"])
    except (OSError, ValueError, KeyError, TypeError):
        log.warning("floors file %s is unreadable; skipped", path)
        return None


def _query_id(spark_checkpoint: Path) -> str | None:
    try:
        return spark_run_id(spark_checkpoint)
    except ValueError:
        return None


def _position(path: Path, query: str | None, last_committed: int) -> tuple[Header, Path] | None:
    """The header (and file) of the newest write for ``query``'s batches up to ``last_committed``."""
    found: tuple[int, int, Header, Path] | None = None
    for seq, file in _entries(path):
        header = _header(file)
        if header is None or header.query != query or header.batch is None or header.batch > last_committed:
            continue
        if found is None or (header.batch, seq) > found[:2]:
            found = (header.batch, seq, header, file)
    return None if found is None else (found[2], found[3])


def data_position_ms(checkpoint_dir: Path) -> int | None:
    """The newest record time folded up to the last batch Spark committed in ``checkpoint_dir``; None when no
    write says (no committed batch, or a checkpoint from before floors were written)."""
    spark = Path(checkpoint_dir) / "spark"
    committed = last_committed_batch(spark)
    if committed is None:
        return None
    found = _position(floors_dir(checkpoint_dir), _query_id(spark), committed)
    return None if found is None else found[0].newest_record_ms


class FloorLog:
    """The floors' and the data position's files (see the module docstring)."""

    def __init__(self, checkpoint_dir: Path, compact_min_rows: int = COMPACT_MIN_ROWS,
                 compact_factor: float = COMPACT_FACTOR, compact_files: int = COMPACT_FILES) -> None:
        self.path = floors_dir(checkpoint_dir)
        self.spark = Path(checkpoint_dir) / "spark"
        self.compact_min_rows, self.compact_factor, self.compact_files = compact_min_rows, compact_factor, compact_files
        self._seq = max((seq for seq, _ in _entries(self.path)), default=0)
        self._rows = 0  # rows written since the last full file
        self._files = 0  # files written since the last full file
        self._query: str | None = None
        self._query_known = False
        self._position: int | None = None
        self._keep: Path | None = None  # the file the committed position is read from: a compaction keeps it

    def load(self, floors: CounterFloors) -> int:
        """Read every floor on disk into ``floors`` (at start, before anything is published); the number of groups."""
        if self.path.is_dir():
            for tmp in self.path.glob(".floors-*.tmp"):  # a write a kill cut short
                tmp.unlink(missing_ok=True)
        entries = _entries(self.path)
        start = 0
        for i, (_, file) in enumerate(entries):
            header = _header(file)
            if header is not None and header.full:
                start = i
        shown: dict[str, tuple[Any, ...]] = {}
        commits: dict[str, int] = {}
        rebased: dict[str, tuple[tuple[Any, ...], int]] = {}
        pending: set[str] = set()
        for _, file in entries[start:]:
            try:
                with file.open() as f:
                    head, body = json.loads(f.readline()), json.loads(f.readline())
            except (OSError, ValueError) as exc:
                log.warning("floors file %s is unreadable (%s); skipped", file, exc)
                continue
            if head.get("full"):
                shown.clear()
                commits.clear()
                rebased.clear()
                pending = set(body.get("pending", ()))
            for group in body.get("forgotten", ()):
                shown.pop(group, None)
                commits.pop(group, None)
                rebased.pop(group, None)
                pending.discard(group)
            index = {name: i for i, name in enumerate(head.get("counters", ()))}

            def counters(values: list[Any], index: dict[str, int] = index) -> tuple[Any, ...]:
                return tuple(_value(kind, values[index[name]] if name in index else _EMPTY[kind])
                             for name, kind in SUMMARY_COUNTERS)

            for group, values in body.get("shown", {}).items():
                shown[group] = counters(values)
            commits.update(body.get("commits", {}))
            if body.get("rebuilt"):
                pending = set(shown) | set(commits)
                rebased.clear()
            for group, (offsets, commits_offset) in body.get("rebased", {}).items():
                rebased[group] = (counters(offsets), commits_offset)
                pending.discard(group)
        floors.load(shown, commits, rebased, pending)
        self._rows, self._files = 0, len(entries) - start
        return len(shown.keys() | commits.keys())

    def restored(self, last_committed: int | None) -> None:
        """The query is restarted from the last batch Spark committed: the data position goes back to it (a
        rebuilt checkpoint has none), and the query id is read again at the next write."""
        self._query_known = False
        found = None if last_committed is None else _position(self.path, _query_id(self.spark), last_committed)
        self._position, self._keep = (None, None) if found is None else (found[0].newest_record_ms, found[1])

    def write(self, batch_id: int | None, newest_record_ms: int | None, floors: CounterFloors) -> bool:
        """Write what rose or went in ``floors`` since the last write, and the data position once ``batch_id`` is
        folded (``batch_id`` None: outside a batch). Skipped when there is nothing new; True when written."""
        changes = floors.take()
        position = self._position
        if batch_id is not None and newest_record_ms is not None:
            position = newest_record_ms if position is None else max(position, newest_record_ms)
        if not changes and (batch_id is None or position == self._position):
            return False
        if batch_id is not None and not self._query_known:  # Spark wrote it before the query's first batch
            self._query, self._query_known = _query_id(self.spark), True
        rows = self._rows + len(changes)
        full = rows >= max(self.compact_min_rows, self.compact_factor * len(floors)) or (
            self._files + 1 >= self.compact_files)
        if full:
            changes = floors.everything()
        self._seq += 1
        header = {"v": VERSION, "full": full, "query": self._query if batch_id is not None else None, "batch": batch_id,
                  "newest_record_ms": position if batch_id is not None else None,
                  "counters": [name for name, _ in SUMMARY_COUNTERS]}
        body: dict[str, Any] = {
            "shown": {g: [_json(v) for v in counters] for g, counters in changes.shown.items()},
            "commits": changes.commits, "forgotten": sorted(changes.forgotten), "rebuilt": changes.rebuilt,
            "rebased": {g: [[_json(v) for v in offsets], commits_offset]
                        for g, (offsets, commits_offset) in changes.rebased.items()}}
        if changes.pending is not None:
            body["pending"] = sorted(changes.pending)
        target = self._write(f"floors-{self._seq:012d}.jsonl", header, body)
        if batch_id is not None:
            self._position = position
        if full:
            for _, file in _entries(self.path):
                if file != target and file != self._keep:
                    file.unlink(missing_ok=True)
            self._rows, self._files = 0, 1
        else:
            self._rows, self._files = rows, self._files + 1
        if batch_id is not None:
            self._keep = target  # the committed batch's once Spark commits this one
        return True

    def _write(self, name: str, header: dict[str, Any], body: dict[str, Any]) -> Path:
        self.path.mkdir(parents=True, exist_ok=True)
        tmp, target = self.path / f".{name}.{os.getpid()}.tmp", self.path / name
        with tmp.open("w") as f:
            f.write(json.dumps(header, separators=(",", ":")))
            f.write("\n")
            f.write(json.dumps(body, separators=(",", ":")))
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, target)
        directory = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
        return target


def _json(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _value(kind: str, value: Any) -> Any:
    return tuple(value) if kind == "histogram" else value


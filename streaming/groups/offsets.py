"""A group's committed offsets in integer columns: one ``array('q')`` per topic, no object per partition.

As a dict of ``(topic, partition) -> (offset, commit time)`` tuples, one committed partition cost
about 240 bytes of Python objects on the driver (the entry, the key and value tuples, their ints),
the largest part of its memory at many groups (docs/benchmarks.md, "Driver memory per group").
Here a topic's array holds ``ROWS`` runs of its partition count: the partitions, sorted, then one
run per value. A partition costs 8 bytes a row; the mappings build tuples only when read.
"""

from __future__ import annotations

import sys
from array import array
from bisect import bisect_left
from collections.abc import ItemsView, Iterator, Mapping, MutableMapping
from typing import Any, ClassVar, NamedTuple

from streaming.protocol import TopicPartition

NO_TIME = -(2**63)  # a commit without a commit timestamp


class CommittedOffset(NamedTuple):
    offset: int
    commit_timestamp_ms: int | None


class _Columns:
    """Per topic, ``ROWS`` runs of one array: the sorted partitions first, then each value row."""

    __slots__ = ("_topics",)
    ROWS: ClassVar[int]

    def __init__(self) -> None:
        self._topics: dict[str, array[int]] = {}

    def _find(self, key: Any) -> tuple[array[int] | None, int, int, bool]:
        """The key's topic array, its partition count, the partition's index and whether it is there."""
        try:
            topic, partition = key
        except (TypeError, ValueError):
            return None, 0, 0, False
        column = self._topics.get(topic)
        if column is None:
            return None, 0, 0, False
        n = len(column) // self.ROWS
        i = bisect_left(column, partition, 0, n)
        return column, n, i, i < n and column[i] == partition

    def __contains__(self, key: object) -> bool:
        return self._find(key)[3]

    def __len__(self) -> int:
        return sum(len(column) for column in self._topics.values()) // self.ROWS

    def __iter__(self) -> Iterator[TopicPartition]:
        for topic, column in self._topics.items():
            for partition in column[:len(column) // self.ROWS]:
                yield topic, partition

    def __setstate__(self, state: tuple[None, dict[str, Any]]) -> None:
        """Unpickled (the state-store fold hands each change over pickled): topic names interned, so the groups
        on one topic share its name, as the stage's own columns do."""
        self._topics = {sys.intern(topic): column for topic, column in state[1]["_topics"].items()}

    def _value(self, column: array[int], n: int, i: int) -> Any:
        """The mapped value of the partition at index ``i`` of a topic's array of ``n`` partitions."""
        raise NotImplementedError

    def __getitem__(self, key: TopicPartition) -> Any:
        column, n, i, found = self._find(key)
        if column is None or not found:
            raise KeyError(key)
        return self._value(column, n, i)

    def items(self) -> ItemsView[TopicPartition, Any]:
        return _Items(self)

    def _items(self) -> Iterator[tuple[TopicPartition, Any]]:
        """Items straight from the arrays (a mapping's default items search once per key)."""
        for topic, column in self._topics.items():
            n = len(column) // self.ROWS
            for i in range(n):
                yield (topic, column[i]), self._value(column, n, i)

    def nbytes(self) -> int:
        """Bytes held: the mapping, its dict and its arrays (the topic names are shared)."""
        return (sys.getsizeof(self) + sys.getsizeof(self._topics)
                + sum(sys.getsizeof(column) for column in self._topics.values()))


class PartitionOffsets(_Columns, MutableMapping[TopicPartition, CommittedOffset]):
    """The stage's committed offsets of one group: partitions, offsets, commit times (NO_TIME: none)."""

    __slots__ = ()
    ROWS = 3

    def __init__(self, offsets: Mapping[TopicPartition, CommittedOffset] | None = None) -> None:
        super().__init__()
        if offsets:
            self.update(offsets)

    def _value(self, column: array[int], n: int, i: int) -> CommittedOffset:
        at = column[2 * n + i]
        return CommittedOffset(column[n + i], None if at == NO_TIME else at)

    def __setitem__(self, key: TopicPartition, value: CommittedOffset) -> None:
        self.set(key[0], key[1], value.offset, value.commit_timestamp_ms)

    def __delitem__(self, key: TopicPartition) -> None:
        if not self.discard(*key):
            raise KeyError(key)

    def set(self, topic: str, partition: int, offset: int, commit_ms: int | None) -> None:
        """Commit ``offset`` on ``(topic, partition)`` (the bulk path: no tuple is built)."""
        at = NO_TIME if commit_ms is None else commit_ms
        # :meth:`_find` inlined, without its key tuple: this runs once per commit of every batch.
        column = self._topics.get(topic)
        if column is None:
            self._topics[sys.intern(topic)] = array("q", (partition, offset, at))
            return
        n = len(column) // 3
        i = bisect_left(column, partition, 0, n)
        if i < n and column[i] == partition:
            column[n + i] = offset
            column[2 * n + i] = at
        else:  # from the last run back, so the earlier positions stay where they are
            column.insert(2 * n + i, at)
            column.insert(n + i, offset)
            column.insert(i, partition)

    def adopt(self, topic: str, column: array[int]) -> None:
        """Take ``column`` as ``topic``'s whole array, already laid out (partitions ascending and unique, then
        their offsets, then their commit times): a snapshot's load builds the arrays in bulk, not by commit."""
        self._topics[sys.intern(topic)] = column

    def laid_out(self) -> list[tuple[str, array[int]]]:
        """Each topic's array as :meth:`adopt` takes it, by topic name: a snapshot's write reads them in bulk."""
        return sorted(self._topics.items())

    def discard(self, topic: str, partition: int) -> bool:
        """Forget ``(topic, partition)`` (an offset tombstone); whether it was there."""
        column, n, i, found = self._find((topic, partition))
        if column is None or not found:
            return False
        del column[2 * n + i]
        del column[n + i]
        del column[i]
        if not column:
            del self._topics[topic]
        return True

    def committed(self) -> CommittedOffsets:
        """The offsets alone, copied: what lag is computed over, safe to read from another thread."""
        copy = CommittedOffsets()
        for topic, column in self._topics.items():
            copy._topics[topic] = column[:2 * (len(column) // self.ROWS)]
        return copy

    def commit_times(self) -> CommitTimes:
        return CommitTimes(self)


class _Items(ItemsView[TopicPartition, Any]):

    _mapping: _Columns

    def __iter__(self) -> Iterator[tuple[TopicPartition, Any]]:
        return self._mapping._items()


class CommittedOffsets(_Columns, Mapping[TopicPartition, int]):
    """One group's committed offsets as of a batch, read-only: partitions and offsets."""

    __slots__ = ()
    ROWS = 2

    def _value(self, column: array[int], n: int, i: int) -> int:
        return column[n + i]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, CommittedOffsets):
            return self._topics == other._topics
        return super().__eq__(other)


class CommitTimes(Mapping[TopicPartition, int]):
    """A group's commit times by partition (those it has), read through its offsets without a copy."""

    __slots__ = ("_offsets",)

    def __init__(self, offsets: PartitionOffsets) -> None:
        self._offsets = offsets

    def __getitem__(self, key: TopicPartition) -> int:
        # Read from the array, with no CommittedOffset built: a departure looks up each partition a member held.
        column, n, i, found = self._offsets._find(key)
        if column is None or not found or column[2 * n + i] == NO_TIME:
            raise KeyError(key)
        return column[2 * n + i]

    def __iter__(self) -> Iterator[TopicPartition]:
        return (tp for tp, entry in self._offsets.items() if entry.commit_timestamp_ms is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)

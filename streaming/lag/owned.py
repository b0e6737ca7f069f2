"""A group's members and the partitions each owns, in one integer column: what the lag book keeps per group.

As a dict of member labels to lists of ``(topic, partition)`` tuples, a group of two members on ten
partitions held about 1.8 KB of Python objects on the driver, more than half of what the book kept for
it. Here the members' label values sit in tuples under one shared tuple of label names, topic names and
label values are interned (groups on one topic, members on one host share them), and one ``array('i')``
holds three runs of the group's partition count: each partition's topic index, partition number and
owner index, sorted. Tuples are built only when read.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import ItemsView, Iterable, Iterator, Mapping, ValuesView

from streaming.protocol import TopicPartition

Owner = tuple[tuple[str, str], ...]  # a member's labels, as the publisher keys its partitions
Partitions = tuple[TopicPartition, ...]

_NAMES: dict[tuple[str, ...], tuple[str, ...]] = {}  # one tuple of label names for every group that uses it


class Owned(Mapping[Owner, Partitions]):
    """Owner labels -> the partitions that owner holds, sorted by topic and partition.

    Every owner of one group has the same label names (the publisher's ``--member-labels``); a partition two
    owners merged under the same labels both hold is listed twice, as their figures add up.
    """

    __slots__ = ("_names", "_owners", "_rows", "_topics")

    def __init__(self, owned: Mapping[Owner, Iterable[TopicPartition]] | None = None) -> None:
        names: tuple[str, ...] | None = None
        owners: list[tuple[str, ...]] = []
        rows: list[tuple[str, int, int]] = []
        for index, (owner, parts) in enumerate((owned or {}).items()):
            shape = tuple(name for name, _ in owner)
            if names is None:
                names = _NAMES.setdefault(shape, shape)
            elif shape != names:
                raise ValueError(f"owners of one group with different label names: {names} and {shape}")
            owners.append(tuple(sys.intern(value) for _, value in owner))
            rows.extend((topic, partition, index) for topic, partition in parts)
        rows.sort()
        topics = {sys.intern(topic): None for topic, _, _ in rows}
        at = {topic: i for i, topic in enumerate(topics)}
        self._names = names or ()
        self._owners = tuple(owners)
        self._topics = tuple(topics)
        self._rows = array("i", [at[row[0]] for row in rows] + [row[1] for row in rows] + [row[2] for row in rows])

    def _owner(self, index: int) -> Owner:
        return tuple(zip(self._names, self._owners[index], strict=True))

    def partitions(self) -> Iterator[TopicPartition]:
        """Every owned partition, sorted, whoever owns it (a partition two owners hold comes twice)."""
        rows, n = self._rows, len(self._rows) // 3
        return zip(map(self._topics.__getitem__, rows[:n]), rows[n:2 * n], strict=True)  # no Python step a partition

    def _by_owner(self) -> list[list[TopicPartition]]:
        found: list[list[TopicPartition]] = [[] for _ in self._owners]
        for tp, owner in zip(self.partitions(), self._rows[2 * len(self._rows) // 3:], strict=True):
            found[owner].append(tp)
        return found

    def __getitem__(self, owner: Owner) -> Partitions:
        for index in range(len(self._owners)):
            if self._owner(index) == owner:
                return tuple(self._by_owner()[index])
        raise KeyError(owner)

    def __iter__(self) -> Iterator[Owner]:
        return (self._owner(index) for index in range(len(self._owners)))

    def __len__(self) -> int:
        return len(self._owners)

    def items(self) -> ItemsView[Owner, Partitions]:
        return _Items(self)

    def values(self) -> ValuesView[Partitions]:
        return _Values(self)

    def _items(self) -> Iterator[tuple[Owner, Partitions]]:
        """One pass over the rows for every owner (the mapping's default looks each owner up)."""
        for index, parts in enumerate(self._by_owner()):
            yield self._owner(index), tuple(parts)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Owned):
            return (self._names, self._owners, self._topics, self._rows) == (
                other._names, other._owners, other._topics, other._rows)
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Owned({dict(self._items())!r})"

    def nbytes(self) -> int:
        """Bytes held: the object, its tuples and the array (names, label values and topics are shared)."""
        return (sys.getsizeof(self) + sys.getsizeof(self._owners) + sum(map(sys.getsizeof, self._owners))
                + sys.getsizeof(self._topics) + sys.getsizeof(self._rows))


class _Items(ItemsView[Owner, Partitions]):

    _mapping: Owned

    def __iter__(self) -> Iterator[tuple[Owner, Partitions]]:
        return self._mapping._items()


class _Values(ValuesView[Partitions]):

    _mapping: Owned

    def __iter__(self) -> Iterator[Partitions]:
        return (tuple(parts) for parts in self._mapping._by_owner())

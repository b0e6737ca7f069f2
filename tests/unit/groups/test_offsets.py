"""The columnar committed offsets behave as the dict of tuples they replace, in far fewer bytes."""

from __future__ import annotations

import pickle
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.groups.offsets import CommittedOffset, CommittedOffsets, PartitionOffsets

TOPICS = st.sampled_from(["orders", "payments", "t"])
PARTITIONS = st.integers(min_value=0, max_value=40)
TIMES = st.one_of(st.none(), st.integers(min_value=-(2**62), max_value=2**62))
OPERATIONS = st.lists(st.tuples(TOPICS, PARTITIONS, st.one_of(st.none(), st.integers(0, 2**62)), TIMES),
                      max_size=120)


@settings(max_examples=300, deadline=None)
@given(OPERATIONS)
def test_any_sequence_of_commits_and_tombstones_reads_as_a_dict(operations) -> None:
    columns, plain = PartitionOffsets(), {}
    for topic, partition, offset, at in operations:
        if offset is None:
            assert columns.discard(topic, partition) == (plain.pop((topic, partition), None) is not None)
        else:
            columns.set(topic, partition, offset, at)
            plain[(topic, partition)] = CommittedOffset(offset, at)
    assert dict(columns.items()) == plain and len(columns) == len(plain) and columns == plain
    assert all(tp in columns for tp in plain) and ("orders", 99) not in columns and "junk" not in columns
    assert list(columns) == [tp for tp, _ in columns.items()]
    for topic in {t for t, _ in plain}:  # partitions come out sorted within a topic
        ours = [p for t, p in columns if t == topic]
        assert ours == sorted(ours)
    committed = columns.committed()
    assert dict(committed) == {tp: entry.offset for tp, entry in plain.items()}
    times = {tp: e.commit_timestamp_ms for tp, e in plain.items() if e.commit_timestamp_ms is not None}
    assert dict(columns.commit_times()) == times
    # Looked up one by one too, as a departure does: a partition without a time is absent, not NO_TIME.
    looked_up = columns.commit_times()
    for tp in [*plain, ("orders", 99), ("nowhere", 0)]:
        assert looked_up.get(tp) == times.get(tp) and (tp in looked_up) == (tp in times)


def test_the_mapping_protocol_raises_as_a_dict_does() -> None:
    offsets = PartitionOffsets({("t", 3): CommittedOffset(7, None)})
    offsets[("t", 1)] = CommittedOffset(5, 1_700_000_000_000)
    assert offsets[("t", 1)] == (5, 1_700_000_000_000) and offsets[("t", 3)] == (7, None)
    with pytest.raises(KeyError):
        offsets[("t", 2)]
    with pytest.raises(KeyError):
        del offsets[("u", 0)]
    del offsets[("t", 3)]
    assert offsets.pop(("t", 1)) == (5, 1_700_000_000_000) and not offsets and offsets.nbytes() > 0
    with pytest.raises(KeyError):
        offsets.committed()[("t", 1)]


def test_a_copy_for_lag_compares_by_offsets_alone_and_does_not_follow_later_commits() -> None:
    """An idle consumer commits the same offsets again with new times: its lag needs no new rendering."""
    offsets = PartitionOffsets({("t", p): CommittedOffset(10 + p, 1) for p in range(4)})
    before = offsets.committed()
    offsets.set("t", 0, 10, 99)
    assert offsets.committed() == before and isinstance(before, CommittedOffsets)
    offsets.set("t", 0, 11, 100)
    assert offsets.committed() != before and before[("t", 0)] == 10


def test_a_partition_costs_a_few_machine_words_not_a_few_objects() -> None:
    """50 partitions of one topic, as W1's groups commit: the dict of tuples it replaces, measured the
    same way (every object it owns), holds over five times as many bytes."""
    columns, plain = PartitionOffsets(), {}
    for p in range(50):
        columns.set("orders", p, 1_000_000 + p, 1_700_000_000_000 + p)
        plain[("orders", p)] = CommittedOffset(1_000_000 + p, 1_700_000_000_000 + p)
    plain_bytes = sys.getsizeof(plain) + sum(sys.getsizeof(k) + sys.getsizeof(k[1]) + sys.getsizeof(v)
                                             + sys.getsizeof(v.offset) + sys.getsizeof(v.commit_timestamp_ms)
                                             for k, v in plain.items())
    assert columns.nbytes() * 5 < plain_bytes


def test_unpickled_offsets_share_their_topic_names() -> None:
    """The state-store fold hands each group's change over pickled: without interning, every group kept its own
    copy of each topic's name."""
    topic = "orders-" + "x" * 40
    first, second = (pickle.loads(pickle.dumps(PartitionOffsets({(topic, 0): CommittedOffset(5, None)}).committed()))
                     for _ in range(2))
    assert dict(first) == {(topic, 0): 5} and first == second
    assert next(iter(first))[0] is next(iter(second))[0]

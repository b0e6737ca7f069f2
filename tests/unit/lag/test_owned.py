"""The lag book's columnar owned partitions read as the dict of lists they replace, in far fewer bytes."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.lag.owned import Owned

OWNERS = st.builds(lambda member, host: (("member", member), ("client_id", "app"), ("client_host", host)),
                   st.sampled_from(["", "static-1", "static-2"]), st.sampled_from(["/10.0.0.1", "/10.0.0.2"]))
PARTITIONS = st.lists(st.tuples(st.sampled_from(["orders", "payments"]), st.integers(0, 30)), max_size=12)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(OWNERS, PARTITIONS, max_size=4))
def test_owned_reads_as_the_dict_of_lists(plain) -> None:
    owned = Owned(plain)
    assert len(owned) == len(plain) and list(owned) == list(plain)
    assert {owner: list(parts) for owner, parts in owned.items()} == {o: sorted(p) for o, p in plain.items()}
    assert [list(parts) for parts in owned.values()] == [sorted(parts) for parts in plain.values()]
    assert sorted(owned.partitions()) == sorted(tp for parts in plain.values() for tp in parts)  # repeats kept
    assert list(owned.partitions()) == sorted(owned.partitions())
    for owner, parts in plain.items():
        assert list(owned[owner]) == sorted(parts)
    assert owned == Owned({owner: list(reversed(parts)) for owner, parts in plain.items()})
    assert owned == {owner: tuple(parts) for owner, parts in owned.items()}


def test_a_missing_owner_and_mixed_label_names_are_refused() -> None:
    owned = Owned({(("client_id", "a"),): [("t", 1)]})
    with pytest.raises(KeyError):
        owned[(("client_id", "b"),)]
    assert owned != Owned({(("client_id", "a"),): [("t", 2)]}) and owned != Owned() and Owned() == {}
    with pytest.raises(ValueError, match="different label names"):
        Owned({(("client_id", "a"),): [], (("member", "a"),): []})


def test_a_group_costs_a_fraction_of_the_dict_of_lists() -> None:
    """Two members on five partitions each, W2's shape, with their label values as unpickled (each its own
    copy): the dict of lists of tuples the book held before, measured the same way (every object it owns)."""
    plain = {(("member", ""), ("client_id", f"consumer-{m}".join(["", ""])), ("client_host", f"/10.0.0.{m}")):
             [("bench-topic-0", p) for p in range(m, 10, 2)] for m in range(2)}
    owned = Owned(plain)
    plain_bytes = sys.getsizeof(plain) + sum(
        sys.getsizeof(owner) + sum(sys.getsizeof(pair) for pair in owner) + sys.getsizeof(parts)
        + sum(sys.getsizeof(tp) + sys.getsizeof(tp[1]) for tp in parts) for owner, parts in plain.items())
    assert owned.nbytes() * 2 < plain_bytes

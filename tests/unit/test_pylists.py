"""The quick route to Python lists must give exactly what ``to_pylist`` gives, for every type the job folds."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from streaming.pylists import pylist, pylists

TYPES = [pa.string(), pa.large_string(), pa.binary(), pa.large_binary(), pa.int8(), pa.int32(), pa.int64(),
         pa.uint64(), pa.bool_(), pa.float64()]


def values(kind: pa.DataType, rows: int, nulls: bool, rng: random.Random) -> list[object]:
    def one() -> object:
        if nulls and rng.random() < 0.2:
            return None
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            return rng.choice(["", "g", "grüße", "w1-group-00042", "x" * 300])
        if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
            return rng.randbytes(rng.randrange(0, 40))
        if pa.types.is_boolean(kind):
            return rng.random() < 0.5
        if pa.types.is_floating(kind):
            return rng.uniform(-1e6, 1e6)
        if pa.types.is_unsigned_integer(kind):
            return rng.randrange(0, 2**kind.bit_width)
        return rng.randrange(-2**(kind.bit_width - 1), 2**(kind.bit_width - 1))
    return [one() for _ in range(rows)]


@pytest.mark.parametrize("kind", TYPES, ids=str)
@pytest.mark.parametrize("nulls", [False, True], ids=["no-nulls", "nulls"])
def test_every_type_chunked_sliced_or_empty_comes_out_as_to_pylist_gives_it(kind: pa.DataType, nulls: bool) -> None:
    rng = random.Random(f"{kind}-{nulls}")
    chunks = [pa.array(values(kind, rows, nulls, rng), kind) for rows in (0, 1, 7, 300)]
    chunked = pa.chunked_array(chunks, kind)
    cases = [chunked, pa.chunked_array([], kind), chunks[3], chunks[3].slice(5, 100), chunked.slice(3, 250)]
    for column in cases:
        got, want = pylist(column), column.to_pylist()
        assert got == want
        assert [type(v) for v in got] == [type(v) for v in want]


def test_a_null_integer_stays_none_and_is_not_turned_into_a_float() -> None:
    column = pa.chunked_array([pa.array([1, None, 2**62], pa.int64())])
    assert pylist(column) == [1, None, 2**62]


def test_the_named_columns_of_a_table_or_a_sliced_batch_come_in_the_order_asked() -> None:
    table = pa.table({"group": ["a", "b", "c"], "offset": pa.array([3, None, 5], pa.int64()),
                      "partition": pa.array([0, 1, 2], pa.int32())})
    assert pylists(table, ("partition", "group", "offset")) == [[0, 1, 2], ["a", "b", "c"], [3, None, 5]]
    batch = table.to_batches()[0].slice(1, 2)
    assert pylists(batch, ("group", "partition")) == [["b", "c"], [1, 2]]

"""The compiled layouts read exactly what the generic reader reads, on valid, damaged and random bytes."""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decoders import compiled, reader
from decoders.schemas import (
    ASSIGNMENT_LAYOUTS,
    KEY_LAYOUTS,
    STICKY_USER_DATA_LAYOUTS,
    SUBSCRIPTION_LAYOUTS,
    VALUE_LAYOUTS,
    Layout,
)
from tests.support.decoder_encoder import encode_layout
from tests.unit.decoders.test_properties import structs

LAYOUTS: list[Layout] = [
    *KEY_LAYOUTS.values(),
    *(layout for versions in VALUE_LAYOUTS.values() for layouts in versions.values() for layout in layouts),
    *SUBSCRIPTION_LAYOUTS.values(), *ASSIGNMENT_LAYOUTS.values(), *STICKY_USER_DATA_LAYOUTS,
]


def outcome(read: Any, data: bytes, layout: Layout) -> tuple[str, Any]:
    """What a reader makes of ``data``: its struct and end, or its error's kind and detail."""
    try:
        return "read", read(data, 0, layout)
    except reader.ReadError as exc:
        return "error", (exc.kind, exc.detail)


# Many layouts, each its own test: fewer examples each than the profile's default (make fuzz runs more).
EXAMPLES = 20 if os.environ.get("HYPOTHESIS_PROFILE", "default") == "default" else 2000


@pytest.mark.parametrize("index", range(len(LAYOUTS)))
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_valid_bytes_read_alike(index: int, data: st.DataObject) -> None:
    layout = LAYOUTS[index]
    encoded = encode_layout(layout, data.draw(structs(layout.struct, layout.flexible)))
    expected = outcome(reader.read_layout, encoded, layout)
    assert expected[0] == "read"
    assert outcome(compiled.read_layout, encoded, layout) == expected


@pytest.mark.parametrize("index", range(len(LAYOUTS)))
@settings(max_examples=EXAMPLES * 2)
@given(data=st.data())
def test_damaged_and_random_bytes_read_alike(index: int, data: st.DataObject) -> None:
    """Cut short, a byte changed, or bytes from nowhere: the same struct or the same error."""
    layout = LAYOUTS[index]
    encoded = bytearray(encode_layout(layout, data.draw(structs(layout.struct, layout.flexible))))
    how = data.draw(st.sampled_from(["cut", "flip", "random"]))
    if how == "cut" and encoded:
        encoded = encoded[:data.draw(st.integers(0, len(encoded) - 1))]
    elif how == "flip" and encoded:
        encoded[data.draw(st.integers(0, len(encoded) - 1))] = data.draw(st.integers(0, 255))
    else:
        encoded = bytearray(data.draw(st.binary(max_size=64)))
    damaged = bytes(encoded)
    assert outcome(compiled.read_layout, damaged, layout) == outcome(reader.read_layout, damaged, layout)

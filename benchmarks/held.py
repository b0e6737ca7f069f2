"""What the monitor holds: the entries of every container its own objects keep, by attribute path.

Over months a dict that gains a few entries a minute is a leak that RSS samples over an hour
cannot tell from noise. A soak compares these sizes at its start and end against the groups
the cluster still has (``benchmarks/soak.py``'s churn profile).

The walk starts at the ``Monitor`` and goes through objects of this project's packages only
(not into Spark, py4j or the Kafka client). Each dict, list, set, deque, Arrow table (rows),
NumPy array (elements) and labelled Prometheus metric (children) found on an attribute is
counted under its path; a path through a container's elements is written with ``[*]``, so the
members of all groups' snapshots add up under one path. An object reached twice counts once.
"""

from __future__ import annotations

from collections import Counter, deque
from typing import Any

import numpy as np
import pyarrow as pa
from prometheus_client.metrics import MetricWrapperBase

PACKAGES = ("streaming.", "decoders.")


def held(root: object, name: str = "monitor") -> Counter[str]:
    """Entries held under each attribute path below ``root``."""
    sizes: Counter[str] = Counter()
    seen: set[int] = set()
    todo: deque[tuple[str, object]] = deque([(name, root)])
    while todo:  # breadth first: an object shared by two paths is named by the shorter
        path, obj = todo.popleft()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        for attribute, value in _attributes(obj):
            _visit(f"{path}.{attribute}", value, sizes, todo)
    return sizes


def changes(samples: list[Counter[str]]) -> list[tuple[str, list[int]]]:
    """(path, its size at each sample) for every path whose size differs between the first sample and the
    last, largest change first."""
    first, last = samples[0], samples[-1]
    moved = [(path, [sample[path] for sample in samples]) for path in first.keys() | last.keys()
             if first[path] != last[path]]
    return sorted(moved, key=lambda row: (-abs(row[1][-1] - row[1][0]), row[0]))


def _own(value: object) -> bool:
    return type(value).__module__.startswith(PACKAGES)


def _attributes(obj: object) -> list[tuple[str, Any]]:
    names = list(getattr(obj, "__dict__", {}))
    for cls in type(obj).__mro__:
        names.extend(s for s in getattr(cls, "__slots__", ()) if s not in ("__dict__", "__weakref__"))
    found = []
    for attribute in names:
        try:
            found.append((attribute, getattr(obj, attribute)))
        except AttributeError:  # an unset slot
            continue
    return found


def _visit(path: str, value: object, sizes: Counter[str], todo: deque[tuple[str, object]]) -> None:
    if _own(value):
        todo.append((path, value))
        return
    if isinstance(value, MetricWrapperBase):
        sizes[path] += len(getattr(value, "_metrics", {}))
        return
    if isinstance(value, pa.Table | pa.RecordBatch):
        sizes[path] += value.num_rows
        return
    if isinstance(value, np.ndarray):
        sizes[path] += value.size
        return
    if isinstance(value, tuple):  # a record, not a store: its own objects are walked, its length is not counted
        for element in value:
            _visit(path, element, sizes, todo)
        return
    elements = _elements(value)
    if elements is None:
        return
    sizes[path] += len(elements)
    for element in elements:
        _visit(f"{path}[*]", element, sizes, todo)


def _elements(value: object) -> list[object] | None:
    """A container's elements, a dict's values (a copy: the job's threads change them while the soak samples)."""
    if not isinstance(value, dict | list | set | frozenset | deque):
        return None
    for _ in range(10):
        try:
            return [*value.values()] if isinstance(value, dict) else list(value)
        except RuntimeError:  # changed size while being copied: try again
            continue
    return []

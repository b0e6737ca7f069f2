"""Two or more ways of doing one thing, timed in turn in this process: a same-process baseline beside each figure."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

from streaming.driver.sink import young_garbage_only

T = TypeVar("T")


def medians_in_turn(ways: Mapping[str, Callable[[], T]], repeats: int,
                    check: Callable[[dict[str, T]], None]) -> dict[str, float]:
    """Each way run ``repeats`` times, the ways in turn each round, as the job runs a batch (``young_garbage_only``);
    ``check`` sees each round's results (it asserts they agree). The median seconds of each way."""
    times: dict[str, list[float]] = {way: [] for way in ways}
    for _ in range(repeats):
        made: dict[str, T] = {}
        for way, make in ways.items():
            with young_garbage_only():
                started = time.perf_counter()
                made[way] = make()
                times[way].append(time.perf_counter() - started)
        check(made)
        del made
    return {way: statistics.median(runs) for way, runs in times.items()}

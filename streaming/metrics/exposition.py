"""Prometheus text for one group's series, rendered once when the group changes and cached.

A scrape then only joins cached bytes: rendering 100,000 groups' series on every scrape through
prometheus_client's metric objects took a minute. Each family's lines stay contiguous in the
output (the text format requires it), so the cache is kept per family and per group.

*Age* families (lag in seconds) are the exception: their value is "now minus a moment" and
must grow between two renderings, so the cache keeps each line's label text and its moment
(:meth:`Lines.add_age`) and a scrape writes ``max(0, scrape time - moment)``.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Family:
    name: str
    kind: str  # gauge | counter | histogram
    help: str
    age: bool = False  # values are ages computed at scrape time (see the module docstring)

    @property
    def header(self) -> bytes:
        text = self.help.replace("\\", "\\\\").replace("\n", "\\n")
        return f"# HELP {self.name} {text}\n# TYPE {self.name} {self.kind}\n".encode()


_NEEDS_ESCAPE = re.compile(r'[\\\n"]').search


def escape(value: str) -> str:
    if _NEEDS_ESCAPE(value) is None:  # nearly every label value: no copy
        return value
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def number(value: float) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


Age = tuple[str, float]  # a line's text up to its value, and the moment its value counts from


class Lines:
    """Lines of several families for one group, collected while rendering it."""

    def __init__(self, cluster: str) -> None:
        self.prefix = f'cluster="{escape(cluster)}"'
        self.by_family: dict[str, list[str]] = {}
        self.ages: dict[str, list[Age]] = {}
        self.count = 0

    def add_age(self, family: Family, labels: Iterable[tuple[str, str]], since: float) -> None:
        """A line of an age family: scrapes show ``max(0, now - since)`` (``since`` inf: always 0)."""
        label_text = ",".join([f'{k}="{escape(v)}"' for k, v in labels])
        self.ages.setdefault(family.name, []).append((f"{family.name}{{{self.prefix},{label_text}}} ", since))
        self.count += 1

    def add(self, family: Family, labels: Iterable[tuple[str, str]], value: float) -> None:
        self.add_text(family, ",".join([f'{k}="{escape(v)}"' for k, v in labels]), value)

    def add_text(self, family: Family, label_text: str, value: float) -> None:
        """A line whose labels are already text (``k="v",...``, escaped): the hot path of a group's series."""
        lines = self.by_family.get(family.name)
        if lines is None:
            lines = self.by_family[family.name] = []
        lines.append(f"{family.name}{{{self.prefix},{label_text}}} {number(value)}\n")
        self.count += 1

    def add_many(self, family: Family, labels: Iterable[tuple[str, str]],
                 rows: Iterable[tuple[tuple[str, int], float]]) -> None:
        """One line per ``((topic, partition), value)`` under the same leading ``labels`` (the hot path)."""
        head = ",".join([f'{k}="{escape(v)}"' for k, v in labels])
        prefix = f"{family.name}{{{self.prefix},{head},topic=\""
        lines = self.by_family.get(family.name)
        if lines is None:
            lines = self.by_family[family.name] = []
        topics: dict[str, str] = {}
        for (topic, partition), value in rows:
            text = topics.get(topic)
            if text is None:
                text = topics[topic] = f'{prefix}{escape(topic)}",partition="'
            lines.append(f'{text}{partition}"}} {number(value)}\n')
            self.count += 1

    def encoded(self) -> dict[str, bytes]:
        return {name: "".join(lines).encode() for name, lines in self.by_family.items()}


class FamilyCache:
    """Cached text per family and group; renders the whole exposition in family order."""

    def __init__(self, families: Iterable[Family]) -> None:
        self.families = {f.name: f for f in families}
        self._text: dict[str, dict[str, bytes]] = {name: {} for name, f in self.families.items() if not f.age}
        self._ages: dict[str, dict[str, list[Age]]] = {name: {} for name, f in self.families.items() if f.age}
        self._series: dict[str, int] = {}

    def put(self, group: str, lines: Lines, names: Iterable[str]) -> None:
        """Replace ``group``'s text in the families ``names`` (the ones this rendering covers)."""
        encoded = lines.encoded()
        series = self._series.get(group, 0)
        for name in names:
            if name in self._ages:
                ages = lines.ages.get(name)
                old_ages = self._ages[name].pop(group, ())
                series += len(ages or ()) - len(old_ages)
                if ages:
                    self._ages[name][group] = ages
                continue
            text = encoded.get(name)
            old_text = self._text[name].pop(group, b"")
            series += len(lines.by_family.get(name, ())) - old_text.count(b"\n")
            if text:
                self._text[name][group] = text
        self._series[group] = series

    def remove(self, group: str) -> None:
        for texts in self._text.values():
            texts.pop(group, None)
        for ages in self._ages.values():
            ages.pop(group, None)
        self._series.pop(group, None)

    def has(self, group: str) -> bool:
        return group in self._series

    def groups(self) -> int:
        return len(self._series)

    def group_text(self, group: str, now: float | None = None) -> bytes:
        now = time.time() if now is None else now
        return b"".join(texts.get(group, b"") if name in self._text else _aged(self._ages[name].get(group, ()), now)
                        for name, texts in self._all())

    def _all(self) -> Iterable[tuple[str, Any]]:
        for name in self.families:
            yield name, self._text.get(name) if name in self._text else self._ages[name]

    def series(self) -> int:
        return sum(self._series.values())

    def render(self, max_series: int | None, now: float | None = None) -> tuple[list[bytes], int, int]:
        """Chunks of the exposition, series kept and series dropped by ``max_series``; ages as of ``now``.

        Groups are admitted whole, in the order they were first seen, until the limit.
        """
        now = time.time() if now is None else now
        total = self.series()
        admitted: set[str] | None = None
        if max_series is not None and total > max_series:
            admitted, budget = set(), max_series
            for group, count in self._series.items():
                if count > budget:
                    break
                admitted.add(group)
                budget -= count
        chunks: list[bytes] = []
        for name, family in self.families.items():
            chunks.append(family.header)
            if name in self._ages:
                ages = self._ages[name]
                chunks.extend(_aged(lines, now) for group, lines in ages.items()
                              if admitted is None or group in admitted)
                continue
            texts = self._text[name]
            if admitted is None:
                chunks.extend(texts.values())
            else:
                chunks.extend(text for group, text in texts.items() if group in admitted)
        kept = total if admitted is None else sum(self._series[g] for g in admitted)
        return chunks, kept, total - kept


def _aged(lines: Iterable[Age], now: float) -> bytes:
    return "".join([f"{head}{number(max(0.0, now - since))}\n" for head, since in lines]).encode()

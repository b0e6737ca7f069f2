"""Prometheus text for one group's series, rendered once when the group changes and cached.

A scrape then only joins cached bytes: rendering 100,000 groups' series on every scrape through
prometheus_client's metric objects took a minute. Each family's lines stay contiguous in the
output (the text format requires it), so the cache is kept per family and per group.

*Age* families (lag in seconds) are the exception: their value is "now minus a moment" and
must grow between two renderings, so the cache keeps each line's label text and its moment
(:meth:`Lines.add_age`) and a scrape writes ``max(0, scrape time - moment)``.

:class:`ExportPolicy` is what every served series carries beside its own labels (``--label``) and
which families are served at all (``--metrics-allow``/``--metrics-deny``). Cached group text takes
the static labels once, when it is stored (:meth:`FamilyCache.put`), so a scrape pays nothing for
them there; text rendered at scrape time (the lag poller's, the instruments') goes through
:meth:`ExportPolicy.text`.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
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

    def encoded(self, labels: str = "") -> dict[str, bytes]:
        """Each family's lines as bytes; ``labels`` (``k="v",...``, escaped) go after the cluster label."""
        if not labels:
            return {name: "".join(lines).encode() for name, lines in self.by_family.items()}
        old, new = self._insertion(labels)
        encoded = {}
        for name, lines in self.by_family.items():
            text = "".join(lines)
            # Every line holds ``{cluster="..."`` once, right after its name. The replacement is made on the
            # joined text (one pass in C) when the count shows no label value holding it too; else line by line,
            # where the first occurrence is the one after the name (a metric name holds no ``{``).
            if text.count(old) == len(lines):
                text = text.replace(old, new)
            else:
                text = "".join([line.replace(old, new, 1) for line in lines])
            encoded[name] = text.encode()
        return encoded

    def aged(self, name: str, labels: str = "") -> list[Age] | None:
        """An age family's lines (see :meth:`add_age`); ``labels`` as in :meth:`encoded`."""
        ages = self.ages.get(name)
        if not labels or not ages:
            return ages
        old, new = self._insertion(labels)
        return [(head.replace(old, new, 1), since) for head, since in ages]

    def _insertion(self, labels: str) -> tuple[str, str]:
        return f"{{{self.prefix}", f"{{{self.prefix},{labels}"


class FamilyCache:
    """Cached text per family and group; renders the whole exposition in family order."""

    def __init__(self, families: Iterable[Family], labels: str = "") -> None:
        """``labels``: static labels (``k="v",...``, escaped) every stored line takes after its cluster label."""
        self.labels = labels
        self.families = {f.name: f for f in families}
        self._text: dict[str, dict[str, bytes]] = {name: {} for name, f in self.families.items() if not f.age}
        self._ages: dict[str, dict[str, list[Age]]] = {name: {} for name, f in self.families.items() if f.age}
        self._series: dict[str, int] = {}

    def put(self, group: str, lines: Lines, names: Iterable[str]) -> None:
        """Replace ``group``'s text in the families ``names`` (the ones this rendering covers)."""
        encoded = lines.encoded(self.labels)
        shown = self._series.get(group)  # None: a new group, with no old text to take out (a first batch's)
        series = shown or 0
        for name in names:
            texts = self._text.get(name)
            if texts is None:  # an age family
                ages = lines.aged(name, self.labels)
                old_ages = self._ages[name].pop(group, ()) if shown is not None else ()
                series += len(ages or ()) - len(old_ages)
                if ages:
                    self._ages[name][group] = ages
                continue
            if shown is not None:
                old_text = texts.pop(group, None)
                if old_text is not None:
                    series -= old_text.count(b"\n")
            text = encoded.get(name)
            if text:
                texts[group] = text
                series += len(lines.by_family[name])
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


# Prometheus' label names; those starting with __ are Prometheus' own.
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
# Labels the job's series carry themselves (a series with a label twice is refused, and Prometheus drops
# the whole scrape), the histogram and summary labels, and the target labels Prometheus adds at scrape
# time: a static label may not take any of these names. tests/unit/metrics/test_policy.py checks that
# every label a full scrape shows, and every label docs/metrics.md names, is here.
RESERVED_LABELS = frozenset({
    "cluster", "group", "topic", "partition", "member", "client_id", "client_host", "consumergroup", "state",
    "group_type", "protocol_type", "protocol", "leader", "assignor", "cause", "how", "method", "status", "reason",
    "type", "api", "record_type", "limit", "area", "kind", "gc", "version", "python_version", "spark_version",
    "java_version", "activity", "le", "quantile", "job", "instance",
})


def label_problem(name: str) -> str | None:
    """Why ``name`` cannot be a static label, or None."""
    if not LABEL_NAME.fullmatch(name):
        return "not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)"
    if name.startswith("__"):
        return "names starting with __ are Prometheus' own"
    if name in RESERVED_LABELS:
        return "the job's series (or Prometheus) already use that label"
    return None


# What the monitor's own alerts read to know it is there and moving (MonitorAbsent, MonitorDown, MonitorStalled):
# served whatever --metrics-allow/--metrics-deny say, so a filter cannot page or hide a dead monitor.
ALWAYS_SERVED = frozenset({"rebalance_monitor_build_info", "rebalance_monitor_last_batch_timestamp_seconds"})


@dataclass(frozen=True)
class ExportPolicy:
    """Static labels on every served series and the families served: ``allow`` and ``deny`` are regular
    expressions matched against a family's whole name (as its ``# TYPE`` line shows it: counters with their
    ``_total``); a family is served when ``allow`` matches it (or there is none) and ``deny`` does not, and
    the families in :data:`ALWAYS_SERVED` always are."""

    cluster: str = "default"
    labels: tuple[tuple[str, str], ...] = ()
    allow: str | None = None
    deny: str | None = None
    label_text: str = field(init=False, repr=False, compare=False)
    _cluster: bytes = field(init=False, repr=False, compare=False)
    _allow: re.Pattern[str] | None = field(init=False, repr=False, compare=False)
    _deny: re.Pattern[str] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name, _ in self.labels:
            problem = label_problem(name)
            if problem is not None:
                raise ValueError(f"label {name!r}: {problem}")
        object.__setattr__(self, "label_text", ",".join(f'{k}="{escape(v)}"' for k, v in self.labels))
        object.__setattr__(self, "_cluster", f'cluster="{escape(self.cluster)}"'.encode())
        object.__setattr__(self, "_allow", None if self.allow is None else re.compile(self.allow))
        object.__setattr__(self, "_deny", None if self.deny is None else re.compile(self.deny))

    @classmethod
    def of(cls, cluster: str, labels: Mapping[str, str] | Iterable[tuple[str, str]] = (),
           allow: str | None = None, deny: str | None = None) -> ExportPolicy:
        pairs = labels.items() if isinstance(labels, Mapping) else labels
        return cls(cluster, tuple(pairs), allow or None, deny or None)

    @property
    def filters(self) -> bool:
        return self.allow is not None or self.deny is not None

    @property
    def plain(self) -> bool:
        """Nothing to add or leave out: text passes as it is."""
        return not self.labels and not self.filters

    def allows(self, family: str) -> bool:
        if family in ALWAYS_SERVED:
            return True
        if self._deny is not None and self._deny.fullmatch(family):
            return False
        return self._allow is None or self._allow.fullmatch(family) is not None

    def text(self, text: bytes) -> bytes:
        """Exposition text (``# HELP``, ``# TYPE`` and sample lines) with the families left out whole and the
        static labels on every sample: after ``cluster`` when a sample starts with it, else first."""
        if self.plain or not text:
            return text
        parts = (b"\n" + text).split(b"\n# HELP ")
        kept = [self._labelled(parts[0][1:])] if parts[0] else []
        for part in parts[1:]:
            name = part.split(None, 1)[0].decode() if part.strip() else ""
            if self.filters and not self.allows(name):
                continue
            kept.append(b"# HELP " + self._labelled(part, header=True))
        out = b"\n".join(kept)
        return out if not out or out.endswith(b"\n") else out + b"\n"

    def _labelled(self, block: bytes, header: bool = False) -> bytes:
        """``block``'s sample lines with the static labels; ``header``: its first line is a HELP line's rest."""
        if not self.labels or not block:
            return block
        static = self.label_text.encode()
        cluster = self._cluster
        lines = block.split(b"\n")
        for i, line in enumerate(lines):
            if not line or line.startswith(b"#") or (header and i == 0):
                continue
            space = line.find(b" ")
            if space < 0:
                continue
            brace = line.find(b"{", 0, space)
            if brace < 0:  # no labels at all (process_* of client_python's process collector)
                lines[i] = line[:space] + b"{" + static + b"}" + line[space:]
                continue
            at = brace + 1
            if line.startswith(cluster, at) and line[at + len(cluster):at + len(cluster) + 1] in (b",", b"}"):
                at += len(cluster)
                lines[i] = line[:at] + b"," + static + line[at:]
            elif line[at:at + 1] == b"}":
                lines[i] = line[:at] + static + line[at:]
            else:
                lines[i] = line[:at] + static + b"," + line[at:]
        return b"\n".join(lines)

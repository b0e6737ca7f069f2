"""Reading the job's exposition in tests: one parse, one way to pick a series' value."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

# (sample name, its labels) -> value: one scrape, every series in it.
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    """Every sample of an exposition text (parsed by Prometheus' own client library)."""
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def fetch(url: str, timeout: float = 10) -> Samples:
    """One scrape of a running endpoint."""
    return parse(urllib.request.urlopen(url, timeout=timeout).read().decode())


def value(samples: Samples, name: str, **labels: str) -> float | None:
    """The value of the one series of ``name`` whose labels include ``labels``; None when there is none."""
    found = list(series(samples, name, **labels).values())
    assert len(found) <= 1, f"{name}{labels} matches {len(found)} series"
    return found[0] if found else None


def series(samples: Samples, name: str, **labels: str) -> dict[frozenset[tuple[str, str]], float]:
    """Every series of ``name`` whose labels include ``labels``, by its labels."""
    wanted = set(labels.items())
    return {ls: v for (n, ls), v in samples.items() if n == name and wanted <= ls}

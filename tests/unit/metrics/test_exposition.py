"""Cached exposition text: escaping, numbers, family order, whole-group admission under --max-series."""

from __future__ import annotations

import math

from prometheus_client.parser import text_string_to_metric_families

from streaming.metrics.exposition import Family, FamilyCache, Lines, escape, number

A = Family("a_total", "counter", "A counter.\nWith a second line and a \\ backslash.")
B = Family("b", "gauge", "A gauge.")


def lines(group: str, a: float | None = None, b: float | None = None) -> Lines:
    out = Lines('c"1')
    if a is not None:
        out.add(A, (("group", group),), a)
    if b is not None:
        out.add_many(B, (("group", group),), [(("t", 0), b), (("t", 1), b)])
    return out


def test_escaping_and_numbers() -> None:
    assert escape("plain") == "plain"
    assert escape('q"\\\n') == 'q\\"\\\\\\n'
    assert [number(v) for v in (True, 3, 2.5, math.nan, math.inf, -math.inf)] == ["1", "3", "2.5", "NaN", "+Inf",
                                                                                 "-Inf"]
    assert A.header == (b"# HELP a_total A counter.\\nWith a second line and a \\\\ backslash.\n"
                        b"# TYPE a_total counter\n")


def test_families_stay_contiguous_whatever_the_order_of_puts() -> None:
    cache = FamilyCache([A, B])
    cache.put("g1", lines("g1", a=1, b=5), ["a_total", "b"])
    cache.put("g2", lines("g2", a=2), ["a_total", "b"])
    cache.put("g1", lines("g1", b=6), ["b"])  # only b re-rendered: a keeps its text
    chunks, kept, dropped = cache.render(None)
    text = b"".join(chunks).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert [(s.labels["group"], s.value) for s in families["a"].samples] == [("g1", 1), ("g2", 2)]
    assert [(s.labels["topic"], s.labels["partition"], s.value) for s in families["b"].samples] == [
        ("t", "0", 6), ("t", "1", 6)]
    assert all(s.labels["cluster"] == 'c"1' for f in families.values() for s in f.samples)
    assert (kept, dropped) == (4, 0) and cache.series() == 4
    assert cache.has("g1") and cache.groups() == 2


def test_a_put_without_lines_removes_that_familys_text() -> None:
    cache = FamilyCache([A, B])
    cache.put("g", lines("g", a=1, b=2), ["a_total", "b"])
    cache.put("g", lines("g"), ["b"])
    assert b"b{" not in cache.group_text("g") and b"a_total{" in cache.group_text("g")
    cache.remove("g")
    assert not cache.has("g") and cache.group_text("g") == b"" and cache.series() == 0


def test_max_series_admits_whole_groups_in_first_seen_order() -> None:
    cache = FamilyCache([A, B])
    for group in ("first", "second", "third"):
        cache.put(group, lines(group, a=1, b=1), ["a_total", "b"])  # 3 series each
    chunks, kept, dropped = cache.render(7)
    text = b"".join(chunks).decode()
    assert (kept, dropped) == (6, 3)
    assert 'group="third"' not in text and text.count('group="second"') == 3
    assert text.count("# HELP ") == 2  # a family's header stays even when all its groups are left out

"""The runbooks send an operator to dashboard rows and panels by title: every title they cite must
be one the generated dashboard has, and each panel must sit in the row the runbook names, or the
page sends a paged operator looking for a panel that is not there.

The citation syntax (docs/runbooks/README.md): one Diagnosis bullet per page starting
``- Dashboard,``, with ``row *Row title*:`` followed by that row's panels as ``*Panel title*``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dashboards import build

RUNBOOKS = Path(__file__).resolve().parents[2] / "docs" / "runbooks"
CITATION = re.compile(r"(\brow )?\*([^*]+)\*")


def dashboard_bullets(text: str) -> list[str]:
    """The ``- Dashboard,`` bullets of a page's Diagnosis section, each on one line."""
    diagnosis = text.split("## Diagnosis", 1)[1].split("\n## ", 1)[0] if "## Diagnosis" in text else ""
    bullets: list[str] = []
    for line in diagnosis.splitlines():
        if line.startswith("- "):
            bullets.append(line)
        elif line.startswith("  ") and bullets:
            bullets[-1] += " " + line.strip()
    return [" ".join(b.split()) for b in bullets if b.startswith("- Dashboard,")]


def citations(bullet: str) -> list[tuple[str, list[str]]]:
    """(row title, [panel titles cited under it]) in the order the bullet cites them; a panel cited
    before any row comes under the row title ""."""
    cited: list[tuple[str, list[str]]] = []
    for match in CITATION.finditer(bullet):
        if match.group(1):
            cited.append((match.group(2), []))
        else:
            if not cited:
                cited.append(("", []))
            cited[-1][1].append(match.group(2))
    return cited


def layout() -> dict[str, list[str]]:
    """Row title -> the titles of the panels under it, in the generated dashboard."""
    rows: dict[str, list[str]] = {}
    current: list[str] = []
    for panel in build.build()["panels"]:
        if panel["type"] == "row":
            current = rows.setdefault(panel["title"], [])
        else:
            current.append(panel["title"])
    return rows


def wrong_citations(bullet: str, rows: dict[str, list[str]]) -> list[str]:
    wrong = []
    for row, panels in citations(bullet):
        if row not in rows:
            wrong.append(f"no row {row!r}" if row else f"panels cited before any row: {panels}")
            continue
        wrong += [f"no panel {p!r} in row {row!r}" for p in panels if p not in rows[row]]
    return wrong


def test_citations_are_parsed_across_lines_and_checked_against_their_row() -> None:
    page = ("# X\n\n## Diagnosis\n\n- Dashboard, row *A*: *a1*, *a2\n  continued*; row *B*: *b1*.\n"
            "- Prometheus' *Targets* page.\n\n## Mitigation\n\n- Dashboard, row *C*: *c1*.\n")
    [bullet] = dashboard_bullets(page)
    assert citations(bullet) == [("A", ["a1", "a2 continued"]), ("B", ["b1"])]
    rows = {"A": ["a1", "a2 continued"], "B": ["b2"]}
    assert wrong_citations(bullet, rows) == ["no panel 'b1' in row 'B'"]
    assert wrong_citations("- Dashboard, *a1*; row *Z*: *z*.", rows) == [
        "panels cited before any row: ['a1']", "no row 'Z'"]


@pytest.mark.parametrize("page", sorted(p.name for p in RUNBOOKS.glob("*.md") if p.name != "README.md"))
def test_runbook_cites_rows_and_panels_the_dashboard_has(page: str) -> None:
    bullets = dashboard_bullets((RUNBOOKS / page).read_text())
    assert len(bullets) == 1, f"{page}: want one '- Dashboard,' bullet in its Diagnosis, found {len(bullets)}"
    [bullet] = bullets
    cited = citations(bullet)
    assert cited and all(panels for _, panels in cited), f"{page}: cite a row and its panels: {bullet}"
    wrong = wrong_citations(bullet, layout())
    assert not wrong, f"{page}: " + "; ".join(wrong)

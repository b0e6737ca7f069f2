"""The stage packages stand on floors: a package imports only from the floors below its own.

The floors, bottom up: the messages, contracts and helpers every stage shares; the driver's Kafka clients and its
JVM's class archive; the stages that hold state (decode, groups, lag, live, logs) and the advisor over the groups;
the metrics stage, which only renders what it is handed; the driver, which wires a batch through
them; the options composed from every package's config; the job; its command line. An import up
a floor (a back-arrow) makes two stages one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import streaming

ROOT = Path(streaming.__file__).parent
FLOORS = (
    {"protocol", "settings", "lifecycle", "jars", "pylists"},
    {"cluster", "class_archive"},
    {"decode", "groups", "lag", "live", "logs", "logformat"},
    {"advisor"},
    {"metrics"},
    {"driver"},
    {"options"},
    {"job"},
    {"cli"},
)
FLOOR = {unit: level for level, units in enumerate(FLOORS) for unit in units}


def unit_of(path: Path) -> str:
    """The package (or top-level module) a file of streaming/ belongs to."""
    return path.relative_to(ROOT).parts[0].removesuffix(".py")


def imported_units(path: Path) -> set[str]:
    """The streaming units a module imports (at any depth, type-checking imports included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        for name in names:
            parts = name.split(".")
            if parts[0] == "streaming" and len(parts) > 1:
                found.add(parts[1])
    return found


def modules() -> list[Path]:
    return sorted(p for p in ROOT.rglob("*.py") if p.name != "__init__.py" or p.parent != ROOT)


def test_every_unit_has_a_floor() -> None:
    units = {unit_of(p) for p in modules()} - {"__init__"}
    assert units == set(FLOOR), units ^ set(FLOOR)


def test_no_import_climbs_a_floor_or_crosses_one_sideways() -> None:
    arrows = []
    for path in modules():
        unit = unit_of(path)
        for other in imported_units(path) - {unit}:
            if FLOOR[other] >= FLOOR[unit]:
                arrows.append(f"{path.relative_to(ROOT.parent)} imports streaming.{other}")
    assert not arrows, "\n".join(arrows)


def test_the_driver_builds_the_query_from_its_own_configs() -> None:
    assert "JobOptions" not in (ROOT / "driver" / "query.py").read_text()


def sources(unit: str) -> dict[Path, str]:
    return {p: p.read_text() for p in modules() if unit_of(p) == unit}


def test_only_the_lag_book_tells_the_tracker_what_to_poll() -> None:
    callers = {p.relative_to(ROOT).as_posix() for p in modules() if ".set_wanted(" in p.read_text()}
    assert callers == {"lag/book.py"}, callers


def test_the_metrics_stage_starts_no_thread_but_the_http_servers() -> None:
    starting = {p.name for p, text in sources("metrics").items() if "Thread(" in text or "PollingThread" in text}
    assert starting <= {"server.py"}, starting


def test_the_driver_renders_what_the_group_stage_hands_over() -> None:
    """One GroupChange per changed group: the driver never reads the stage's snapshots or its fold's modules."""
    reaching = {p.name for p, text in sources("driver").items()
                if ".snapshots" in text or "streaming.groups.boundary" in text or "streaming.groups.model" in text}
    assert not reaching, reaching


def test_the_job_is_wired_by_constructors() -> None:
    assert "add_" not in (ROOT / "job.py").read_text()


def test_the_metrics_stage_holds_no_lag_tracker() -> None:
    """It renders what it is handed: the lag book's rows, a refresh's log ends, the source's offsets through
    the SourceOffsets protocol."""
    holding = {p.name for p, text in sources("metrics").items() if "LagTracker" in text or "lag.tracker" in text}
    assert not holding, holding

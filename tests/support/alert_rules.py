"""The shipped alerts as a real Prometheus evaluates them, and what each would do without one of its guards.

A test that an alert stays silent proves little unless the alert would have fired: :func:`unguarded` is
the alert's own expression, as written in the rules file, with one guard line taken out (an ``unless``
that leaves abandoned groups or unassigned topics out), so a test can show Prometheus matching it while
the alert itself stays inactive.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from testbed.prometheus import LocalPrometheus


def alert_expressions(rules: Path, alert: str) -> list[str]:
    """The ``expr`` of every rule named ``alert`` in ``rules`` (the shipped layout: ``expr`` right after
    ``- alert:``, a one-line value or a ``|`` block), as written."""
    lines = rules.read_text().splitlines()
    found = []
    for i, line in enumerate(lines):
        if line.strip() != f"- alert: {alert}":
            continue
        key, _, rest = lines[i + 1].strip().partition(": ")
        if key != "expr":
            raise ValueError(f"{rules}: {alert}'s expr does not follow its name")
        if rest.strip() != "|":
            found.append(rest.strip())
            continue
        indent = len(lines[i + 1]) - len(lines[i + 1].lstrip())
        body = []
        for following in lines[i + 2:]:
            if following.strip() and len(following) - len(following.lstrip()) <= indent:
                break
            body.append(following.strip())
        found.append("\n".join(body).strip())
    if not found:
        raise ValueError(f"{rules} has no alert {alert}")
    return found


def unguarded(expression: str, guard: str) -> str:
    """``expression`` without its one line containing ``guard``."""
    lines = expression.splitlines()
    kept = [line for line in lines if guard not in line]
    if len(kept) != len(lines) - 1:
        raise ValueError(f"{len(lines) - len(kept)} lines of {expression!r} contain {guard!r}, not one")
    return "\n".join(kept)


def matching(prometheus: LocalPrometheus, expression: str, **labels: str) -> list[dict[str, Any]]:
    """The series of an instant query of ``expression`` whose labels include ``labels``."""
    return [r for r in prometheus.query(expression) if labels.items() <= r["metric"].items()]


def active(prometheus: LocalPrometheus, alert: str, **labels: str) -> list[dict[str, Any]]:
    """The pending or firing alerts named ``alert`` whose labels include ``labels``."""
    return [a for a in prometheus.alerts(alert) if labels.items() <= a["labels"].items()]

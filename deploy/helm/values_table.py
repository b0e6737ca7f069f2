"""The values table of the chart's README, generated from values.yaml and its comments.

values.yaml documents each value in the comment lines right above it (a blank line ends a comment).
A mapping with no comment below it is one row (its default shown whole, as for ``resources``); one
with comments inside is a row per commented key. Every row must have a comment. The table sits in
deploy/helm/rebalance-monitor/README.md between the two ``values-table`` markers.

Run after editing values.yaml: ``python deploy/helm/values_table.py`` (``--check`` only reports a
table that differs, exit status 1). tests/deploy/test_helm_chart.py fails while it differs.

values.yaml is read by a small reader of the block YAML it is written in (keys, inline values, comments;
no block lists or multi-line strings), not by a YAML library: the project has none as a dependency,
and the comments are what matters here. The test checks the rows against helm's own reading.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "rebalance-monitor"
VALUES = CHART / "values.yaml"
README = CHART / "README.md"
START = "<!-- values-table:start (python deploy/helm/values_table.py writes it from values.yaml) -->"
END = "<!-- values-table:end -->"
KEY = re.compile(r"(?P<indent> *)(?P<key>[A-Za-z0-9_.-]+):(?: +(?P<value>\S.*))?$")


@dataclass
class Node:
    """A key of values.yaml: its comment, and its inline value or its keys."""

    path: str
    comment: list[str]
    value: str | None = None
    children: list[Node] = field(default_factory=list)

    def commented_inside(self) -> bool:
        return any(child.comment or child.commented_inside() for child in self.children)

    def flow(self) -> str:
        """The default as one line: the inline value as written, a mapping in flow style."""
        if self.value is not None:
            return self.value
        return "{" + ", ".join(f"{child.path.rsplit('.', 1)[-1]}: {child.flow()}" for child in self.children) + "}"


def parse(text: str) -> list[Node]:
    """values.yaml's top-level keys."""
    top: list[Node] = []
    stack: list[tuple[int, Node]] = []
    comment: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped:
            comment = []
            continue
        if stripped.startswith("#"):
            comment.append(stripped[1:].strip())
            continue
        match = KEY.fullmatch(line)
        if match is None:
            raise ValueError(f"values.yaml:{number}: not a `key: value` or `key:` line: {line!r}")
        indent = len(match["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1] if stack else None
        if parent is not None and parent.value is not None:
            raise ValueError(f"values.yaml:{number}: a key under {parent.path}, which has a value")
        path = f"{parent.path}.{match['key']}" if parent else match["key"]
        node = Node(path, comment, match["value"])
        comment = []
        (parent.children if parent else top).append(node)
        stack.append((indent, node))
    return top


def opened(node: Node) -> bool:
    """A mapping with comments inside: a row per commented key (and one for its own comment, if any)."""
    return node.value is None and node.commented_inside()


def rows(nodes: list[Node]) -> list[Node]:
    """The table's rows, in values.yaml's order."""
    found: list[Node] = []
    for node in nodes:
        if opened(node):
            found += [node] if node.comment else []
            found += rows(node.children)
        else:
            found.append(node)
    return found


def table(values_text: str) -> str:
    lines = ["| value | default | description |", "| --- | --- | --- |"]
    for row in rows(parse(values_text)):
        if not row.comment:
            raise ValueError(f"values.yaml: {row.path} has no comment above it")
        description = " ".join(row.comment).replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
        default = "" if opened(row) else f"`{row.flow()}`".replace("|", "\\|")
        lines.append(f"| `{row.path}` | {default} | {description} |")
    return "\n".join(lines)


def readme(current: str, values_text: str) -> str:
    """``current`` (the README) with the table between the markers made values.yaml's."""
    head, start, rest = current.partition(START)
    _, end, tail = rest.partition(END)
    if not start or not end:
        raise ValueError(f"{README.relative_to(ROOT)}: the markers {START} and {END} are missing")
    return f"{head}{START}\n{table(values_text)}\n{END}{tail}"


def main(argv: list[str]) -> int:
    if argv not in ([], ["--check"]):
        print("usage: python deploy/helm/values_table.py [--check]", file=sys.stderr)
        return 2
    current = README.read_text(encoding="utf-8")
    wanted = readme(current, VALUES.read_text(encoding="utf-8"))
    if wanted == current:
        return 0
    if argv:
        print(f"stale: {README.relative_to(ROOT)} (run python deploy/helm/values_table.py)")
        return 1
    README.write_text(wanted, encoding="utf-8")
    print(f"{VALUES.relative_to(ROOT)} -> {README.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""A process tree's members, resident memory and CPU time, read from /proc for the benchmarks' samplers.

The tree is found by parent ids over all of /proc. ``/proc/PID/task/PID/children`` lists only the
children forked by a process's main thread, and the JVM starts Spark's Python daemon (and so its
workers) from a task thread: a tree walked that way leaves the Python workers out.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Collection
from pathlib import Path


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (which may hold spaces and parentheses)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def tree(root: int, exclude: Collection[int] = ()) -> list[int]:
    """``root`` and every process under it, leaving out the subtrees of ``exclude``."""
    children: dict[int, list[int]] = defaultdict(list)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields is not None:
                children[int(fields[1])].append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in exclude:
            continue
        found.append(pid)
        todo.extend(children.get(pid, ()))
    return found


def rss_bytes(pid: int) -> int:
    """Resident set size; 0 for a process gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def tree_rss(root: int) -> int:
    return sum(rss_bytes(pid) for pid in tree(root))


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def is_java(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "java"
    except OSError:
        return False


def cpu_seconds(pid: int, *, reaped_children: bool = True) -> float:
    """User + system seconds of a process, with those of its children it has waited for unless told not to
    (a sampler summing a tree as it runs counts each live process once); 0 for a process gone."""
    fields = _stat_fields(pid)
    if fields is None:
        return 0.0
    ticks = sum(int(v) for v in fields[11:15 if reaped_children else 13])
    return ticks / os.sysconf("SC_CLK_TCK")

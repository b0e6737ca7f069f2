"""A Spark standalone cluster on loopback for the benchmarks, and what each of its workers uses.

The cluster is the fault suite's (``tests/support/fault_helpers.SparkCluster``): a master and one-core
workers, each in its own process group. A job on it runs its driver where it was started; the
executors and their Python workers run under the worker daemons, outside the driver's process tree,
so :class:`WorkerSampler` measures them by worker.
"""

from __future__ import annotations

import os
import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks.procfs import cpu_seconds, rss_bytes, tree


def standalone(base: Path, workers: int, worker_memory: str = "2g") -> Any:
    """A standalone master and ``workers`` one-core workers on loopback (the fault suite's harness)."""
    from tests.support.fault_helpers import SparkCluster

    return SparkCluster(base / "cluster", workers=workers, worker_memory=worker_memory).start()


def tree_bytes(directory: Path) -> int:
    """Bytes of the files under ``directory`` (files vanishing while walked are skipped)."""
    total = 0
    for root, _, names in os.walk(directory):
        for name in names:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except FileNotFoundError:
                continue
    return total


class WorkerSampler(threading.Thread):
    """Each worker's share, every second while a child runs on the standalone cluster: peak RSS of what runs
    under the worker daemon (its executor and Python workers, not the daemon), their CPU seconds (as last
    seen: a process gone between two samples loses its last second) and peak bytes of the state store's
    RocksDB instances in the worker's local directory (``StateStoreId(...)`` directories)."""

    def __init__(self, cluster: Any) -> None:
        super().__init__(daemon=True)
        self.cluster = cluster
        self.rss: dict[str, int] = defaultdict(int)
        self.state: dict[str, int] = defaultdict(int)
        self.cpu: dict[str, dict[int, float]] = defaultdict(dict)
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(1.0):
            for name, process in self.cluster.processes.items():
                if name.startswith("worker"):
                    self._sample(name, [pid for pid in tree(process.pid) if pid != process.pid])

    def _sample(self, name: str, pids: list[int]) -> None:
        self.rss[name] = max(self.rss[name], sum(rss_bytes(pid) for pid in pids))
        for pid in pids:
            self.cpu[name][pid] = cpu_seconds(pid, reaped_children=False) or self.cpu[name].get(pid, 0.0)
        stores = [d for d in self.cluster.local_dir(name).rglob("StateStoreId*") if d.is_dir()]
        self.state[name] = max(self.state[name], sum(tree_bytes(d) for d in stores))

    def stop(self) -> None:
        self._done.set()
        self.join(5)

    def figures(self) -> dict[str, Any]:
        return {"worker_peak_rss": dict(self.rss), "worker_peak_rocksdb_bytes": dict(self.state),
                "worker_cpu_s": {name: sum(cpu.values()) for name, cpu in self.cpu.items()}}

"""The monitor itself: which build runs where, and what the driver's Python process and Spark's JVM use.

Memory is this job's real risk (every group's state lives on the driver), so the exposition
carries the driver's process figures (client_python's process collector: ``process_*``), the
driver JVM's process figures (the same collector on the JVM's pid: ``rebalance_monitor_jvm_process_*``),
its heap and non-heap pools and its garbage collectors, read through Spark's own py4j gateway at
scrape time (a few calls, about a millisecond each). A JVM that does not answer yields no JVM
series rather than failing the scrape.
"""

from __future__ import annotations

import logging
import platform
from collections.abc import Callable, Iterator
from importlib import metadata
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

PACKAGE = "kafka-rebalance-monitor"


def version() -> str:
    """The installed package's version (a source checkout installed with ``pip -e`` has one too)."""
    try:
        return metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        return "unknown"


def build_labels(jvm: Any = None) -> dict[str, str]:
    """The ``rebalance_monitor_build_info`` labels: our version and the runtimes under it."""
    import pyspark

    labels = {"version": version(), "python_version": platform.python_version(), "spark_version": pyspark.__version__}
    if jvm is not None:
        try:
            labels["java_version"] = str(jvm.java.lang.System.getProperty("java.version"))
        except Exception:
            log.debug("Spark's JVM did not say its version", exc_info=True)
    labels.setdefault("java_version", "")
    return labels


class JvmCollector(Collector):
    """Heap and non-heap memory and garbage collection of the JVM behind ``jvm`` (a py4j view)."""

    def __init__(self, cluster: str, jvm: Callable[[], Any]) -> None:
        self.cluster = cluster
        self._jvm = jvm

    def collect(self) -> Iterator[Metric]:
        try:
            management = self._jvm().java.lang.management.ManagementFactory
            memory = management.getMemoryMXBean()
            pools = {"heap": memory.getHeapMemoryUsage(), "nonheap": memory.getNonHeapMemoryUsage()}
            collectors = [(str(gc.getName()), int(gc.getCollectionCount()), int(gc.getCollectionTime()))
                          for gc in management.getGarbageCollectorMXBeans()]
        except Exception:  # the JVM is gone or busy: no JVM series this scrape
            log.debug("JVM metrics unavailable", exc_info=True)
            return
        used = GaugeMetricFamily("rebalance_monitor_jvm_memory_bytes",
                                 "Spark driver JVM memory by area (heap, nonheap) and kind (used, committed, max; "
                                 "max -1 when unbounded).", labels=["cluster", "area", "kind"])
        for area, usage in pools.items():
            for kind, value in (("used", usage.getUsed()), ("committed", usage.getCommitted()),
                                ("max", usage.getMax())):
                used.add_metric([self.cluster, area, kind], float(value))
        yield used
        count = CounterMetricFamily("rebalance_monitor_jvm_gc_collections", "Spark driver JVM garbage collections.",
                                    labels=["cluster", "gc"])
        seconds = CounterMetricFamily("rebalance_monitor_jvm_gc_collection_seconds",
                                      "Time the Spark driver JVM's garbage collectors spent collecting.",
                                      labels=["cluster", "gc"])
        for name, collections, millis in collectors:
            count.add_metric([self.cluster, name], float(collections))
            seconds.add_metric([self.cluster, name], millis / 1000)
        yield count
        yield seconds


def register_runtime(registry: CollectorRegistry, cluster: str, jvm: Callable[[], Any] | None = None) -> None:
    """Build info, the driver's process collector and, with a JVM, the JVM's collectors into ``registry``."""
    info = Gauge("rebalance_monitor_build_info", "Always 1: the monitor's version and the runtimes it runs on.",
                 ["cluster", "version", "python_version", "spark_version", "java_version"], registry=registry)
    labels = build_labels(jvm() if jvm is not None else None)
    info.labels(cluster, labels["version"], labels["python_version"], labels["spark_version"],
                labels["java_version"]).set(1)
    ProcessCollector(registry=registry)
    if jvm is None:
        return
    try:
        jvm_pid = int(jvm().java.lang.ProcessHandle.current().pid())
    except Exception:
        log.warning("could not read the Spark JVM's pid: no rebalance_monitor_jvm_process_* series", exc_info=True)
    else:
        ProcessCollector(namespace="rebalance_monitor_jvm", pid=lambda: jvm_pid, registry=registry)
    registry.register(JvmCollector(cluster, jvm))

"""A class-data-sharing archive of the driver JVM's classes: Spark starts in about 0.7x the time.

A new driver JVM loads some 18,500 classes before its first Arrow job, most of them Spark's. It can map
about 12,400 of them from an archive that a run of the same JVM and class path wrote at its exit
(``-XX:ArchiveClassesAtExit``, JDK 13+). ``python -m streaming.class_archive [PATH]`` writes one: it
starts Spark in local mode, runs streaming queries through an Arrow stage and a stateful one for a few
batches, stops, checks the archive with the same JVM and class path, then moves it into place. Only
the JVM's own class path is archived (Spark's jars): the connector jars the job adds are loaded as
before. ``make setup`` writes ``build/jvm/spark-VERSION.jsa``; an image or a host can point the job at
another with ``REBALANCE_MONITOR_CLASS_ARCHIVE``.

The job passes ``-XX:SharedArchiveFile`` to the driver JVM it starts whenever the archive exists.
A JVM that finds the archive was written by another JVM build or for another class path ignores
it and starts as before. A truncated archive, though, kills the JVM (SIGBUS in JDK 17), hence the
check and the move: the job never sees a half-written one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ENV_VAR = "REBALANCE_MONITOR_CLASS_ARCHIVE"
# Where `make setup` writes the archive in a source checkout (absent in an installed wheel).
CHECKOUT_DIR = Path(__file__).resolve().parent.parent / "build" / "jvm"
# JVM options by which the operator already chose what the JVM shares (or that it writes an archive).
SHARING_CHOICES = ("SharedArchiveFile", "ArchiveClassesAtExit", "-Xshare")


def default_path() -> Path:
    """``$REBALANCE_MONITOR_CLASS_ARCHIVE``, else the source checkout's archive for the installed pyspark."""
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR])
    from streaming.jars import pyspark_version

    return CHECKOUT_DIR / f"spark-{pyspark_version()}.jsa"


def sharing_option(configured: str, path: Path | None = None) -> str | None:
    """The JVM option mapping the archive, or None: no archive there, or the operator's options
    (``configured``) already say what the JVM shares."""
    archive = default_path() if path is None else path
    if any(choice in configured for choice in SHARING_CHOICES) or not archive.is_file():
        return None
    return f"-XX:SharedArchiveFile={archive}"


def _train(spark: Any, workdir: Path) -> None:
    """Load what the job's first batches load: a streaming query on the rate source through an Arrow
    stage (the decode's ``mapInArrow``), a stateful one on the RocksDB state store (the state-store
    fold's), ``foreachBatch`` collecting to Arrow (the driver's sink), each with a checkpoint."""
    import pandas as pd
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class Count(StatefulProcessor):
        def init(self, handle):
            self.count = handle.getValueState("count", "n long")

        def handleInputRows(self, key, rows, timerValues):
            seen = sum(len(frame) for frame in rows) + (self.count.get()[0] if self.count.exists() else 0)
            self.count.update((seen,))
            yield pd.DataFrame({"key": [key[0]], "n": [seen]})

        def close(self) -> None:
            pass

    batches: dict[str, int] = {"arrow": 0, "state": 0}

    def sink(name: str) -> Any:
        def collect(df: Any, batch_id: int) -> None:
            df.toArrow()
            batches[name] += 1
        return collect

    rate = spark.readStream.format("rate").option("rowsPerSecond", 200).load()
    decoded = rate.mapInArrow(lambda tables: tables, rate.schema).selectExpr("value % 7 AS key", "timestamp")
    queries = [
        decoded.writeStream.trigger(processingTime="200 milliseconds").foreachBatch(sink("arrow"))
        .option("checkpointLocation", str(workdir / "arrow")).start(),
        decoded.groupBy("key").transformWithStateInPandas(
            Count(), "key long, n long", "Update", "None").writeStream.trigger(processingTime="200 milliseconds")
        .outputMode("update").foreachBatch(sink("state")).option("checkpointLocation", str(workdir / "state")).start(),
    ]
    deadline = time.monotonic() + 120
    while min(batches.values()) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)
    for query in queries:
        query.stop()


def build(path: Path) -> None:
    """Write the archive to ``path``: trained, checked, then moved into place (never half-written there)."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    if SparkContext._active_spark_context is not None:  # its JVM started without the option, and stopping it here
        raise SystemExit("class archive: Spark already runs in this process; build the archive in a process of its own")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        written = Path(tmp) / path.name
        spark = (SparkSession.builder.master("local[2]").appName("class-archive")
                 .config("spark.driver.extraJavaOptions", f"-XX:ArchiveClassesAtExit={written} -Xlog:cds*=error")
                 .config("spark.sql.execution.arrow.pyspark.enabled", "true")
                 .config("spark.sql.shuffle.partitions", "2")  # Spark's 200 state partitions: minutes a batch
                 .config("spark.sql.streaming.stateStore.providerClass",
                         "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
                 .config("spark.ui.showConsoleProgress", "false").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")  # stopping the queries mid-batch is expected here
        jvm: Any = spark.sparkContext._jvm
        gateway: Any = spark.sparkContext._gateway
        java = Path(jvm.java.lang.System.getProperty("java.home")) / "bin" / "java"
        class_path = jvm.java.lang.System.getProperty("java.class.path")
        _train(spark, Path(tmp))
        spark.stop()
        gateway.proc.stdin.close()  # the JVM exits on its stdin's end, writing the archive as it goes
        if gateway.proc.wait(timeout=300) != 0 or not written.is_file():
            raise SystemExit(f"class archive: the JVM wrote no archive to {written}")
        # A bad archive crashes the JVM checking it: its crash report goes in the temporary directory too.
        check = subprocess.run([str(java), "-Xshare:on", f"-XX:SharedArchiveFile={written}",
                                f"-XX:ErrorFile={tmp}/hs_err_pid%p.log", "-cp", class_path, "-version"],
                               capture_output=True, text=True)
        if check.returncode != 0:
            raise SystemExit(f"class archive: {written} does not load ({check.stdout[-500:]}{check.stderr[-500:]})")
        written.replace(path)
    print(f"class archive: {path} ({path.stat().st_size / 2**20:.0f} MiB)")


def main(argv: list[str]) -> None:
    build(Path(argv[0]) if argv else default_path())


if __name__ == "__main__":
    main(sys.argv[1:])

"""Run by tests/unit/driver/test_sink_memory.py in a process of its own: how many of the batches' Datasets does the
driver JVM still hold after a foreachBatch query whose sink freezes its survivors (``young_garbage_only``),
with and without the periodic full collection? Prints one JSON line."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from pyspark.sql import SparkSession

from streaming.driver.sink import young_garbage_only

BATCHES = 30


def live_datasets(spark: SparkSession) -> int:
    """Instances of the JVM's Dataset class after a full GC, by the JVM's own class histogram."""
    pid = str(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    subprocess.run(["jcmd", pid, "GC.run"], capture_output=True, check=True)
    histogram = subprocess.run(["jcmd", pid, "GC.class_histogram"], capture_output=True, text=True, check=True).stdout
    return sum(int(line.split()[1]) for line in histogram.splitlines() if line.endswith("sql.classic.Dataset"))


def run(spark: SparkSession, full_every: int | None) -> int:
    """Datasets left after BATCHES batches (the query stopped, Python's collector run as it would be)."""
    done: list[int] = []

    def sink(df: object, batch_id: int) -> None:
        with young_garbage_only(full=full_every is not None and (len(done) + 1) % full_every == 0):
            df.toArrow()  # type: ignore[attr-defined]
        done.append(batch_id)

    before = live_datasets(spark)
    query = (spark.readStream.format("rate").option("rowsPerSecond", 5).load()
             .writeStream.trigger(processingTime="100 milliseconds").foreachBatch(sink).start())
    while len(done) < BATCHES:
        time.sleep(0.2)
    query.stop()
    return live_datasets(spark) - before


def main() -> None:
    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .config("spark.sql.execution.arrow.pyspark.enabled", "true").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    interval = int(sys.argv[1])
    # This order: a full collection would also free what an earlier run left frozen.
    with_full_collections = run(spark, interval)
    print(json.dumps({"batches": BATCHES, "interval": interval, "with_full_collections": with_full_collections,
                      "frozen_only": run(spark, None)}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()

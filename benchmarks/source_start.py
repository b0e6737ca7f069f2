"""How long the job's Kafka source takes to start, subscribed against assigned (issue 30, item 6).

A subscribed source's driver-side consumer joins a consumer group of one before it can read
anything, and a group's first join waits ``group.initial.rebalance.delay.ms`` on the coordinator
(Kafka's default 3 s; the test broker's is 0, so this broker sets the default back). An assigned
source names its partitions and joins nothing. Both run in the same SparkSession, in turn, on the
real ``__consumer_offsets`` of a fresh local broker: each start is a fresh checkpoint whose query
reads the topic to its end once (``availableNow``) through the job's own decoded stream; the time
is from ``start()`` to the query's end. Medians of ``--repeats`` and their ratio are printed.

``python -m benchmarks.source_start [--repeats 5] [--groups 200]``
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from streaming.cluster.config import KafkaConfig
from streaming.cluster.metadata import OFFSETS_TOPIC, TopicMetadata
from streaming.decode.config import SourceConfig
from streaming.decode.source import decode, kafka_stream
from testbed.broker import LocalKafka
from testbed.workload import Admin

KAFKA_DEFAULT_INITIAL_DELAY_MS = "3000"


def one_start(spark: Any, bootstrap: str, partitions: int | None, checkpoint: Path) -> tuple[float, int]:
    """Seconds from the query's start to its end, and the rows it decoded."""
    rows: list[int] = []
    source = SourceConfig()
    stream = kafka_stream(spark, KafkaConfig(bootstrap), source, partitions)
    started = time.monotonic()
    query = (stream.writeStream.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True)
             .foreachBatch(lambda df, _: rows.append(decode(df, source, None).count())).start())
    query.awaitTermination()
    return time.monotonic() - started, sum(rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--groups", type=int, default=200, help="groups with a commit each, so the topic has data")
    args = parser.parse_args(argv)

    from streaming.job import spark_session
    from streaming.options import parse_args

    workdir = Path(tempfile.mkdtemp(prefix="source-start-"))
    broker = LocalKafka(workdir / "kafka", extra_config={"group.initial.rebalance.delay.ms":
                                                          KAFKA_DEFAULT_INITIAL_DELAY_MS})
    broker.start()
    try:
        admin = Admin(broker.bootstrap)
        admin.create_topic("orders", 1)
        for i in range(args.groups):
            admin.commit(f"start-bench-{i}", {("orders", 0): i})
        admin.close()
        metadata = TopicMetadata(broker.bootstrap)
        partitions = metadata.partition_count(OFFSETS_TOPIC)
        metadata.stop()
        spark = spark_session(parse_args(["--bootstrap-server", broker.bootstrap, "--master", "local[2]"]))
        one_start(spark, broker.bootstrap, partitions, workdir / "warm-up")  # JVM classes, Python workers
        times: dict[str, list[float]] = {"subscribe": [], "assign": []}
        for n in range(args.repeats):
            for mode, count in (("subscribe", None), ("assign", partitions)):
                seconds, rows = one_start(spark, broker.bootstrap, count, workdir / f"{mode}-{n}")
                times[mode].append(seconds)
                print(f"{mode:9s} run {n + 1}: {seconds:.2f} s, {rows} rows", flush=True)
        subscribe, assign = (statistics.median(times[m]) for m in ("subscribe", "assign"))
        print(f"Kafka {broker.version}, {partitions} partitions of {OFFSETS_TOPIC}, "
              f"group.initial.rebalance.delay.ms={KAFKA_DEFAULT_INITIAL_DELAY_MS}, medians of {args.repeats}: "
              f"subscribe {subscribe:.2f} s, assign {assign:.2f} s, "
              f"{subscribe - assign:.2f} s saved a start ({subscribe / assign:.2f}x)")
        spark.stop()
    finally:
        broker.stop()


if __name__ == "__main__":
    main()

"""The Spark wiring: Kafka source -> Arrow decode -> per-group state -> driver sink.

Run with spark-submit (see deploy/spark-submit) or ``rebalance-monitor run``:

* consume: Spark's Kafka source on the offsets topic (``read_committed``; compaction gaps
  are tolerated and counted);
* decode: ``decoders.batch.decode_batch`` over whole Arrow batches in the executors
  (``mapInArrow``), so offset commits, most of the traffic, never meet a per-record
  Python function;
* store: ``applyInPandasWithState`` keyed by group keeps each group's snapshot in Spark's
  checkpointed state store and folds new records with the pure functions of
  :mod:`streaming.state`;
* evaluate/notify: the driver appends the batch's rebalance events to the Parquet event
  log (once per batch id) and hands group summaries to the Prometheus exporter.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from decoders import Record, decode
from decoders.batch import decode_batch
from streaming.exporter import MetricsStore
from streaming.history import EventLog
from streaming.lag import LogEndPoller
from streaming.options import JOB_GROUP_PREFIX, JobOptions, parse_args
from streaming.state import (
    GroupSnapshot,
    GroupSummary,
    OffsetCommit,
    RebalanceEvent,
    apply_offset_commits,
    apply_record,
    drop_expired,
    summarize,
)

log = logging.getLogger("rebalance_monitor")

OFFSET_TYPES = [0, 1]

# What the executors hand from the decode stage to the per-group stage. Raw bytes travel
# only for the rare non-offset records, which the group stage decodes in full.
DECODED_SCHEMA = pa.schema([
    ("record_type", pa.int16()),
    ("group", pa.string()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("commit_timestamp", pa.int64()),
    ("is_tombstone", pa.bool_()),
    ("error", pa.string()),
    ("kafka_partition", pa.int32()),
    ("kafka_offset", pa.int64()),
    ("record_time_ms", pa.int64()),
    ("raw_key", pa.binary()),
    ("raw_value", pa.binary()),
])
# Per-group stage output: one row per summary, event, removal or stats blob.
OUTPUT_DDL = "kind string, grp string, payload string"
STATE_DDL = "snapshot string"


def decode_arrow_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: decode whole Kafka batches with the vectorised decoder."""
    for batch in batches:
        keys, values = batch.column("key"), batch.column("value")
        table = decode_batch(keys, values)
        record_type = table.column("record_type").combine_chunks()
        is_offset = pc.fill_null(pc.is_in(record_type, value_set=pa.array(OFFSET_TYPES, pa.int16())), False)
        # Undecodable offset commits still carry their bytes, for the error path.
        keep_raw = pc.or_(pc.invert(is_offset), pc.is_valid(table.column("error").combine_chunks()))
        null_binary = pa.scalar(None, pa.binary())
        timestamps = pc.cast(batch.column("timestamp"), pa.timestamp("ms"))
        yield pa.RecordBatch.from_arrays([
            record_type,
            table.column("group").combine_chunks(),
            table.column("topic").combine_chunks(),
            table.column("partition").combine_chunks(),
            table.column("offset").combine_chunks(),
            table.column("commit_timestamp").combine_chunks(),
            table.column("is_tombstone").combine_chunks(),
            table.column("error").combine_chunks(),
            batch.column("partition"),
            batch.column("offset"),
            pc.cast(timestamps, pa.int64()),
            pc.if_else(keep_raw, pc.cast(keys, pa.binary()), null_binary),
            pc.if_else(keep_raw, pc.cast(values, pa.binary()), null_binary),
        ], schema=DECODED_SCHEMA)


def _rows(kind: str, group: str | None, payloads: list[str]) -> pd.DataFrame:
    return pd.DataFrame({"kind": [kind] * len(payloads), "grp": [group] * len(payloads), "payload": payloads})


def make_group_updater(ttl_ms: int):
    """The applyInPandasWithState body, closed over the TTL."""

    def update_group(key: tuple[Any, ...], frames: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
        (group,) = key
        now_ms = int(state.getCurrentProcessingTimeMs())
        if state.hasTimedOut:
            snapshot = GroupSnapshot.from_json(state.get[0]) if state.exists else None
            if snapshot is None or drop_expired(snapshot, now_ms, ttl_ms):
                state.remove()
                yield _rows("removed", group, [json.dumps({"reason": "ttl"})])
            else:
                state.setTimeoutDuration(ttl_ms)
            return
        df = pd.concat(list(frames), ignore_index=True)
        yield _rows("stats", group, [_batch_stats(df)])
        if group is None:
            return  # keys too broken to route: counted above, nothing to keep
        existed = state.exists
        snapshot = GroupSnapshot.from_json(state.get[0]) if existed else None
        snapshot, events = fold_group_records(snapshot, group, df)
        if snapshot is None:
            if existed:
                state.remove()
                yield _rows("removed", group, [json.dumps({"reason": "deleted"})])
            return
        state.update((snapshot.to_json(),))
        state.setTimeoutDuration(ttl_ms)
        payloads = [json.dumps(e.to_dict(), separators=(",", ":")) for e in events]
        yield _rows("event", group, payloads)
        yield _rows("summary", group, [summarize(snapshot, now_ms).to_json()])

    return update_group


def _batch_stats(df: pd.DataFrame) -> str:
    """Records by type and decode errors by reason, for the job's own counters."""
    types = df["record_type"].fillna(-1).astype(int).value_counts()
    errors = df["error"].dropna().value_counts()
    return json.dumps({"records": {str(k): int(v) for k, v in types.items()},
                       "errors": {str(k): int(v) for k, v in errors.items()}})


def fold_group_records(snapshot: GroupSnapshot | None, group: str,
                       df: pd.DataFrame) -> tuple[GroupSnapshot | None, list[RebalanceEvent]]:
    """Apply one batch of a group's records: metadata in log order, commits reduced per partition."""
    df = df[df["error"].isna()].sort_values(["kafka_partition", "kafka_offset"], kind="stable")
    is_commit = df["record_type"].isin(OFFSET_TYPES)
    events: list[RebalanceEvent] = []
    for raw_key, raw_value, record_time in df.loc[~is_commit, ["raw_key", "raw_value", "record_time_ms"]].itertuples(
            index=False, name=None):
        record = decode(bytes(raw_key), None if raw_value is None else bytes(raw_value))
        if isinstance(record, Record):
            snapshot, new_events = apply_record(snapshot, record, int(record_time))
            events.extend(new_events)
    commits = df[is_commit]
    if len(commits):
        latest = commits.drop_duplicates(["topic", "partition"], keep="last")
        offsets = latest["offset"].where(~latest["is_tombstone"].astype(bool), None)
        updates = [OffsetCommit(t, int(p), o, c, None, int(r)) for t, p, o, c, r in zip(
            latest["topic"], latest["partition"], offsets, latest["commit_timestamp"],
            latest["record_time_ms"], strict=True)]
        snapshot = apply_offset_commits(snapshot, group, updates, int((~commits["is_tombstone"].astype(bool)).sum()))
    return snapshot, events


def build_query(spark: Any, options: JobOptions, sink: BatchSink) -> Any:
    """The streaming query: source, decode, per-group state, driver sink."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema
    from pyspark.sql.streaming.state import GroupStateTimeout

    reader = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", options.bootstrap_servers)
              .option("subscribe", options.topic)
              .option("startingOffsets", options.starting_offsets)
              .option("failOnDataLoss", "false")
              .option("kafka.isolation.level", "read_committed")
              .option("groupIdPrefix", JOB_GROUP_PREFIX.rstrip("-")))
    if options.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(options.max_offsets_per_trigger))
    for name, value in options.kafka_options.items():
        reader = reader.option(name, value)
    raw = reader.load().select("key", "value", "partition", "offset", "timestamp")
    decoded = raw.mapInArrow(decode_arrow_batches, from_arrow_schema(DECODED_SCHEMA))
    routable = F.col("group").isNull() | (
        F.col("group").rlike(options.include_groups) & ~F.col("group").rlike(options.exclude_groups))
    updates = decoded.where(routable).groupBy("group").applyInPandasWithState(
        make_group_updater(int(options.group_ttl_seconds * 1000)),
        OUTPUT_DDL, STATE_DDL, "update", GroupStateTimeout.ProcessingTimeTimeout)
    return (updates.writeStream
            # Unique per running job: one checkpoint never serves two jobs at once.
            .queryName(f"rebalance-monitor:{options.checkpoint_dir.resolve()}")
            .option("checkpointLocation", str(options.checkpoint_dir / "spark"))
            .trigger(processingTime=f"{options.trigger_seconds} seconds")
            .outputMode("update")
            .foreachBatch(sink))


TOPIC_ID_TEXT = re.compile(r"^[A-Za-z0-9_-]{22}$")


class TopicNames:
    """KIP-848 assignments name topics by id; cluster metadata maps them back to names.

    Looked up only when an event carries an id not seen before, so a steady cluster costs
    no metadata requests.
    """

    def __init__(self, lookup: Callable[[], dict[str, str]]) -> None:
        self._lookup = lookup
        self._names: dict[str, str] = {}

    def resolve(self, events: list[RebalanceEvent]) -> list[RebalanceEvent]:
        labels = [label.rpartition(":") for e in events for label in e.moved_partitions]
        unknown = {topic for topic, _, _ in labels if TOPIC_ID_TEXT.match(topic) and topic not in self._names}
        if unknown:
            try:
                self._names.update(self._lookup())
            except Exception:  # names are cosmetic here: keep the ids rather than lose the batch
                log.warning("could not map topic ids to names", exc_info=True)
        return [dataclasses.replace(e, moved_partitions=tuple(self._name(label) for label in e.moved_partitions))
                for e in events]

    def _name(self, label: str) -> str:
        topic, _, partition = label.rpartition(":")
        return f"{self._names.get(topic, topic)}:{partition}"


class BatchSink:
    """foreachBatch body on the driver: event log, exporter, and the per-batch log line."""

    def __init__(self, options: JobOptions, store: MetricsStore, event_log: EventLog,
                 topic_names: TopicNames) -> None:
        self.topic_names = topic_names
        self.store = store
        self.event_log = event_log
        self.summaries_path = options.checkpoint_dir / "monitor" / "summaries.json"
        # What the progress listener's log line reports about the latest batch.
        self.last_batch: dict[str, Any] = {}
        self._restore_summaries()

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = df.collect()
        records: Counter[str] = Counter()
        errors: Counter[str] = Counter()
        events: list[RebalanceEvent] = []
        summaries: list[GroupSummary] = []
        removed: list[str] = []
        for kind, group, payload in rows:
            if kind == "stats":
                stats = json.loads(payload)
                records.update(stats["records"])
                errors.update(stats["errors"])
            elif kind == "event":
                events.append(RebalanceEvent.from_dict(json.loads(payload)))
            elif kind == "summary":
                summaries.append(GroupSummary.from_json(payload))
            elif kind == "removed":
                removed.append(group)
        events = self.topic_names.resolve(events)
        self.event_log.append(batch_id, events)
        self.store.add_records({int(k): v for k, v in records.items()})
        self.store.add_decode_errors(errors)
        self.store.remove_groups(removed)
        self.store.update_groups(summaries)
        if summaries or removed:
            self._persist_summaries()
        self.last_batch = {
            "records": dict(records), "errors": dict(errors),
            "groups": len({s.group for s in summaries} | set(removed)), "rebalances": len(events),
        }

    def _persist_summaries(self) -> None:
        """Keep the exported group series across restarts (groups idle after a restart
        produce no new summary, yet their gauges must not vanish)."""
        self.summaries_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.summaries_path.with_suffix(".tmp")
        tmp.write_text(json.dumps([s.to_dict() for s in self.store.group_summaries()]))
        os.replace(tmp, self.summaries_path)

    def _restore_summaries(self) -> None:
        if self.summaries_path.exists():
            self.store.update_groups(GroupSummary.from_dict(d) for d in json.loads(self.summaries_path.read_text()))


def progress_line(progress: Any, batch: dict[str, Any]) -> tuple[str, int | None, int]:
    """The per-batch log line, the input lag (records behind the topic end) and skipped offsets."""
    input_lag: int | None = None
    spanned = 0
    for source in progress.sources:
        start, end, latest = (_offsets(getattr(source, name, None)) for name in
                              ("startOffset", "endOffset", "latestOffset"))
        if latest:
            input_lag = (input_lag or 0) + sum(max(0, latest[k] - end.get(k, 0)) for k in latest)
        spanned += sum(end[k] - start.get(k, end[k]) for k in end)
    skipped = max(0, spanned - int(progress.numInputRows)) if progress.numInputRows is not None else 0
    records = " ".join(f"t{k}={v}" for k, v in sorted(batch.get("records", {}).items(), key=lambda kv: int(kv[0])))
    line = (f"batch {progress.batchId}: {progress.numInputRows} records [{records or 'none'}] "
            f"errors={sum(batch.get('errors', {}).values())} groups={batch.get('groups', 0)} "
            f"rebalances={batch.get('rebalances', 0)} skipped_offsets={skipped} "
            f"took={progress.batchDuration / 1000:.2f}s behind={input_lag if input_lag is not None else '?'}")
    return line, input_lag, skipped


def _offsets(text: str | None) -> dict[str, int]:
    if not text:
        return {}
    try:
        parsed = json.loads(text)
    except ValueError:
        return {}
    return {f"{topic}:{p}": int(o) for topic, parts in parsed.items() for p, o in parts.items()}


class Monitor:
    """The running job: the streaming query plus the exporter and the lag poller."""

    def __init__(self, spark: Any, options: JobOptions) -> None:
        self.spark = spark
        self.options = options
        self.store = MetricsStore(options.cluster)
        self.event_log = EventLog(options.event_log_path)
        self._metadata = LogEndPoller(options.bootstrap_servers, partitions=lambda: (),
                                      on_log_ends=lambda *_: None,
                                      client_config=kafka_python_config(options.kafka_options))
        self.sink = BatchSink(options, self.store, self.event_log, TopicNames(self._metadata.topic_names))
        self.query: Any = None
        self.metrics_port: int | None = None
        self.poller: LogEndPoller | None = None
        self._listener: Any = None

    def start(self) -> Monitor:
        self.options.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        self.metrics_port = self.store.serve(self.options.metrics_host, self.options.metrics_port)
        self._listener = _ProgressListener(self)
        self.spark.streams.addListener(self._listener)
        self.query = build_query(self.spark, self.options, self.sink).start()
        self.poller = LogEndPoller(
            self.options.bootstrap_servers, partitions=self.store.tracked_partitions,
            on_log_ends=self.store.set_log_end_offsets, interval_s=self.options.lag_poll_seconds,
            client_config=kafka_python_config(self.options.kafka_options))
        self.poller.start()
        return self

    def _last_batch_id(self) -> int | None:
        progress = self.query.lastProgress
        return None if progress is None else progress.batchId

    @property
    def metrics_url(self) -> str:
        host = "localhost" if self.options.metrics_host in ("0.0.0.0", "") else self.options.metrics_host
        return f"http://{host}:{self.metrics_port}/metrics"

    def stop(self, drain_seconds: float = 60) -> None:
        """Stop between micro-batches: interrupting one mid-collect only produces noise."""
        if self.poller is not None:
            self.poller.stop()
        self._metadata.stop()
        if self.query is not None:
            # Let the batch in flight finish (its progress arrives), then stop before the next.
            in_flight = self._last_batch_id()
            deadline = time.monotonic() + drain_seconds
            while (self.query.isActive and self.query.status["isTriggerActive"]
                   and self._last_batch_id() == in_flight and time.monotonic() < deadline):
                time.sleep(0.1)
            self.query.stop()
        if self._listener is not None:
            self.spark.streams.removeListener(self._listener)
        self.store.close()


def _progress_listener_base() -> type:
    from pyspark.sql.streaming import StreamingQueryListener

    return StreamingQueryListener


class _ProgressListener(_progress_listener_base()):  # type: ignore[misc]
    """Logs one line per micro-batch and feeds the job's own metrics."""

    def __init__(self, monitor: Monitor) -> None:
        self.monitor = monitor

    def onQueryStarted(self, event: Any) -> None:
        log.info("query %s started", event.id)

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        # progress.id is a uuid.UUID, query.id a str.
        if self.monitor.query is None or str(progress.id) != str(self.monitor.query.id):
            return
        line, input_lag, skipped = progress_line(progress, self.monitor.sink.last_batch)
        self.monitor.store.observe_batch(progress.batchDuration / 1000, input_lag, time.time())
        self.monitor.store.add_skipped_offsets(skipped)
        log.info(line)

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        if event.exception:
            log.error("query terminated: %s", event.exception)


def kafka_python_config(kafka_options: dict[str, str]) -> dict[str, Any]:
    """The subset of ``kafka.*`` options that mean the same in kafka-python (lag poller)."""
    config: dict[str, Any] = {}
    simple = {"security.protocol": "security_protocol", "sasl.mechanism": "sasl_mechanism"}
    for name, value in kafka_options.items():
        key = name.removeprefix("kafka.")
        if key in simple:
            config[simple[key]] = value
        elif key == "sasl.jaas.config":
            user = re.search(r'username="([^"]*)"', value)
            password = re.search(r'password="([^"]*)"', value)
            if user and password:
                config["sasl_plain_username"] = user.group(1)
                config["sasl_plain_password"] = password.group(1)
    return config


def spark_session(options: JobOptions, extra_conf: dict[str, str] | None = None) -> Any:
    """A SparkSession with the connector jars and the settings the job relies on."""
    from pyspark.sql import SparkSession

    from testbed.jvm import spark_connector_jars

    # Python workers must run the interpreter that has this project and its dependencies.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName("kafka-rebalance-monitor")
    if options.master or "PYSPARK_GATEWAY_PORT" not in os.environ:  # not under spark-submit
        builder = builder.master(options.master or "local[*]")
        builder = builder.config("spark.jars", ",".join(str(p) for p in spark_connector_jars()))
    conf = {
        # Spark 4's default offset reader leaves internal topics out; this one reads them.
        "spark.sql.streaming.kafka.useDeprecatedOffsetFetching": "true",
        "spark.sql.shuffle.partitions": str(options.state_partitions),
        "spark.sql.streaming.stateStore.providerClass":
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.ui.showConsoleProgress": "false",
        **(extra_conf or {}),
    }
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def run(options: JobOptions) -> None:
    """Run until SIGINT/SIGTERM, then stop the query cleanly (the checkpoint stays consistent)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    spark = spark_session(options)
    monitor = Monitor(spark, options).start()
    log.info("metrics at %s; event log %s; checkpoint %s", monitor.metrics_url,
             options.event_log_path, options.checkpoint_dir)
    print(f"Metrics: {monitor.metrics_url}", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.is_set() and monitor.query.isActive:
        stop.wait(1)
    monitor.stop()
    if monitor.query.exception():
        raise SystemExit(f"streaming query failed: {monitor.query.exception()}")


def main(argv: list[str] | None = None) -> None:
    run(parse_args(sys.argv[1:] if argv is None else argv, prog="streaming/job.py"))


if __name__ == "__main__":
    main()

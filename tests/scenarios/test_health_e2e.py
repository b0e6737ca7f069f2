"""The probes on the real job: not ready while it catches up on a backlog, ready once caught up, healthy
while its query runs, and never the price of a whole exposition."""

from __future__ import annotations

import time
import urllib.error
import urllib.request

import pytest

from benchmarks.synthetic import Workload, backlog, produce
from tests.support.exposition import series, value
from tests.support.monitor_helpers import scrape, start_monitor

pytestmark = pytest.mark.slow


def probe(url: str) -> tuple[int, str, float]:
    started = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            status, body = response.status, response.read().decode()
    except urllib.error.HTTPError as refused:
        status, body = refused.code, refused.read().decode()
    return status, body.strip(), time.monotonic() - started


def test_ready_once_caught_up_healthy_while_the_query_runs(spark, kafka_broker, admin, tmp_path, unique):
    topic = f"health-{unique}"
    admin.create_topic(topic, 2)
    shape = Workload(groups=300, partitions=20, records=60_000, generation_every=100, topic_partitions=2)
    produce(kafka_broker.bootstrap, topic, backlog(shape, int(time.time() * 1000)))
    # A small batch cap makes the catch-up take several batches, so readiness is seen changing.
    job = start_monitor(spark, kafka_broker.bootstrap, tmp_path, "--topic", topic, "--max-offsets-per-trigger",
                        "6000", "--include-groups", "^bench-group-")
    base = job.metrics_url.removesuffix("/metrics")
    try:
        answers: list[tuple[int, str]] = []
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            status, body, _ = probe(f"{base}/-/ready")
            answers.append((status, body))
            if status == 200:
                break
            time.sleep(0.2)
        assert answers[-1] == (200, "caught up"), answers[-5:]
        waiting = [body for status, body in answers if status == 503]
        assert waiting and all(body.startswith(("waiting for the first batch", "catching up")) for body in waiting)
        assert any(body.startswith("catching up: ") for body in waiting), waiting[-3:]
        samples = scrape(job)
        assert value(samples, "rebalance_monitor_ready") == 1
        assert len(series(samples, "kafka_consumergroup_generation")) == shape.groups  # caught up: every group
        build = series(samples, "rebalance_monitor_build_info")
        assert [dict(labels)["spark_version"] for labels in build] == [spark.version]
        assert value(samples, "rebalance_monitor_jvm_memory_bytes", area="heap", kind="used") > 0
        assert value(samples, "rebalance_monitor_jvm_process_resident_memory_bytes") > 0
        assert value(samples, "process_resident_memory_bytes") > 0

        status, body, seconds = probe(f"{base}/-/healthy")
        assert (status, body) == (200, "ok")
        _, _, scrape_seconds = probe(job.metrics_url)
        print(f"\nprobe {seconds * 1000:.1f} ms, /metrics {scrape_seconds * 1000:.1f} ms for {shape.groups} groups")
        assert seconds < 0.5  # answered from two flags, not from the exposition

        job.query.stop()  # the query ends: the job is not healthy any more
        assert probe(f"{base}/-/healthy")[:2] == (503, "streaming query is not running")
    finally:
        job.stop()

"""A real Kafka Streams application (tests/jvm/StreamsApp.java) and the producer that feeds it, as processes.

:class:`RepartitionLoad` is a Streams app that re-keys its input through a repartition topic, committing and
purging it every second, fed by a producer process at a steady rate: the load under which a monitor that
read Streams' purges as losses paged (issue 28).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from testbed.broker import KAFKA_CONFIG_DIR
from testbed.jvm import kafka_jars, kafka_streams_jars
from testbed.workload import Admin, wait_until

APP = Path(__file__).resolve().parents[1] / "jvm" / "StreamsApp.java"


def streams_app(version: str, args: list[str], output: Path) -> subprocess.Popen[str]:
    """StreamsApp.java under the broker's jars (logging) and Kafka Streams'; it runs until stdin closes.

    Its output goes to a file (a pipe nobody reads could fill and stall it)."""
    classpath = f"{kafka_jars(version)}/*:{kafka_streams_jars(version)}/*"
    command = ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
               f"-Dlog4j2.configurationFile={KAFKA_CONFIG_DIR / 'tools-log4j2.properties'}",
               "-cp", classpath, str(APP), *args]
    with output.open("w") as out:
        return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT, text=True)


def wait_running(app: subprocess.Popen[str], output: Path, timeout: float = 45) -> None:
    """Until the app prints RUNNING; fails with its output if it exits first."""
    wait_until(lambda: app.poll() is not None or "RUNNING" in output.read_text().splitlines(), timeout,
               "Kafka Streams to run")
    assert app.poll() is None, output.read_text()


def close_app(app: subprocess.Popen[str], timeout: float = 60) -> int:
    """Close stdin (the app then closes Kafka Streams, leaving its group); its exit code, killed if it hangs."""
    assert app.stdin is not None
    app.stdin.close()
    try:
        return app.wait(timeout)
    except subprocess.TimeoutExpired:
        app.kill()
        return app.wait()


class RepartitionLoad:
    """StreamsApp in its repartition mode on a topic of ``partitions`` fed at ``rate`` records/s by a producer
    process; the group is ``app_id``, its repartition topic :attr:`repartition_topic`."""

    def __init__(self, admin: Admin, version: str, app_id: str, workdir: Path, partitions: int = 2,
                 rate: float = 40) -> None:
        self.admin, self.version, self.app_id, self.workdir = admin, version, app_id, workdir
        self.partitions, self.rate = partitions, rate
        self.source, self.sink = f"{app_id}-in", f"{app_id}-out"
        self.repartition_topic = f"{app_id}-rekey-repartition"
        self.output = workdir / "streams-app.log"
        self.app: subprocess.Popen[str] | None = None
        self.producer: subprocess.Popen[bytes] | None = None

    def start(self) -> RepartitionLoad:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.admin.create_topic(self.source, self.partitions)
        self.admin.create_topic(self.sink, 1)
        self.producer = start_producer(self.admin.bootstrap, self.source, self.rate)
        self.app = streams_app(self.version, [self.admin.bootstrap, self.app_id, self.source, self.sink,
                                              str(self.workdir / "state"), "repartition"], self.output)
        wait_running(self.app, self.output)
        return self

    def running(self) -> bool:
        return all(p is not None and p.poll() is None for p in (self.app, self.producer))

    def log_starts(self) -> dict[int, int]:
        """The repartition topic's log start per partition, now."""
        consumer = KafkaConsumer(bootstrap_servers=self.admin.bootstrap)
        try:
            tps = [TopicPartition(self.repartition_topic, p) for p in range(self.partitions)]
            return {tp.partition: offset for tp, offset in consumer.beginning_offsets(tps).items()}
        finally:
            consumer.close()

    def stop(self) -> int | None:
        """Stop the producer, then close the app; the app's exit code (None if it was never started)."""
        if self.producer is not None and self.producer.poll() is None:
            self.producer.terminate()
            self.producer.wait(30)
        return close_app(self.app) if self.app is not None else None


def start_producer(bootstrap: str, topic: str, rate: float) -> subprocess.Popen[bytes]:
    """A process writing ``rate`` records/s to ``topic`` until terminated (:func:`produce`)."""
    return subprocess.Popen([sys.executable, "-m", "tests.support.streams_app", bootstrap, topic, str(rate)],
                            start_new_session=True)


def produce(bootstrap: str, topic: str, rate: float) -> None:
    """Write ``rate`` records/s to ``topic`` until killed, each value distinct (the app re-keys by it)."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
    started, sent = time.monotonic(), 0
    while True:
        producer.send(topic, value=f"record-{sent}".encode())
        sent += 1
        time.sleep(max(0.0, started + sent / rate - time.monotonic()))


if __name__ == "__main__":
    produce(sys.argv[1], sys.argv[2], float(sys.argv[3]))

"""Which Kafka cluster the job reads, and the Kafka client settings every client of the job shares."""

from __future__ import annotations

from dataclasses import dataclass, field

from streaming.settings import Config, setting


@dataclass(frozen=True)
class KafkaConfig(Config):
    bootstrap_servers: str = field(metadata=setting("Kafka bootstrap servers, HOST:PORT[,HOST:PORT...]",
                                                    flag="--bootstrap-server"))
    # --kafka.<name> VALUE pairs (Java client names, "kafka." kept): to Spark's source as they are,
    # mapped for the lag poller (streaming.cluster.client).
    kafka_options: dict[str, str] = field(default_factory=dict)

    def problems(self) -> list[str]:
        return [] if self.bootstrap_servers else ["--bootstrap-server must not be empty"]

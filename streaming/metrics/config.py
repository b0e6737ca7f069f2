"""The metrics endpoint and what it exports: address, TLS, basic auth, granularity, series cap, static labels
and the families served."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from streaming.metrics.exposition import label_problem
from streaming.settings import Config, flag, positive, setting

# kafka_exporter owns 9308 and Prometheus' exporter registry has handed out 9100-9999; this
# port is outside both, so the monitor and kafka_exporter can share a host.
DEFAULT_METRICS_PORT = 10308
LAG_GRANULARITIES = ("partition", "topic")


@dataclass(frozen=True)
class MetricsConfig(Config):
    cluster: str = field(default="default", metadata=setting("value of the `cluster` label on every series"))
    host: str = field(default="0.0.0.0", metadata=setting("address of the /metrics endpoint",
                                                          flag="--metrics-host"))
    port: int = field(default=DEFAULT_METRICS_PORT, metadata=setting(
        "port of the /metrics endpoint (0: any free port; 9308 is kafka_exporter's)", flag="--metrics-port",
        type=int))
    tls_cert: Path | None = field(default=None, metadata=setting(
        "PEM certificate chain: serve /metrics over HTTPS (with --metrics-tls-key)", flag="--metrics-tls-cert",
        type=Path))
    tls_key: Path | None = field(default=None, metadata=setting(
        "PEM private key of --metrics-tls-cert", flag="--metrics-tls-key", type=Path))
    basic_auth_file: Path | None = field(default=None, metadata=setting(
        "file of user:hash lines (python -m streaming.metrics.server USER writes one): /metrics asks for "
        "HTTP basic auth", flag="--metrics-basic-auth-file", type=Path))
    lag_granularity: str = field(default="partition", metadata=setting(
        "lag series per partition, or summed per topic (far fewer series on wide topics)",
        choices=LAG_GRANULARITIES))
    member_labels: str = field(default="client", metadata=setting(
        "how member series tell members apart: client (client id, host and static instance id: a rejoin keeps "
        "its series, members sharing a client id and host are summed) or member (member id too: new series at "
        "every rejoin)", choices=("client", "member")))
    compat: str = field(default="none", metadata=setting(
        "kafka_exporter: also export kafka_exporter's consumer-group families (kafka_consumergroup_lag, _lag_sum, "
        "_current_offset, _current_offset_sum, _members with its consumergroup label; kafka_topic_partition_"
        "current_offset, _oldest_offset) so its dashboards and rules work unchanged; not beside a running "
        "kafka_exporter, or lag is counted twice", flag="--metrics-compat", choices=("none", "kafka_exporter")))
    max_series: int = field(default=2_000_000, metadata=setting(
        "most series /metrics serves; beyond it new series are dropped and counted", type=int))
    labels: tuple[str, ...] = field(default=(), metadata=setting(
        "KEY=VALUE: a label every series /metrics serves carries, after cluster (repeatable), for example "
        "env=prod; not a label the job's series have already (cluster, group, topic, partition, ...) nor __*",
        flag="--label", action="append"))
    allow: str | None = field(default=None, metadata=setting(
        "regex: serve only the metric families whose whole name matches (the name of their # TYPE line, "
        "counters with _total), HELP and TYPE included; every family when unset", flag="--metrics-allow"))
    deny: str | None = field(default=None, metadata=setting(
        "regex: leave out the metric families whose whole name matches, HELP and TYPE included; wins over "
        "--metrics-allow", flag="--metrics-deny"))

    def problems(self) -> list[str]:
        problems = positive(self, "max_series")
        if not 0 <= self.port <= 65535:
            problems.append(f"{flag(self, 'port')} must be 0-65535")
        if (self.tls_cert is None) != (self.tls_key is None):
            problems.append(f"{flag(self, 'tls_cert')} and {flag(self, 'tls_key')} go together")
        if self.compat not in ("none", "kafka_exporter"):
            problems.append(f"{flag(self, 'compat')} must be none or kafka_exporter")
        if self.member_labels not in ("client", "member"):
            problems.append(f"{flag(self, 'member_labels')} must be client or member")
        if self.lag_granularity not in LAG_GRANULARITIES:
            problems.append(f"{flag(self, 'lag_granularity')} must be one of {', '.join(LAG_GRANULARITIES)}")
        seen: set[str] = set()
        for item in self.labels:
            name, sep, _ = item.partition("=")
            problem = "expected KEY=VALUE" if not sep else label_problem(name)
            if problem is None and name in seen:
                problem = "given twice"
            seen.add(name)
            if problem is not None:
                problems.append(f"{flag(self, 'labels')} {name!r}: {problem}")
        for name in ("allow", "deny"):
            pattern = getattr(self, name)
            if pattern is not None:
                try:
                    re.compile(pattern)
                except re.error as exc:
                    problems.append(f"{flag(self, name)} {pattern!r} is not a valid regex: {exc}")
        return problems

    @property
    def static_labels(self) -> tuple[tuple[str, str], ...]:
        """--label as (name, value) pairs, in the order given."""
        return tuple((name, value) for name, _, value in (item.partition("=") for item in self.labels))

    @property
    def per_partition(self) -> bool:
        return self.lag_granularity == "partition"

"""The real job against a real SASL_SSL (SCRAM-SHA-512 over TLS) listener, run as an operator runs it.

The job is its own process (``python -m streaming.job``) so that every byte it writes, the JVM's
logging included, lands in one captured file that the secret grep can read; the broker is this
module's own, with a throwaway CA and SCRAM users made by Kafka's storage tool.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from base64 import b64encode
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from streaming.metrics.server import hash_password
from testbed.broker import LocalKafka
from testbed.workload import Admin, Member, start_members
from tests.support.monitor_helpers import JOB_START_TIMEOUT_S, wait_for_url

pytestmark = pytest.mark.slow

USER = "monitor"
PASSWORD = f"scram-{secrets.token_urlsafe(18)}"  # unique: any occurrence in an output is a leak
SCRAPE_USER = "prometheus"
SCRAPE_PASSWORD = f"scrape-{secrets.token_urlsafe(18)}"
WRONG_PASSWORD_BOUND_S = 60


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    broker = LocalKafka(tmp_path_factory.mktemp("kafka-sasl"), scram_users={USER: PASSWORD}, heap="512m")
    broker.start()
    yield broker
    broker.stop()


def job_command(broker: LocalKafka, workdir: Path, password: str, *extra: str,
                config_file: Path | None = None) -> list[str]:
    """The job's command line; the client settings as --kafka.* options, or in ``config_file``
    (--kafka-config, as the Helm chart and deploy/k8s mount them) when given."""
    options = broker.client_security_options(USER, password)
    if config_file is not None:
        config_file.write_text("".join(f"{name}={value}\n" for name, value in options.items()))
        settings = ["--kafka-config", str(config_file)]
    else:
        settings = [arg for name, value in options.items() for arg in (f"--kafka.{name}", value)]
    return [sys.executable, "-m", "streaming.job", "--bootstrap-server", broker.secure_bootstrap,
            "--checkpoint-dir", str(workdir / "checkpoint"), "--master", "local[2]", "--cluster", "secure",
            "--trigger-seconds", "1", "--lag-poll-seconds", "1",
            "--metrics-host", "127.0.0.1", "--metrics-port", "0", *extra, *settings]


def every_output(workdir: Path) -> dict[Path, bytes]:
    """Every file the run left: its captured stdout/stderr, checkpoint, event log, dead letters."""
    return {path: path.read_bytes() for path in sorted(workdir.rglob("*")) if path.is_file()}


def leaks(outputs: dict[Path, bytes] | dict[str, bytes], *secret_values: str) -> list[str]:
    return [f"{name} holds {secret[:8]}..." for name, data in outputs.items()
            for secret in secret_values if secret.encode() in data]


def test_job_reads_through_sasl_ssl_and_no_secret_appears(secure_broker: LocalKafka, tmp_path: Path) -> None:
    """Spark's source and the lag poller both connect through the client settings of a --kafka-config
    file (SCRAM credentials in the JAAS config, the CA as a PEM trust store), as the Helm chart runs
    the job; /metrics is served over TLS behind basic auth; neither password shows in any output of
    the run. The --kafka.* route is the wrong-password test's other case."""
    admin = Admin(secure_broker.bootstrap)  # the groups are made over plaintext, as any client would
    members: list[Member] = []
    workdir = tmp_path / "run"
    workdir.mkdir()
    pki = secure_broker.pki
    assert pki is not None
    credentials = workdir / "metrics-users"
    credentials.write_text(f"{SCRAPE_USER}:{hash_password(SCRAPE_PASSWORD)}\n")
    kafka_config = workdir / "kafka.properties"
    options_file = workdir / "rebalance-monitor.toml"  # --config: JSON log lines, the cluster's name
    options_file.write_text('log-format = "json"\ncluster = "secure-from-file"\n')
    output = workdir / "job-output.log"
    job = None
    try:
        admin.create_topic("secured-orders", 2)
        admin.produce("secured-orders", 40)
        admin.commit("secured-committer", {("secured-orders", 0): 3, ("secured-orders", 1): 5})
        members.extend(start_members([Member(secure_broker.bootstrap, "secured-group", ["secured-orders"], "c1")]))
        ends = admin.end_offsets([("secured-orders", 0), ("secured-orders", 1)])

        with output.open("wb") as sink:
            job = subprocess.Popen(job_command(secure_broker, workdir, PASSWORD, "--metrics-tls-cert",
                                               str(pki.cert_pem), "--metrics-tls-key", str(pki.key_pem),
                                               "--metrics-basic-auth-file", str(credentials),
                                               "--config", str(options_file), config_file=kafka_config),
                                   cwd=workdir, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
        started = time.monotonic()
        url = wait_for_url(job, output)
        print(f"\nSASL_SSL job serving after {time.monotonic() - started:.1f}s")
        assert url.startswith("https://127.0.0.1:")
        context = ssl.create_default_context(cafile=str(pki.ca_pem))
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url, timeout=10, context=context)
        assert refused.value.code == 401

        def scrape() -> tuple[str, dict[tuple[str, frozenset[tuple[str, str]]], float]]:
            token = b64encode(f"{SCRAPE_USER}:{SCRAPE_PASSWORD}".encode()).decode()
            request = urllib.request.Request(url, headers={"Authorization": f"Basic {token}"})
            text = urllib.request.urlopen(request, timeout=10, context=context).read().decode()
            return text, {(s.name, frozenset(s.labels.items())): s.value
                          for family in text_string_to_metric_families(text) for s in family.samples}

        def found(samples: dict, name: str, **labels: str) -> list[float]:
            return [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls]

        def wait_until(check: Callable[[dict], bool], what: str) -> tuple[str, dict]:
            deadline = time.monotonic() + JOB_START_TIMEOUT_S
            while time.monotonic() < deadline and job.poll() is None:
                text, samples = scrape()
                if check(samples):
                    return text, samples
                time.sleep(1)
            tail = output.read_text(errors="replace")[-3000:]
            pytest.fail(f"{what} did not come through SASL_SSL (job exit {job.poll()}):\n{tail}")

        expected_lag = {p: [float(ends[("secured-orders", p)] - committed)] for p, committed in ((0, 3), (1, 5))}
        wait_until(lambda s: found(s, "kafka_consumergroup_current_members", group="secured-group") == [1.0] and {
            p: found(s, "kafka_consumergroup_partition_lag", group="secured-committer", partition=str(p))
            for p in (0, 1)
        } == expected_lag, "group and lag series")
        print(f"group and exact lag series after {time.monotonic() - started:.1f}s")
        # A second member: a rebalance, so the event log has a row to check for secrets too.
        members.extend(start_members([Member(secure_broker.bootstrap, "secured-group", ["secured-orders"], "c2")]))
        text, samples = wait_until(
            lambda s: found(s, "kafka_consumergroup_current_members", group="secured-group") == [2.0]
            and found(s, "kafka_consumergroup_rebalances_total", group="secured-group") >= [1.0], "a rebalance")
        print(f"second member's rebalance after {time.monotonic() - started:.1f}s")
        # Both clients got in: Spark's source (group records decoded) and the poller (log ends).
        assert found(samples, "kafka_consumergroup_generation", group="secured-group")[0] >= 1
        # --cluster on the command line wins over the --config file's cluster.
        assert found(samples, "kafka_consumergroup_generation", group="secured-group", cluster="secure")
        assert found(samples, "kafka_topic_partition_log_end_offset", topic="secured-orders", partition="0") == [
            float(ends[("secured-orders", 0)])]
        assert not [v for v in found(samples, "rebalance_monitor_log_end_poll_errors_total") if v > 0]
        (workdir / "metrics.txt").write_text(text)  # the scrape is one more output to grep
    finally:
        for member in members:
            member.leave()
        admin.close()
        if job is not None and job.poll() is None:
            job.send_signal(signal.SIGTERM)
            job.wait(90)
    assert job.returncode == 0, output.read_text(errors="replace")[-3000:]
    outputs = every_output(workdir)
    log_text = output.read_text(errors="replace")
    assert re.search(r"batch \d+: \d+ records", log_text), "no progress line reached the captured output"
    # --log-format json from the --config file: the job's own lines are JSON objects (the JVM's are not).
    entries = [json.loads(line) for line in log_text.splitlines() if line.startswith('{"time"')]
    assert any(re.match(r"batch \d+: \d+ records", e["message"]) for e in entries), log_text[-2000:]
    assert all(e.keys() >= {"time", "level", "logger", "message"} for e in entries)
    assert not re.search(r"^\d{4}-\d\d-\d\d [\d:,]+ (DEBUG|INFO|WARNING|ERROR) ", log_text, re.M), "a text log line"
    assert any("/events/" in str(path) for path in outputs), "no event log file to check"
    outputs.pop(credentials)  # holds the scrape password's hash by design, never the password
    outputs.pop(kafka_config)  # the operator's input: it holds the password by design
    assert not leaks(outputs, PASSWORD, SCRAPE_PASSWORD), leaks(outputs, PASSWORD, SCRAPE_PASSWORD)
    print(f"no secret in {len(outputs)} files, {sum(map(len, outputs.values()))} bytes "
          f"({len(log_text.splitlines())} lines of job output)")


@pytest.mark.parametrize("route", ["options", "config-file"])
def test_wrong_password_fails_fast_naming_authentication(secure_broker: LocalKafka, tmp_path: Path,
                                                         route: str) -> None:
    """A refused login stops the job before Spark starts, with the cause named and no secret shown,
    whether the settings come as --kafka.* options or in a --kafka-config file."""
    wrong = f"wrong-{secrets.token_urlsafe(18)}"
    output = tmp_path / "job-output.log"
    config_file = tmp_path / "secret" / "kafka.properties" if route == "config-file" else None
    if config_file is not None:
        config_file.parent.mkdir()
    started = time.monotonic()
    with output.open("wb") as sink:
        job = subprocess.Popen(job_command(secure_broker, tmp_path, wrong, config_file=config_file), cwd=tmp_path,
                               stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        job.wait(WRONG_PASSWORD_BOUND_S)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(30)
        pytest.fail(f"still running after {WRONG_PASSWORD_BOUND_S}s:\n{output.read_text(errors='replace')[-4000:]}")
    seconds = time.monotonic() - started
    raw = output.read_bytes()
    message = raw.decode(errors="replace")
    print(f"wrong password: exit {job.returncode} after {seconds:.1f}s")
    assert job.returncode != 0
    assert seconds < WRONG_PASSWORD_BOUND_S
    last = message.strip().splitlines()[-1]
    assert last.startswith("rebalance-monitor: Kafka at ") and "authentication failed" in last, last
    assert not leaks({"stdout+stderr": raw}, wrong, PASSWORD)
    assert not (tmp_path / "checkpoint").exists()  # refused before anything was set up

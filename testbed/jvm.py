"""Locate (and on first use fetch through Maven) the JVM jars the project runs on.

The versions live only in deploy/jvm/pom.xml; KAFKA_VERSION in the environment picks
another Kafka release (e.g. 3.9.2) for the broker and Kafka's tools. Spark's connector follows
the pyspark installed in the virtualenv, which ``SPARK_VERSION=... make setup`` chooses.
"""

from __future__ import annotations

import os
import re
import subprocess
from importlib.metadata import version as installed_version
from pathlib import Path

from streaming.jars import CHECKOUT_JARS, connector_jars

PROJECT_ROOT = Path(__file__).resolve().parent.parent
POM = PROJECT_ROOT / "deploy" / "jvm" / "pom.xml"
MAVEN_SETTINGS = PROJECT_ROOT / "deploy" / "jvm" / "settings.xml"
JARS_ROOT = CHECKOUT_JARS


def pom_property(name: str) -> str:
    match = re.search(rf"<{re.escape(name)}>([^<]+)</{re.escape(name)}>", POM.read_text())
    if not match:
        raise RuntimeError(f"{POM} has no <{name}> property")
    return match.group(1).strip()


def kafka_version() -> str:
    return os.environ.get("KAFKA_VERSION") or pom_property("kafka.version")


def spark_version() -> str:
    """The installed pyspark's version; SPARK_VERSION, when set, must name it.

    The Python side cannot be switched per run as the broker can: each Spark line has its own
    virtualenv (see the Makefile), so a mismatch means the wrong interpreter runs the suite.
    """
    installed = installed_version("pyspark")
    wanted = os.environ.get("SPARK_VERSION")
    if wanted and wanted != installed:
        venv = ".venv" if wanted == pom_property("spark.version") else f".venv-spark-{wanted}"
        raise RuntimeError(
            f"SPARK_VERSION={wanted} but this interpreter has pyspark {installed}: "
            f"run `SPARK_VERSION={wanted} make setup` and use {venv}/bin/python"
        )
    return installed


def _resolve(profile: str, out: Path, extra: list[str]) -> Path:
    """Copy a profile's dependency closure into ``out`` unless a complete copy is there."""
    marker = out / ".complete"
    if marker.exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    cmd = [
        "mvn", "-q", "-B", "-s", str(MAVEN_SETTINGS), "-f", str(POM), "-P", profile, *extra,
        "dependency:copy-dependencies", f"-DoutputDirectory={out}",
    ]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"Maven could not resolve the {profile} jars:\n{result.stdout[-4000:]}")
    marker.touch()
    return out


def kafka_jars(version: str | None = None) -> Path:
    """Directory holding the Kafka broker, its tools and a logging backend."""
    version = version or kafka_version()
    return _resolve("broker", JARS_ROOT / f"kafka-{version}", [f"-Dkafka.version={version}"])


def kafka_streams_jars(version: str | None = None) -> Path:
    """Directory holding Kafka Streams (4.x; the streams-group scenario), used beside :func:`kafka_jars`."""
    version = version or kafka_version()
    return _resolve("streams", JARS_ROOT / f"kafka-streams-{version}", [f"-Dkafka.version={version}"])


def spark_connector_dir() -> Path:
    """Resolve the connector for the installed pyspark through Maven into build/jars (``make setup``)."""
    version = spark_version()
    return _resolve("spark", JARS_ROOT / f"spark-{version}", [f"-Dspark.version={version}"])


def spark_connector_jars() -> list[Path]:
    """The jars the job loads (``streaming.jars`` filters pyspark's own), fetched if missing."""
    return connector_jars(spark_connector_dir())


def oracle_kafka_versions() -> list[str]:
    """The Kafka releases whose own classes the tests use as oracles, whatever broker runs."""
    return [pom_property("kafka.version"), pom_property("kafka3.version")]


def main() -> None:
    """``python -m testbed.jvm``: fetch every jar set the project uses."""
    for version in dict.fromkeys([kafka_version(), *oracle_kafka_versions()]):
        print(f"kafka {version}: {kafka_jars(version)}")
    print(f"spark connector {spark_version()}: {len(spark_connector_jars())} jars")


if __name__ == "__main__":
    main()

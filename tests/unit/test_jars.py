"""Connector jars come from a named directory, never from Maven or the test bed at run time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from streaming.jars import ENV_VAR, JarsNotFound, artifact, connector_jars, pyspark_jars, pyspark_version
from testbed.jvm import spark_connector_dir


@pytest.fixture(scope="module")
def built() -> Path:
    """The directory `make setup` fills (resolved here if a test run starts without it)."""
    return spark_connector_dir()


def test_connector_and_its_own_dependencies_only(built: Path) -> None:
    jars = connector_jars(built)
    names = {artifact(p.name) for p in jars}
    assert f"spark-sql-kafka-0-10_2.13-{pyspark_version()}.jar" in {p.name for p in jars}
    assert "kafka-clients" in names
    shipped = {artifact(p.name) for p in pyspark_jars().glob("*.jar")}
    assert not names & shipped, "jars pyspark already has must not be loaded twice"
    assert all(p.parent == built for p in jars)


def test_directory_from_the_environment(built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, str(built))
    assert connector_jars(None) == connector_jars(built)
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "missing"))
    with pytest.raises(JarsNotFound, match=f"does not exist: pass --jars-dir DIR or set {ENV_VAR}"):
        connector_jars(None)


def test_connector_for_another_spark_is_refused(built: Path, tmp_path: Path) -> None:
    for jar in built.glob("*.jar"):
        name = jar.name.replace(f"_2.13-{pyspark_version()}.jar", "_2.13-3.5.1.jar")
        (tmp_path / name).symlink_to(jar)
    with pytest.raises(JarsNotFound, match=r"no spark-sql-kafka-0-10 jar for Spark .* \(found: spark-sql-kafka"):
        connector_jars(tmp_path)


def test_command_prints_the_spark_submit_list(built: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "streaming.jars", str(built)], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out.split(",") == [str(p) for p in connector_jars(built)]
    failed = subprocess.run([sys.executable, "-m", "streaming.jars", "/nonexistent"], capture_output=True, text=True)
    assert failed.returncode == 1 and "--jars-dir" in failed.stderr

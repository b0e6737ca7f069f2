"""The driver JVM exits at its first OutOfMemoryError, whatever else the operator gives it."""

from __future__ import annotations

import pytest

from streaming.driver.config import DRIVER_JAVA_OPTIONS, EXIT_ON_OOM, driver_java_options
from streaming.options import parse_args


@pytest.mark.parametrize(("configured", "expected"), [
    (None, EXIT_ON_OOM),
    ("", EXIT_ON_OOM),
    ("-Xss4m -Da=b", f"{EXIT_ON_OOM} -Xss4m -Da=b"),
    # The operator's own choice either way stays theirs, alone.
    ("-XX:-ExitOnOutOfMemoryError", "-XX:-ExitOnOutOfMemoryError"),
    ("-Xss4m -XX:+CrashOnOutOfMemoryError", "-Xss4m -XX:+CrashOnOutOfMemoryError"),
])
def test_exit_on_oom_is_merged_with_the_operators_options(configured: str | None, expected: str) -> None:
    assert driver_java_options(configured) == expected


def built_conf(monkeypatch: pytest.MonkeyPatch, argv: list[str],
               extra_conf: dict[str, str] | None = None) -> dict[str, str]:
    """What spark_session gives the session builder (before any JVM starts)."""
    import pyspark.sql

    from streaming import job

    seen: dict[str, str] = {}

    class Builder:
        def appName(self, _name: str) -> Builder:
            return self

        def master(self, _master: str) -> Builder:
            return self

        def config(self, key: str, value: str) -> Builder:
            seen[key] = value
            return self

        def getOrCreate(self) -> object:
            raise RuntimeError("built")

    monkeypatch.setattr(pyspark.sql.SparkSession, "builder", Builder())
    monkeypatch.setattr(job, "connector_jars", lambda _dir: [])
    with pytest.raises(RuntimeError, match="built"):
        job.spark_session(parse_args(["--bootstrap-server", "b", *argv], environ={}), extra_conf)
    return seen


def test_the_session_exits_on_oom_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    assert built_conf(monkeypatch, [])[DRIVER_JAVA_OPTIONS] == EXIT_ON_OOM


def test_the_operators_java_options_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    conf = built_conf(monkeypatch, ["--spark-conf", "spark.driver.extraJavaOptions=-Xss4m -Da=b"],
                      {DRIVER_JAVA_OPTIONS: "-Dfrom.extra=1"})
    assert conf[DRIVER_JAVA_OPTIONS] == f"{EXIT_ON_OOM} -Xss4m -Da=b"  # --spark-conf over extra_conf, as before
    conf = built_conf(monkeypatch, [], {DRIVER_JAVA_OPTIONS: "-Dfrom.extra=1"})
    assert conf[DRIVER_JAVA_OPTIONS] == f"{EXIT_ON_OOM} -Dfrom.extra=1"

"""The driver JVM exits at its first OutOfMemoryError, whatever else the operator gives it, and maps the class
archive when there is one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from streaming import class_archive
from streaming.driver.config import DRIVER_JAVA_OPTIONS, EXIT_ON_OOM, driver_java_options
from streaming.options import parse_args
from tests.support.fault_helpers import REPO


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


def built_conf(monkeypatch: pytest.MonkeyPatch, argv: list[str], extra_conf: dict[str, str] | None = None,
               archive: Path = Path("/nonexistent/spark.jsa")) -> dict[str, str]:
    """What spark_session gives the session builder (before any JVM starts); ``archive``: the class archive."""
    import pyspark.sql

    from streaming import job

    monkeypatch.setenv(class_archive.ENV_VAR, str(archive))

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


def test_the_class_archive_is_mapped_when_there_is_one(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    archive = tmp_path / "spark.jsa"
    archive.write_bytes(b"")
    assert built_conf(monkeypatch, [], archive=archive)[DRIVER_JAVA_OPTIONS] == (
        f"{EXIT_ON_OOM} -XX:SharedArchiveFile={archive}")
    # The operator's own sharing choice stays theirs, and one the operator names but is not there is left out.
    conf = built_conf(monkeypatch, ["--spark-conf", "spark.driver.extraJavaOptions=-Xshare:off"], archive=archive)
    assert conf[DRIVER_JAVA_OPTIONS] == f"{EXIT_ON_OOM} -Xshare:off"
    assert built_conf(monkeypatch, [], archive=tmp_path / "gone.jsa")[DRIVER_JAVA_OPTIONS] == EXIT_ON_OOM


@pytest.mark.slow
def test_the_session_jvm_maps_the_archive_make_setup_wrote(spark: object) -> None:
    """The session every test shares started with the archive (``make setup`` wrote it) and kept it mapped: a JVM
    that finds it unusable unmaps it and starts without."""
    from tests.conftest import missing

    archive = class_archive.default_path()
    if os.environ.get(class_archive.ENV_VAR) or not archive.is_file():
        missing(f"no class archive at {archive}: `make setup` writes it")
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()  # type: ignore[attr-defined]
    assert str(archive) in Path(f"/proc/{pid}/maps").read_text()


# Run in a process of its own (the builder starts and stops a JVM): the check is given a truncated copy of what the
# JVM wrote, with the training left out.
TRUNCATED_CHECK = """
import subprocess, sys
from pathlib import Path
from streaming import class_archive
real_run = subprocess.run
def check_a_truncated_copy(argv, **kwargs):
    written = Path(next(a for a in argv if a.startswith("-XX:SharedArchiveFile=")).split("=", 1)[1])
    truncated = written.with_suffix(".cut")
    truncated.write_bytes(written.read_bytes()[:written.stat().st_size // 3])
    return real_run([a.replace(str(written), str(truncated)) for a in argv], **kwargs)
class_archive.subprocess.run = check_a_truncated_copy
class_archive._train = lambda spark, workdir: None
class_archive.build(Path(sys.argv[1]))
"""


@pytest.mark.slow
def test_a_truncated_archive_is_never_put_in_place(tmp_path: Path) -> None:
    """A JVM mapping a truncated archive dies (SIGBUS in JDK 17): the builder checks what the JVM wrote before moving
    it where the job looks."""
    target = tmp_path / "spark.jsa"
    result = subprocess.run([sys.executable, "-c", TRUNCATED_CHECK, str(target)], cwd=REPO, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode != 0 and "does not load" in result.stderr, result.stderr[-2000:]
    assert not target.exists()

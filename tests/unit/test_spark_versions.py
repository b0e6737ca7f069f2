"""Each supported Spark line is pinned once, consistently, and selected by SPARK_VERSION.

The default line is deploy/jvm/pom.xml's spark.version, which pyproject.toml pins; every other
line has a pins file in deploy/python that the Makefile installs into a virtualenv of its own.
A pins file or a pyproject pin that drifts from the rest would install a pyspark whose connector
jars nobody resolved, which the job then refuses at start-up.
"""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from testbed.jvm import PROJECT_ROOT, pom_property, spark_version

PINS_DIR = PROJECT_ROOT / "deploy" / "python"
SPARK_SIDE = ("pyspark", "py4j", "pyarrow", "pandas")


def pins(lines: list[str]) -> dict[str, str]:
    """``name==version`` requirements (comments and blank lines skipped) as a dict."""
    found = (re.fullmatch(r"([A-Za-z0-9_.\-]+)==(\S+)", line.split("#")[0].strip()) for line in lines)
    return {m.group(1).lower(): m.group(2) for m in found if m}


def pins_files() -> dict[str, Path]:
    return {p.stem.removeprefix("spark-"): p for p in sorted(PINS_DIR.glob("spark-*.txt"))}


def test_pyproject_pins_the_pom_spark_line() -> None:
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]
    pinned = pins(project["dependencies"])
    default = pom_property("spark.version")
    assert pinned["pyspark"] == default
    assert default in pins_files(), "the default line needs a pins file too (SPARK_VERSION=default is valid)"
    default_pins = pins(pins_files()[default].read_text().splitlines())
    for name in default_pins.keys() & pinned.keys():
        assert default_pins[name] == pinned[name], f"{name}: pyproject.toml and deploy/python disagree"


@pytest.mark.parametrize("line", sorted(pins_files()))
def test_pins_file_names_its_own_line(line: str) -> None:
    pinned = pins(pins_files()[line].read_text().splitlines())
    assert sorted(pinned) == sorted(SPARK_SIDE)
    assert pinned["pyspark"] == line


def test_spark_version_must_match_the_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARK_VERSION", raising=False)
    installed = spark_version()
    monkeypatch.setenv("SPARK_VERSION", installed)
    assert spark_version() == installed
    monkeypatch.setenv("SPARK_VERSION", "3.9.9")
    with pytest.raises(RuntimeError, match=r"SPARK_VERSION=3\.9\.9 .* use \.venv-spark-3\.9\.9/bin/python"):
        spark_version()


def make(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["make", "--no-print-directory", "-C", str(PROJECT_ROOT), *args],
                          capture_output=True, text=True)


def test_makefile_installs_another_line_in_its_own_venv() -> None:
    others = sorted(set(pins_files()) - {pom_property("spark.version")})
    assert others, "at least one non-default Spark line stays testable"
    line = others[0]
    dry = make("-n", "-B", f"SPARK_VERSION={line}", f".venv-spark-{line}/.installed")
    assert dry.returncode == 0, dry.stderr
    assert f"-m venv .venv-spark-{line}" in dry.stdout
    assert f"--no-deps --no-warn-conflicts -r deploy/python/spark-{line}.txt" in dry.stdout


def test_makefile_refuses_an_unknown_line() -> None:
    result = make("SPARK_VERSION=3.9.9", "deploy/python/spark-3.9.9.txt")
    assert result.returncode != 0
    assert "SPARK_VERSION=3.9.9 is not a supported Spark line; supported:" in result.stderr
    assert all(line in result.stderr for line in pins_files())

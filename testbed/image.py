"""The container image deploy/Dockerfile builds, named by what it is built from, and run as
deploy/k8s/deployment.yaml runs it; shared by ``make image``, tests/scenarios/test_image.py and
benchmarks/image_run.py.

``make image`` tags the image it builds ``kafka-rebalance-monitor:inputs-<hash>``, the hash of every
file that goes into it (the Dockerfile, its ignore file, deploy/image/base.sh and the build context
the ignore file lets through), and builds again only when podman's store has no image of that tag:
a changed Dockerfile or source file is a new tag. Standard library only: ``make image`` runs
``python3 -m testbed.image inputs-tag`` (or ``base-tag``) before any virtualenv exists.

Every podman command here runs with ``CONTAINERS_CONF`` naming deploy/image/containers.conf when
the environment names none, as the Makefile does (runc, and open-file and process limits a
container may set where the hard limits are low).
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
IGNOREFILE = ROOT / "deploy" / "Dockerfile.dockerignore"
BASE_SCRIPT = ROOT / "deploy" / "image" / "base.sh"
CONTAINERS_CONF = ROOT / "deploy" / "image" / "containers.conf"
REPOSITORY = "localhost/kafka-rebalance-monitor"
BASE_REPOSITORY = "localhost/rebalance-monitor-base"

# What deploy/k8s/deployment.yaml sets beside its arguments.
ENV = {"HOME": "/tmp", "SPARK_LOCAL_DIRS": "/tmp/spark", "PYSPARK_SUBMIT_ARGS": "--driver-memory 1536m pyspark-shell"}
USER = 1000  # the image's user, who writes the checkpoint


def _context_patterns() -> tuple[list[str], list[str]]:
    """The ignore file's allow-list (``!path``) and its other exclusions, as written there: it
    ignores everything (``*``) and lets through named files and directories."""
    allowed, excluded = [], []
    for line in IGNOREFILE.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#") or line == "*":
            continue
        if line.startswith("!"):
            allowed.append(line[1:].rstrip("/"))
        else:
            excluded.append(line.removeprefix("**/").rstrip("/"))
    return allowed, excluded


def context_files() -> Iterator[Path]:
    """The build context's files as the ignore file lets them through, sorted."""
    allowed, excluded = _context_patterns()
    found: set[Path] = set()
    for entry in allowed:
        path = ROOT / entry
        candidates = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for candidate in candidates:
            parts = candidate.relative_to(ROOT).parts
            if not any(fnmatch.fnmatch(part, pattern) for part in parts for pattern in excluded) \
                    and candidate.suffix != ".pyc":
                found.add(candidate)
    yield from sorted(found)


def _digest(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


def inputs_hash() -> str:
    """The hash of every file the image is built from: a change to any of them is a new image."""
    return _digest([DOCKERFILE, IGNOREFILE, BASE_SCRIPT, *context_files()])


def inputs_tag() -> str:
    """The image built from this checkout's inputs, as ``make image`` tags it."""
    return f"{REPOSITORY}:inputs-{inputs_hash()}"


def base_tag() -> str:
    """The debootstrapped base deploy/image/base.sh imports, tagged by the script's own hash."""
    return f"{BASE_REPOSITORY}:bookworm-{_digest([BASE_SCRIPT])}"


def podman_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("CONTAINERS_CONF", str(CONTAINERS_CONF))
    return env


def podman(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, check=check, timeout=timeout,
                          env=podman_env())


def image_exists(image: str) -> bool:
    return podman("image", "exists", image, check=False).returncode == 0


def http_get(url: str) -> tuple[int, bytes]:
    """The status and body of one of the job's endpoints; 0 while nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, b""
    except OSError:
        return 0, b""


def job_args(bootstrap: str, checkpoint: str, port: int, cluster: str = "demo") -> list[str]:
    """deploy/k8s/deployment.yaml's arguments, its Secret's settings file left out (a plaintext broker)."""
    return ["run", "--bootstrap-server", bootstrap, "--cluster", cluster, "--checkpoint-dir", checkpoint,
            "--metrics-host", "127.0.0.1", "--metrics-port", str(port), "--master", "local[2]",
            "--spark-conf", "spark.local.dir=/tmp/spark"]


@dataclass
class Container:
    """One container of the image run as deploy/k8s/deployment.yaml runs it: host network, read-only
    root filesystem with a tmpfs /tmp, user 1000, every capability dropped, ``data`` on /data."""

    image: str
    name: str
    data: Path
    args: list[str]

    @classmethod
    def deployed(cls, image: str, name: str, workdir: Path, bootstrap: str, port: int,
                 cluster: str = "demo") -> Container:
        """The job against ``bootstrap`` serving on ``port``, its checkpoint in ``workdir``/data."""
        data = workdir / "data"
        data.mkdir()
        os.chown(data, USER, USER)
        return cls(image, name, data, job_args(bootstrap, "/data/checkpoint", port, cluster))

    def command(self) -> list[str]:
        return ["podman", "run", "-d", "--name", self.name, "--network", "host", "--read-only",
                # Spark unpacks and loads native libraries (snappy, zstd) from its scratch space.
                "--tmpfs", "/tmp:rw,exec,nosuid,nodev,mode=1777", "-v", f"{self.data}:/data",
                "--user", f"{USER}:{USER}", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
                "-w", "/tmp", *(f"--env={k}={v}" for k, v in ENV.items()), self.image, *self.args]

    def start(self) -> None:
        result = subprocess.run(self.command(), capture_output=True, text=True, timeout=300, env=podman_env())
        if result.returncode != 0:
            raise RuntimeError(f"podman run {self.image} failed ({result.returncode}): "
                               f"{result.stderr.strip()}\n{self.logs()}")

    def pid(self) -> int:
        """The container's first process on this host."""
        return int(podman("inspect", "--format", "{{.State.Pid}}", self.name).stdout.strip())

    def state(self) -> str:
        """``running``, ``exited`` (with its exit code), or why podman cannot tell."""
        result = podman("inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", self.name, check=False)
        if result.returncode != 0:
            return f"unknown ({result.stderr.strip()})"
        status, code = result.stdout.split()
        return status if status == "running" else f"{status}, exit code {code}"

    def logs(self, tail: int = 60) -> str:
        result = podman("logs", "--tail", str(tail), self.name, check=False)
        return f"--- last {tail} lines of {self.name}'s log ---\n{result.stdout}{result.stderr}"

    def remove(self) -> None:
        podman("stop", "-t", "30", self.name, check=False)
        podman("rm", "-f", self.name, check=False)


def main(argv: list[str] | None = None) -> None:
    commands = {"inputs-tag": inputs_tag, "base-tag": base_tag}
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] not in commands:
        sys.exit(f"usage: python3 -m testbed.image {{{','.join(commands)}}}")
    print(commands[args[0]]())


if __name__ == "__main__":
    main()

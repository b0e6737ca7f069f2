"""The container image run as deploy/k8s runs it, against a local broker with the demo groups.

Each run starts a fresh container with podman on a new checkpoint: host network, read-only root
filesystem with a tmpfs /tmp, user 1000, every capability dropped, the manifest's arguments and
environment. It is timed from ``podman run`` to ``/-/ready`` answering 200, then ``/metrics`` must
show every demo group; the RSS summed over the container's processes is sampled every 0.5 s until
then and through a settle period of steady batches. ``--checkout`` runs the same job from this
checkout beside it, the container's overhead. The image's size is read from podman's store and, as a
registry stores it, from a gzip-compressed copy. Medians over ``--repeats``.
Run: ``python -m benchmarks.image_run [--image NAME] [--repeats 3] [--checkout]`` (make bench-image).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

from benchmarks.procfs import tree_rss
from testbed.broker import LocalKafka, free_port
from testbed.demo import GROUPS, Demo
from testbed.image import ENV, Container, http_get, job_args, podman

MIB = 1024 * 1024


@dataclass
class Run:
    ready: float  # start to /-/ready 200
    groups: float  # start to every demo group on /metrics
    peak_rss: int


def watch(start: Callable[[], Callable[[], int]], port: int, settle: float, timeout: float) -> Run:
    """``start()`` launches the job and returns how to find its root process; time it to ready and
    to every demo group, peak RSS until ``settle`` seconds after that."""
    base = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    root_pid = start()
    peak, stop = [0], threading.Event()

    def sample() -> None:
        pid = 0
        while not stop.wait(0.5):
            try:
                pid = pid or root_pid()
            except (subprocess.CalledProcessError, ValueError):
                continue
            peak[0] = max(peak[0], tree_rss(pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    ready = groups = 0.0
    wanted = [f'group="{group}"'.encode() for group in GROUPS]
    while not groups:
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"{timeout}s: ready after {ready:.1f}s, demo groups not all shown")
        if not ready and http_get(f"{base}/-/ready")[0] == 200:
            ready = time.monotonic() - started
        if ready:
            status, body = http_get(f"{base}/metrics")
            if status == 200 and all(group in body for group in wanted):
                groups = time.monotonic() - started
        time.sleep(0.25)
    time.sleep(settle)
    stop.set()
    sampler.join(2)
    return Run(ready, groups, peak[0])


def run_container(image: str, bootstrap: str, workdir: Path, settle: float, timeout: float) -> Run:
    port = free_port()
    container = Container.deployed(image, f"rebalance-monitor-bench-{os.getpid()}-{workdir.name}", workdir,
                                   bootstrap, port)

    def start() -> Callable[[], int]:
        container.start()
        return container.pid

    try:
        return watch(start, port, settle, timeout)
    except BaseException:
        print(container.logs(40), file=sys.stderr)
        raise
    finally:
        container.remove()


def run_checkout(bootstrap: str, workdir: Path, settle: float, timeout: float) -> Run:
    port = free_port()
    command = [sys.executable, "-m", "streaming.cli", *job_args(bootstrap, str(workdir / "checkpoint"), port)]
    env = {**os.environ, **ENV, "HOME": str(workdir), "SPARK_LOCAL_DIRS": str(workdir / "spark")}
    log = (workdir / "job.log").open("w")
    process: list[subprocess.Popen[bytes]] = []

    def start() -> Callable[[], int]:
        process.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=workdir,
                                        start_new_session=True))
        return lambda: process[0].pid

    try:
        return watch(start, port, settle, timeout)
    finally:
        if process:
            process[0].terminate()
            process[0].wait(60)
        log.close()


def image_sizes(image: str, workdir: Path) -> tuple[int, int]:
    """Bytes in podman's store, and the gzip-compressed layers a registry would hold."""
    size = int(podman("image", "inspect", "--format", "{{.Size}}", image).stdout)
    copy = workdir / "compressed"
    podman("push", "--compress", "--compression-format", "gzip", image, f"dir:{copy}", timeout=1800)
    manifest = json.loads((copy / "manifest.json").read_text())
    return size, sum(layer["size"] for layer in manifest["layers"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.image_run", description=__doc__)
    parser.add_argument("--image", default=f"kafka-rebalance-monitor:{version('kafka-rebalance-monitor')}")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--checkout", action="store_true", help="also run the job from this checkout, each round")
    parser.add_argument("--settle", type=float, default=30.0, help="seconds of RSS sampling after the groups show")
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="image-run-") as tmp:
        root = Path(tmp)
        root.chmod(0o755)  # the container's user reaches its data directory through it
        size, compressed = image_sizes(args.image, root)
        print(f"{args.image}: {size / MIB:.0f} MiB in podman's store, {compressed / MIB:.0f} MiB gzip-compressed",
              flush=True)
        broker = LocalKafka(root / "broker", port=free_port())
        print(f"broker ready in {broker.start():.1f}s", flush=True)
        demo = Demo(broker.bootstrap)
        try:
            demo.start()
            time.sleep(20)  # every demo group has joined and committed
            runs: dict[str, list[Run]] = {"image": [], "checkout": []}
            for i in range(args.repeats):
                kinds = ["image", "checkout"] if args.checkout else ["image"]
                for kind in kinds:
                    workdir = root / f"{kind}-{i}"
                    workdir.mkdir()
                    run = (run_container(args.image, broker.bootstrap, workdir, args.settle, args.timeout)
                           if kind == "image" else run_checkout(broker.bootstrap, workdir, args.settle, args.timeout))
                    runs[kind].append(run)
                    print(f"{kind} run {i + 1}: ready {run.ready:.1f}s, every demo group {run.groups:.1f}s, "
                          f"peak RSS {run.peak_rss / MIB:.0f} MiB", flush=True)
            for kind, done in runs.items():
                if done:
                    print(f"{kind}, median of {len(done)}: ready {statistics.median(r.ready for r in done):.1f}s, "
                          f"every demo group {statistics.median(r.groups for r in done):.1f}s, "
                          f"peak RSS {statistics.median(r.peak_rss for r in done) / MIB:.0f} MiB", flush=True)
        finally:
            demo.stop()
            broker.stop()


if __name__ == "__main__":
    main()

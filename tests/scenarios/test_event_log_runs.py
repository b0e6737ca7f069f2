"""The event log across checkpoints, end to end: real broker, real members, the job as a process.

Deleting Spark's checkpoint (``CHECKPOINT_DIR/spark``) makes the next start read the offsets topic
from the beginning again: its uncompacted tail still holds the rebalances the first run logged, and
they are logged again. The new run must not overwrite the first run's files (its batch ids start at
0 again), and ``rebalance-monitor history`` must give each rebalance once.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from testbed.workload import Member, start_members, wait_balanced, wait_until
from tests.support.fault_helpers import REPO, JobProcess

pytestmark = pytest.mark.slow


def _rows_on_disk(job: JobProcess, group: str) -> dict[str, int]:
    """Rows logged for ``group`` per run directory, duplicates included (what the files hold)."""
    rows: dict[str, int] = {}
    for path in job.event_log.files():
        groups = pq.ParquetFile(path).read(columns=["group"]).column("group").to_pylist()
        rows[path.parent.name] = rows.get(path.parent.name, 0) + groups.count(group)
    return rows


def test_a_new_spark_checkpoint_logs_a_new_run_and_history_counts_each_rebalance_once(
        kafka_broker, admin, members, unique, tmp_path) -> None:
    group, topic = f"runs-{unique}", f"runs-{unique}-t"
    admin.create_topic(topic, 4)
    parts = [(topic, p) for p in range(4)]
    job = JobProcess(tmp_path / "job", kafka_broker.bootstrap,
                     ["--include-groups", f"^{group}$", "--master", "local[2]"])
    first = start_members([Member(kafka_broker.bootstrap, group, [topic], "R0")])
    members.extend(first)
    wait_balanced(first, parts)
    job.start()
    try:
        second = start_members([Member(kafka_broker.bootstrap, group, [topic], "R1")])
        members.extend(second)
        wait_balanced(first + second, parts)
        second[0].leave()
        wait_balanced(first, parts)
        wait_until(lambda: len(job.event_log.read(group)) == 2, 120, "the join and the leave in the event log")
        first_files = {p: p.read_bytes() for p in job.event_log.files()}
    finally:
        job.stop()
    [first_run] = {p.parent.name for p in first_files}

    shutil.rmtree(job.checkpoint / "spark")  # the monitor's state and the event log stay
    job.start()
    try:
        wait_until(lambda: len(_rows_on_disk(job, group)) == 2 and sum(_rows_on_disk(job, group).values()) == 4,
                   180, "the new run to log the replayed rebalances again")
    finally:
        job.stop()
    on_disk = _rows_on_disk(job, group)
    assert on_disk[first_run] == 2 and sum(on_disk.values()) == 4, on_disk
    assert {p: p.read_bytes() for p in first_files} == first_files  # the first run's files are untouched
    events = job.event_log.read(group)
    assert [e.causes for e in events] == [("members_joined",), ("members_left",)]
    history = subprocess.run([sys.executable, "-m", "streaming.cli", "history", "--group", group,
                              "--event-log", str(job.workdir / "events")],
                             cwd=REPO, capture_output=True, text=True, timeout=120)
    assert history.returncode == 0, history.stderr
    assert f"group {group} (classic): 2 rebalance(s)" in history.stdout, history.stdout
    assert "churn (joins + leaves): " in history.stdout
    [churn_line] = [line for line in history.stdout.splitlines() if line.startswith("churn")]
    assert churn_line.endswith(" x2") and " x4" not in churn_line, churn_line  # R1 joined once and left once

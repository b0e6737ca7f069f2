"""Hostile-input cost of the decode path: a baseline revision against the working tree, same process.

Hostile records come from tests/scenarios/test_hostile_input.py's own generator (same forms and shares);
the all-valid records from the job benchmark's W1 shape. Each is cut into Arrow batches of
200,000 rows (the job's ``spark.sql.execution.arrow.maxRecordsPerBatch``) and run through one
decode task (``make_decoder``, the executor side) and then the group stage (the driver side: it
decodes and folds the group records the task hands over). The baseline's ``decoders`` and ``streaming.decode.stage`` are
read from git at ``--baseline`` and imported beside the working tree's, so both run on the same
data in the same interpreter; the group stage is the working tree's for both.

Run: ``python -m benchmarks.hostile_bench [--records N] [--repeats R] [--baseline REV]``.
Prints medians in records/s and the hostile/valid ratio. The job runs the task side on every
core and the driver side on one, so the driver's share weighs more there than here.
"""

from __future__ import annotations

import argparse
import importlib
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

from benchmarks.synthetic import Workload, backlog
from streaming.decode.stage import make_decoder
from streaming.groups.stage import GroupStage
from streaming.protocol import STAGE_SCHEMA, BatchInput
from tests.scenarios.test_hostile_input import hostile_records

ROOT = Path(__file__).resolve().parent.parent
BATCH_ROWS = 200_000  # the job's spark.sql.execution.arrow.maxRecordsPerBatch
TaskBody = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]


def baseline_decoder(revision: str) -> Callable[[int], TaskBody]:
    """``make_decoder`` as of ``revision``, imported from a scratch copy without disturbing this tree's modules."""
    scratch = Path(tempfile.mkdtemp(prefix="hostile-bench-"))
    files = subprocess.run(["git", "ls-tree", "-r", "--name-only", revision, "decoders/", "streaming/"], cwd=ROOT,
                           check=True, capture_output=True, text=True).stdout.split()
    for name in files:
        target = scratch / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(subprocess.run(["git", "show", f"{revision}:{name}"], cwd=ROOT, check=True,
                                          capture_output=True).stdout)
    ours = {name: module for name, module in sys.modules.items() if name.split(".")[0] in ("decoders", "streaming")}
    for name in ours:
        del sys.modules[name]
    sys.path.insert(0, str(scratch))
    try:
        # The decode stage moved into its package after 9408598.
        packaged = (scratch / "streaming/decode/stage.py").exists()
        module = "streaming.decode.stage" if packaged else "streaming.decode_stage"
        return importlib.import_module(module).make_decoder
    finally:
        sys.path.remove(str(scratch))
        for name in [n for n in sys.modules if n.split(".")[0] in ("decoders", "streaming")]:
            del sys.modules[name]
        sys.modules.update(ours)


def batches(records: Sequence[tuple[bytes | None, bytes | None]]) -> list[pa.RecordBatch]:
    """The records as Spark's Kafka source hands them to ``mapInArrow``."""
    out = []
    for lo in range(0, len(records), BATCH_ROWS):
        chunk = records[lo:lo + BATCH_ROWS]
        n = len(chunk)
        out.append(pa.RecordBatch.from_pydict({
            "key": pa.array([k for k, _ in chunk], pa.binary()),
            "value": pa.array([v for _, v in chunk], pa.binary()),
            "partition": pa.array(np.zeros(n, np.int32)),
            "offset": pa.array(np.arange(lo, lo + n, dtype=np.int64)),
            "timestamp": pa.array(np.full(n, 1_700_000_000_000, np.int64)).cast(pa.timestamp("ms")),
        }))
    return out


def run(make: Callable[[int], TaskBody], data: list[pa.RecordBatch]) -> tuple[float, float, dict[str, int]]:
    """Seconds in the task, seconds in the group stage, and the errors counted by reason."""
    started = time.perf_counter()
    out = pa.Table.from_batches(list(make(1000)(iter(data))), schema=STAGE_SCHEMA)
    task = time.perf_counter() - started
    started = time.perf_counter()
    batch = BatchInput.from_arrow(out)
    result = GroupStage().apply(batch)
    driver = time.perf_counter() - started
    errors = batch.errors + result.errors
    return task, driver, dict(sorted(errors.items()))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--baseline", default="2d732fa", help="git revision of the baseline (before the change)")
    args = parser.parse_args(argv)

    hostile = [(key, value) for key, value, _ in hostile_records(random.Random(20261122), args.records)]
    shape = Workload(groups=1000, partitions=50, records=args.records, generation_every=500, topic_partitions=8)
    valid = [(key, value) for _, key, value in backlog(shape, 1_700_000_000_000)]
    inputs = {"hostile": batches(hostile), "valid": batches(valid)}
    versions = {"baseline": baseline_decoder(args.baseline), "current": make_decoder}

    medians: dict[tuple[str, str], tuple[float, float]] = {}
    for name, make in versions.items():
        for kind, data in inputs.items():
            runs = [run(make, data) for _ in range(args.repeats)]
            if len({str(r[2]) for r in runs}) != 1:
                raise AssertionError(f"{name} {kind}: error counts differ between repeats")
            task, driver = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
            medians[(name, kind)] = (task, driver)
            print(f"{name:8} {kind:7} task {task:6.2f}s ({args.records / task:>9,.0f} rec/s)  "
                  f"driver {driver:6.2f}s  together {args.records / (task + driver):>9,.0f} rec/s  errors {runs[0][2]}")
    for name in versions:
        (h_task, h_driver), (v_task, v_driver) = medians[(name, "hostile")], medians[(name, "valid")]
        print(f"{name:8} hostile/valid: task {v_task / h_task:.2f}x, driver {v_driver / h_driver:.2f}x, "
              f"together {(v_task + v_driver) / (h_task + h_driver):.2f}x")
    base, ours = medians[("baseline", "hostile")], medians[("current", "hostile")]
    print(f"hostile speed-up: task {base[0] / ours[0]:.2f}x, driver {base[1] / ours[1]:.2f}x, "
          f"together {sum(base) / sum(ours):.2f}x")


if __name__ == "__main__":
    main()

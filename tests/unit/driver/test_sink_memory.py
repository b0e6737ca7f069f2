"""The sink's frozen survivors must not keep every batch's Dataset alive in the driver JVM (a soak's heap grew
with each batch): measured with the JVM's own class histogram, in a Spark of its own."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.fault_helpers import REPO

pytestmark = pytest.mark.slow


def test_batch_datasets_are_freed_by_the_periodic_full_collection() -> None:
    interval = 10
    result = subprocess.run([sys.executable, "-m", "tests.support.sink_memory_probe", str(interval)], cwd=REPO,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    print(f"\nDatasets left in the JVM after {figures['batches']} batches: {figures['frozen_only']} with frozen "
          f"survivors only, {figures['with_full_collections']} with a full collection every {interval} batches")
    # The control: freezing alone keeps more Datasets than the bound below allows, so that bound would catch the
    # leak. Not every batch's: on a loaded machine some batches' Datasets were freed all the same (beside a soak,
    # 20 of 30 kept, under the old control's 28, in 2 of 10 runs; the bound held in all 10).
    assert figures["frozen_only"] > interval + 1, figures
    # Kept at most until the next full collection.
    assert figures["with_full_collections"] <= interval + 1, figures

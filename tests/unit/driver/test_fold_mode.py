"""A checkpoint keeps the fold it was started with; the other one is refused with both flags named."""

from __future__ import annotations

from pathlib import Path

import pytest

from streaming.driver.fold_mode import MODE_FILE, FoldModeMismatch, check_fold_mode


def test_a_new_checkpoint_takes_the_fold_it_starts_with_and_refuses_the_other(tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint"
    check_fold_mode(checkpoint, "state-store")
    assert (checkpoint / MODE_FILE).read_text() == "state-store\n"
    check_fold_mode(checkpoint, "state-store")  # a restart
    with pytest.raises(FoldModeMismatch, match=r"written with --fold state-store; .* --fold driver"):
        check_fold_mode(checkpoint, "driver")


def test_a_checkpoint_from_before_the_option_is_the_driver_folds(tmp_path: Path) -> None:
    (tmp_path / "spark" / "commits").mkdir(parents=True)
    check_fold_mode(tmp_path, "driver")
    with pytest.raises(FoldModeMismatch, match="written with --fold driver"):
        check_fold_mode(tmp_path, "state-store")

"""Which fold a checkpoint belongs to: written at its first start, checked at every start.

The driver fold keeps its group state beside Spark's checkpoint; the state-store fold keeps it in Spark's
state store, with a stateful operator Spark fixes in the checkpoint's plan. Neither can read the other's.
"""

from __future__ import annotations

from pathlib import Path

MODE_FILE = "fold-mode"


class FoldModeMismatch(RuntimeError):
    """The checkpoint was written by the other fold."""


def check_fold_mode(checkpoint_dir: Path, mode: str) -> None:
    """Refuse a checkpoint written by the other fold; write the mode into a checkpoint that has none yet (a
    checkpoint from before the option was the driver fold's)."""
    path = checkpoint_dir / MODE_FILE
    if path.exists():
        written = path.read_text().strip()
    elif (checkpoint_dir / "spark" / "commits").exists():
        written = "driver"
    else:
        checkpoint_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(mode + "\n")
        return
    if written != mode:
        raise FoldModeMismatch(
            f"checkpoint {checkpoint_dir} was written with --fold {written}; it cannot be read with --fold {mode} "
            f"(give a new --checkpoint-dir, or start with --fold {written})")

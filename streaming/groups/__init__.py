"""Stage 2, on the driver: committed offsets and every group's snapshot, folded one batch at a time,
and their checkpoint."""

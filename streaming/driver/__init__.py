"""Stage 4, on the driver: the foreachBatch sink, publishing, progress, and the streaming query's lifecycle."""

"""Consumer lag: log offsets and record timestamps polled from the cluster, kept fresh or withdrawn."""

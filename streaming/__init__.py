"""The streaming job: group state (state.py), metrics (exporter.py), lag (lag.py), events (history.py)."""

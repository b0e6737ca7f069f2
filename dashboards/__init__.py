"""The Grafana dashboard and the code that generates it (``python -m dashboards.build``)."""

"""Stage 3: the Prometheus exposition (group, lag and job series), cached as text and served over HTTP(S)."""

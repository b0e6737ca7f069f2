"""The monitor job: one package per stage (decode, groups, lag, metrics, advisor, logs, driver),
the messages between them in :mod:`streaming.protocol`, one lifecycle in :mod:`streaming.lifecycle`,
and the job composed in :mod:`streaming.job`."""

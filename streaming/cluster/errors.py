"""Kafka client errors as bounded reasons: the label every poller's error counter carries.

One classifier for the driver's own clients (the lag and live pollers), so a reason means the
same in every ``*_errors_total`` series and the set of values a label can take stays fixed.
"""

from __future__ import annotations

from kafka import errors as Errors

ERROR_REASONS = ("timeout", "connection", "unknown_topic_or_partition", "not_leader", "auth", "other")

_NOT_LEADER = (Errors.NotLeaderForPartitionError, Errors.LeaderNotAvailableError, Errors.ReplicaNotAvailableError,
               Errors.FencedLeaderEpochError, Errors.UnknownLeaderEpochError, Errors.KafkaStorageError,
               Errors.OffsetNotAvailableError)


def error_reason(exc: BaseException) -> str:
    """One of :data:`ERROR_REASONS`: a bounded label for the error counter."""
    if isinstance(exc, Errors.UnknownTopicOrPartitionError):
        return "unknown_topic_or_partition"
    if isinstance(exc, _NOT_LEADER):
        return "not_leader"
    if isinstance(exc, Errors.AuthorizationError | Errors.SaslAuthenticationFailedError):
        return "auth"
    if isinstance(exc, Errors.KafkaTimeoutError | Errors.RequestTimedOutError | TimeoutError):
        return "timeout"
    if isinstance(exc, Errors.KafkaConnectionError | Errors.NodeNotReadyError | ConnectionError):
        return "connection"
    return "other"

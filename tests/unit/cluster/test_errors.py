"""The one classifier of Kafka client errors into bounded reasons."""

from kafka import errors as Errors

from streaming.cluster.errors import ERROR_REASONS, error_reason


def test_error_reasons_are_bounded():
    assert error_reason(Errors.UnknownTopicOrPartitionError()) == "unknown_topic_or_partition"
    assert error_reason(Errors.NotLeaderForPartitionError()) == "not_leader"
    assert error_reason(Errors.TopicAuthorizationFailedError()) == "auth"
    assert error_reason(Errors.KafkaTimeoutError()) == "timeout"
    assert error_reason(Errors.KafkaConnectionError()) == "connection"
    assert error_reason(ValueError()) == "other"
    assert all(error_reason(exc) in ERROR_REASONS for exc in (
        Errors.UnknownTopicOrPartitionError(), Errors.LeaderNotAvailableError(), Errors.GroupAuthorizationFailedError(),
        Errors.RequestTimedOutError(), Errors.NodeNotReadyError(), RuntimeError()))

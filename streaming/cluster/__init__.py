"""The Kafka cluster as the driver's own clients see it: client settings, the pre-flight, topic metadata."""

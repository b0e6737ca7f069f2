"""Stage 1, in the executors: Spark's Kafka source on the offsets topic, decoded and reduced by ``mapInArrow``."""

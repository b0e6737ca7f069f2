"""The assignor advisor: Kafka's built-in assignors run offline on a classic group's current members."""

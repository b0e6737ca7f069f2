"""What the offsets topic cannot show: each group's live state as Kafka's coordinators report it."""

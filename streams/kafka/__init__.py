"""The Kafka edges, on confluent-kafka: the routing producer, control-topic followers, admin, monitor, replay."""

"""Replaying recorded streams: through the engine in process, or through the workers on Kafka."""

"""What every clingate process runs on: settings, Kafka client settings, logs, metrics, dead letters."""

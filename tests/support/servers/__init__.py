"""Servers the tests start on 127.0.0.1 and stop after: redis-server, Kafka-protocol brokers,
`moonish serve`, a headless chromium, a local Spark session."""

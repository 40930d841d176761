"""``moonish cdc kafka``: change events into Kafka as Debezium puts them there, exactly once or
at least once (``sink``: ``KafkaSink``), their topics, keys and headers (``records``), the
sink's positions in an offsets topic (``offsets``), and the Connect JSON schema form
(``schema``). Only this package imports ``confluent_kafka``.
"""

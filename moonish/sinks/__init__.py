"""Where envelopes go beyond a reader: NDJSON files for Spark's file source (``export``) and
Kafka, as Debezium puts changes there (``kafka``). It imports ``moonish.cdc`` and below.
"""

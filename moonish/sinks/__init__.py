"""Sinks: where envelopes go beyond a reader (export files for Spark)."""

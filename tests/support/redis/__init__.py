"""Redis inputs and comparisons: AOFs, RDB dumps, command cases and strategies, and a
keyspace compared with a real redis-server."""

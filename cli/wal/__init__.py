"""The ``moonish wal`` commands that write, check and manage logs, one module each."""

"""Redis's replication protocol from the replica's side (``replication.c``): the handshake,
``PSYNC`` and acknowledgements (``connection``: ``ReplicaConnection``), URLs, options and the
master's answers (``messages``), the socket and a full resync's RDB payload (``wire``), and
the command stream split into commands with their replication offsets (``resp``). It imports
only the base modules.
"""

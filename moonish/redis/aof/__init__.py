"""Redis's append-only file and ``moonish wal import-aof``: the manifest and the commands of
each file (``files``), the import (``importer``: ``import_aof``) and its checks (``checks``),
the replay from each shard's stored position (``replay``), its per-command loop (``loop``),
and a first import on several processes (``parallel``).
"""

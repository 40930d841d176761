"""A supervised pipeline: one TOML file names the parts (a source, Kafka, the server, Spark),
and one process runs each part as its command would, restarts what crashes and stops them
all together (``moonish run``, docs/operations.md).

The package knows the commands only as data (:mod:`.schema`: their options, as the command
line gives them) and runs them only as child processes, so it imports none of the sources,
sinks or servers it supervises. ``schema`` is what a file may say, ``document`` reads the file
(TOML, ``${ENV_VAR}``, the line of each key), ``config`` checks it against the schema into a
:class:`~moonish.service.config.Pipeline`, ``argv`` and ``masking`` the command lines it runs
and shows, ``backoff`` the restart delays, ``children`` one child process, ``supervisor``
the processes together, ``reference`` the file's reference (docs/operations.md).
"""

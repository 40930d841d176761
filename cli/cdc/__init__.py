"""The ``moonish cdc`` commands that read changes, one module each."""

"""The ``moonish spark`` commands that run the Spark pipeline, one module each."""

"""The ``moonish`` command line: thin click commands that parse, call the library and print."""

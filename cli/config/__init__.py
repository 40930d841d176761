"""``moonish config``: pipeline files (``moonish run``)."""

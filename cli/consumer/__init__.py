"""The ``moonish consumer`` commands on named consumers, one module each."""

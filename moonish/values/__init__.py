"""Redis values as moonish keeps them and their typed JSON images: ``Entry`` and ``SortedSet``
(``model``), streams with their consumer groups (``streams``), byte strings as JSON text
(``jsontext``) and the JSON of plain values (``plainjson``, with the C extension ``_cjson``
where it is built). It imports no other package of moonish; the keyspace (``moonish.state``),
RDB decoding, envelopes and sinks build on it.
"""

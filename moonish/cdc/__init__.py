"""The read side: cursors and tokens, events, envelopes, following, merged reads, consumers.

Imports go one way: ``moonish.cdc`` reads ``moonish.log`` (the WAL) and ``moonish.state``
(stream configuration, snapshots); nothing below imports it.
"""

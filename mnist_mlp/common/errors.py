"""Errors the runtime's layers share: defined here, below the command line and the data loaders
that both raise them."""


class UsageError(ValueError):
    """Flags that cannot give a useful run; the message says what to change."""

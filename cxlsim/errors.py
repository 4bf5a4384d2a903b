"""The exceptions every layer shares.

`InputError` is bad input from a user (a flag, a scenario key, a file): the CLI
prints its message and exits with code 2. Anything else is a bug or a failed
run and exits with code 1.
"""


class InputError(ValueError):
    """Bad input; the message names the offending key or argument and what was expected."""


class RunError(RuntimeError):
    """A run failed (a rank died, a collective timed out); the message says which part."""

"""The one error type the command line turns into a single line on stderr and exit status 2."""


class InputError(Exception):
    """A capture or an argument the tool cannot use; the message is shown to the user as is."""

"""The recipes' one error a user can fix, below every module that raises it (the settings,
the raw text, prepare): the command line turns it into one line and exit status 2."""


class SettingError(ValueError):
    """A setting is missing, malformed or unknown; the message says what to do."""

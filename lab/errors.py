"""Errors the CLI turns into a clear message and an exit code, never a traceback."""


class LabError(Exception):
    """Bad usage or input: the CLI prints the message and exits with code 2."""

    exit_code = 2

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.hint = hint


class CheckFailed(Exception):
    """A kernel produced wrong results: exit code 1 (a failed check, not bad input)."""

    exit_code = 1

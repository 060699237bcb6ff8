"""Errors the CLI turns into a clear message and an exit code, never a traceback."""


class LabError(Exception):
    """Bad usage or input: the CLI prints the message and exits with code 2."""

    exit_code = 2

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.hint = hint

    def __reduce__(self):   # the hint too, where the error crosses a process boundary (lab.analysis.isolated)
        return _rebuilt, (type(self), str(self), self.hint)


def _rebuilt(cls, message: str, hint: str | None) -> LabError:
    """A LabError (or a subclass, whatever its own arguments) as it was pickled: its message and hint."""
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    err.hint = hint
    return err


class CheckFailed(Exception):
    """A kernel produced wrong results: exit code 1 (a failed check, not bad input)."""

    exit_code = 1

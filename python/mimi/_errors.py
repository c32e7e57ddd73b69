"""The errors of mimi: one class per kind of failure the CLI reports with its own exit code.

Every error the engine raises is a ``mimi.Error``; its message is the CLI's, word for word, and
``exit_code`` is the code ``mimi`` would exit with.
"""


class Error(Exception):
    """Base class of every error mimi raises."""

    exit_code = 70


class UsageError(Error, ValueError):
    """The call asked for something invalid (a bad n_q, an empty input, a bad device name)."""

    exit_code = 2


class InputError(Error, ValueError):
    """An input (audio, codes, token file) is unreadable or malformed."""

    exit_code = 3


class WeightsError(Error):
    """The weights or config are missing, malformed, or do not match the model."""

    exit_code = 4


class OutputError(Error):
    """An output could not be written (exists without force, disk full, read-only place...)."""

    exit_code = 5


class DeviceError(Error):
    """A device that was asked for is not available (never replaced by another)."""

    exit_code = 6


class InternalError(Error):
    """A bug in mimi."""

    exit_code = 70


class ResourceError(Error):
    """The machine failed, not the input (out of memory or file descriptors, an I/O error while
    reading): run again."""

    exit_code = 75

"""The one exception family of procmap (docs/design.md section 8).

Every error a user can cause by bad input is a :class:`ProcmapError`. The CLI
prints ``str(error)`` as one line and exits with status 2.
"""
from __future__ import annotations

import os


class ProcmapError(Exception):
    """Base class of every error procmap raises on bad input or impossible requests."""


class InputError(ProcmapError, ValueError):
    """Malformed or invalid input data.

    Parameters
    ----------
    message:
        What is wrong, e.g. ``"negative weight -3"``.
    path:
        The file the problem was found in, if any.
    line:
        The 1-based line number in ``path``, if known.
    """

    def __init__(self, message: str, path: str | os.PathLike | None = None,
                 line: int | None = None) -> None:
        self.message = message
        self.path = None if path is None else os.fspath(path)
        self.line = line
        super().__init__(self._format())

    def _format(self) -> str:
        where = ""
        if self.path is not None:
            where = self.path
            if self.line is not None:
                where += f":{self.line}"
            where += ": "
        elif self.line is not None:
            where = f"line {self.line}: "
        return where + self.message

    def at(self, path: str | os.PathLike) -> "InputError":
        """Return a copy of this error attributed to ``path`` (keeps the line)."""
        return type(self)(self.message, path, self.line)


class FormatError(InputError):
    """A file does not follow its format (syntax, counts, ids out of range)."""


class TopologyError(ProcmapError, ValueError):
    """An invalid machine description (hierarchy, distances, capacities, host lists)."""


class CapacityError(ProcmapError, ValueError):
    """A request that no valid mapping can satisfy (more tasks than slots, ...)."""


class DeviceError(ProcmapError, RuntimeError):
    """The requested device cannot run the job (no usable GPU, out of GPU memory)."""

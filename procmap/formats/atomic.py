"""Checked file access for every reader and writer (DESIGN.md sections 7 and 8).

* :func:`atomic_write` writes to a temporary file next to the target and renames
  it into place only when the whole write succeeded: a crash, a full disk or an
  exception in the writer never leaves a half-written rankfile or graph behind,
  and an existing file stays untouched.
* :func:`read_bytes` reads a whole input file and turns ``OSError`` (missing
  file, directory, permissions) into a one-line :class:`FormatError`.
* :func:`as_format_error` attributes an :class:`InputError` raised while building
  a :class:`~procmap.graph.CommGraph` to the file it came from.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from typing import IO, Iterator

from procmap.errors import FormatError, InputError, ProcmapError

_WRITE_MODES = ("w", "wt", "wb")


def _default_file_mode() -> int:
    """Permission bits a plain ``open(path, "w")`` would give a new file (0o666 & ~umask).

    ``tempfile.mkstemp`` creates files with mode 0o600, which would make every
    rankfile private; read the umask from /proc (no side effect) where possible.
    """
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    umask = os.umask(0o022)  # the portable way; briefly changes the process umask
    os.umask(umask)
    return 0o666 & ~umask


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", *,
                 encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temporary file in ``path``'s directory; on success move it to ``path``.

    Usage::

        with atomic_write("run.rankfile") as f:
            f.write(text)

    On normal exit the data are flushed and fsync'ed and the temporary file is
    renamed over ``path`` with :func:`os.replace` (atomic on POSIX). If the body
    raises, the temporary file is removed, ``path`` is left as it was and the
    exception propagates unchanged. ``mode`` is ``"w"`` (text, ``encoding``) or
    ``"wb"`` (binary, e.g. for ``np.save(f, array)``). The new file gets the
    permission bits of the file it replaces, or the umask default.

    Problems creating or renaming the file itself (missing directory, no
    permission) raise :class:`ProcmapError` ``"cannot write ..."``.
    """
    if mode not in _WRITE_MODES:
        raise ValueError(f"atomic_write mode must be one of {_WRITE_MODES}, not {mode!r}")
    target = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(target))
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp",
                                   dir=directory)
    except OSError as exc:
        raise ProcmapError(f"cannot write {target}: {exc.strerror or exc}") from None
    binary = "b" in mode
    try:
        handle = os.fdopen(fd, "wb" if binary else "w", encoding=None if binary else encoding,
                           newline=None if binary else "")
    except BaseException:
        os.close(fd)
        _remove(tmp)
        raise
    try:
        with handle:
            yield handle  # the caller's exceptions propagate unchanged
    except BaseException:
        _remove(tmp)
        raise
    try:
        # Reopen for fsync: the caller may have closed the handle (np.save does not,
        # but a TextIOWrapper around it might).
        sync_fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(sync_fd)
        finally:
            os.close(sync_fd)
        try:
            file_mode = os.stat(target).st_mode & 0o7777
        except OSError:
            file_mode = _default_file_mode()
        os.chmod(tmp, file_mode)
        os.replace(tmp, target)
    except OSError as exc:
        _remove(tmp)
        raise ProcmapError(f"cannot write {target}: {exc.strerror or exc}") from None
    # Make the rename itself durable; not every file system supports this.
    with contextlib.suppress(OSError):
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _remove(tmp: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(tmp)


def read_bytes(path: str | os.PathLike) -> bytes:
    """Return the whole content of ``path``; any ``OSError`` becomes a FormatError."""
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise FormatError(f"cannot read: {exc.strerror or exc}", path) from None


def as_format_error(error: InputError, path: str | os.PathLike) -> FormatError:
    """Return ``error`` (e.g. from a CommGraph constructor) as a FormatError naming ``path``.

    Keeps the line number when the error already has one.
    """
    return FormatError(error.message, path, error.line)

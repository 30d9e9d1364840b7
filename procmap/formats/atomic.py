"""Checked file access for every reader and writer (docs/design.md sections 7 and 8).

* :func:`atomic_write` writes an output so that it is never seen half-written:

  - a regular file (or a new one) is written to a temporary file in its own
    directory and renamed over it only when the whole write succeeded; a crash,
    a full disk, an exception in the writer, SIGINT or SIGTERM leave the old
    file (or no file) and no temporary file behind;
  - a symbolic link is followed, chains and dangling links included: the file it
    points to is replaced (or created) and the link stays a link;
  - anything else that exists (a character or block device, a FIFO, a
    ``/dev/stdout``-like link into ``/proc/*/fd``) is opened and written in
    place, never renamed over: ``-o /dev/null`` stays a device;
  - ``"-"`` (:data:`STDOUT`), or the very file standard output goes to, is
    written through standard output.

* :func:`check_output` is the preflight of the commands: it raises the error
  :func:`atomic_write` would raise (empty name, a directory, a missing or
  unwritable directory, an unwritable file, a socket) and also refuses an output
  that is one of the command's inputs or another of its outputs, before any
  input is read.
* :func:`read_bytes` reads a whole input file and turns ``OSError`` (missing
  file, directory, permissions) into a one-line :class:`FormatError`;
  :func:`prefetch_bytes` starts such a read ahead, in a background thread
  (:class:`Prefetch`), and :func:`read_bytes` takes it over.
* :func:`as_format_error` attributes an :class:`InputError` raised while building
  a :class:`~procmap.graph.CommGraph` to the file it came from.

Every failure to write names the file: ``cannot write X: No space left on device``.
"""
from __future__ import annotations

import contextlib
import errno
import os
import signal
import stat
import sys
import tempfile
import threading
from dataclasses import dataclass
from typing import IO, Iterable, Iterator, Literal

from procmap.errors import FormatError, InputError, ProcmapError

_WRITE_MODES = ("w", "wt", "wb")

#: The output name that means standard output (``procmap map ... -o -``).
STDOUT = "-"

# Signals held back while a temporary file exists, so that its cleanup always runs.
_DEFERRED_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# Same bound as the kernel's (Linux MAXSYMLINKS).
_MAX_LINKS = 40


@dataclass(frozen=True)
class Destination:
    """Where an output goes, as :func:`resolve_output` found it.

    ``name`` is the path as given (for messages); ``path`` is what is written:
    the end of the symbolic-link chain, or the ``/proc/*/fd`` link itself.
    ``kind`` is ``"file"`` (a regular file, existing or new: replaced atomically),
    ``"special"`` (exists and is not a regular file: written in place) or
    ``"stdout"`` (written through file descriptor 1).
    """

    name: str
    path: str
    kind: Literal["file", "special", "stdout"]


def _cannot(name: str, reason: str) -> ProcmapError:
    return ProcmapError(f"cannot write {name or repr(name)}: {reason}")


def _follow_links(path: str) -> tuple[str, bool]:
    """Follow symbolic links from ``path``; return the path reached and whether it
    is a ``/proc/*/fd`` link (e.g. ``/dev/stdout``: its target is an open file,
    not a name to write beside, so the caller writes it in place)."""
    for _ in range(_MAX_LINKS):
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return path, False  # a new file, or the target of a dangling link
        if not stat.S_ISLNK(info.st_mode):
            return path, False
        if os.path.realpath(os.path.dirname(os.path.abspath(path))).startswith("/proc/"):
            return path, True
        # A relative target is relative to the link's own directory.
        path = os.path.join(os.path.dirname(path), os.readlink(path))
    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)


def _same_as_stdout(info: os.stat_result) -> bool:
    """Whether ``info`` is the file or pipe that standard output goes to (a terminal
    or ``/dev/null`` does not count: writing those in place mixes nothing up)."""
    if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode):
        return False
    with contextlib.suppress(OSError):
        out = os.fstat(1)
        return (out.st_dev, out.st_ino) == (info.st_dev, info.st_ino)
    return False


def _check_directory(name: str, path: str) -> None:
    """A temporary file can be created beside ``path`` and renamed over it."""
    directory = os.path.dirname(path) or os.curdir
    try:
        info = os.stat(directory)
    except FileNotFoundError:
        raise _cannot(name, f"directory {directory} does not exist") from None
    except OSError as exc:
        raise _cannot(name, f"{directory}: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise _cannot(name, f"{directory} is not a directory")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise _cannot(name, f"no permission to create files in {directory}")


def resolve_output(path: str | os.PathLike) -> Destination:
    """Find where an output named ``path`` goes and check that it can be written.

    Raises :class:`ProcmapError` (``cannot write <path>: <why>``) for an empty
    name, a name ending in ``/``, a directory, a missing or unwritable directory,
    an existing file without write permission, a socket or a symbolic-link loop.
    Does not create or open anything (a FIFO would block until read).
    """
    name = os.fspath(path)
    if name == STDOUT:
        return Destination(name, name, "stdout")
    if not name:
        raise _cannot(name, "empty file name")
    if name.endswith(os.sep):
        reason = "is a directory" if os.path.isdir(name) else "a file name cannot end with '/'"
        raise _cannot(name, reason)
    try:
        target, through_proc = _follow_links(name)
    except OSError as exc:
        raise _cannot(name, exc.strerror or str(exc)) from None
    try:
        info = os.stat(target)
    except FileNotFoundError:
        _check_directory(name, target)
        return Destination(name, target, "file")
    except OSError as exc:
        raise _cannot(name, exc.strerror or str(exc)) from None
    if stat.S_ISDIR(info.st_mode):
        raise _cannot(name, "is a directory")
    if stat.S_ISSOCK(info.st_mode):
        raise _cannot(name, "is a socket")
    if not os.access(target, os.W_OK):
        raise _cannot(name, os.strerror(errno.EACCES))
    if _same_as_stdout(info):
        return Destination(name, target, "stdout")
    if through_proc or not stat.S_ISREG(info.st_mode):
        return Destination(name, target, "special")
    _check_directory(name, target)
    return Destination(name, target, "file")


def _same_file(a: Destination, b: str) -> bool:
    """Whether ``b`` names the file ``a`` writes (existing or not)."""
    with contextlib.suppress(OSError):
        return os.path.samefile(a.path, b)
    # One of them does not exist (yet): compare the names with every link resolved.
    return os.path.realpath(a.path) == os.path.realpath(b)


def check_output(path: str | os.PathLike, inputs: Iterable[str | os.PathLike | None] = (), *,
                 outputs: Iterable[str | os.PathLike | None] = (),
                 stdout: bool = True) -> Destination:
    """Preflight of a command's output: call it before reading any input.

    Raises :class:`ProcmapError` for everything :func:`resolve_output` refuses,
    for an output that is the same file as one of ``inputs`` (through links,
    hard links, ``./`` or not) or as one of the command's other ``outputs``, and
    for ``"-"`` when ``stdout`` is false (a command whose launch line needs a
    file name). ``None`` entries (options not given) are skipped.
    """
    dest = resolve_output(path)
    if dest.kind == "stdout" and not stdout:
        raise _cannot(dest.name, "this command needs a file (its launch line names it), "
                                 "not standard output")
    if dest.name == STDOUT:
        return dest
    conflicts = (
        (inputs, "the input", "writing it would destroy the input (choose another output name)"),
        (outputs, "the other output", "the two would overwrite each other (give two names)"),
    )
    for others, role, why in conflicts:
        for other in others:
            if other is None or os.fspath(other) == STDOUT:
                continue
            if _same_file(dest, os.fspath(other)):
                shown = "" if os.fspath(other) == dest.name else f" {os.fspath(other)}"
                raise _cannot(dest.name, f"it is also {role}{shown}: {why}")
    return dest


def writes_to_stdout(path: str | os.PathLike | None) -> bool:
    """Whether an output named ``path`` goes to standard output (``-``, ``/dev/stdout``,
    or the file stdout is redirected to): a command then reports on stderr."""
    if path is None:
        return False
    try:
        return resolve_output(path).kind == "stdout"
    except ProcmapError:
        return False


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
def _signals_held() -> Iterator[list[int]]:
    """Hold SIGINT and SIGTERM back inside the block; deliver them when it ends.

    Yields the list of signals that arrived meanwhile. Swaps the Python-level
    handlers instead of blocking with ``pthread_sigmask``: the kernel hands a
    signal blocked in the main thread to any other thread (Numba's workers),
    whose C handler still schedules the Python handler in the main thread.
    Holding the handler also keeps ``KeyboardInterrupt`` out of code that must
    not be interrupted, such as Numba compiling a kernel (an exception in its
    llvmlite ctypes callbacks is lost or crashes the process). Only the main
    thread can change handlers; elsewhere the block runs unprotected.
    """
    caught: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield caught
        return
    previous = {}
    try:
        for signum in _DEFERRED_SIGNALS:
            handler = signal.getsignal(signum)
            if handler is not None and handler != signal.SIG_IGN:  # None: not set from Python
                previous[signum] = signal.signal(signum, lambda s, _frame: caught.append(s))
        yield caught
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum in dict.fromkeys(caught):
            signal.raise_signal(signum)  # the restored handler runs now


def _open_in_place(dest: Destination) -> int:
    """File descriptor for writing ``dest`` without replacing it."""
    if dest.kind == "stdout":
        sys.stdout.flush()  # keep what was printed before ahead of the data
        return os.dup(1)
    # O_APPEND: a regular file reached through /proc/*/fd is a redirected stream.
    append = os.O_APPEND if stat.S_ISREG(os.stat(dest.path).st_mode) else 0
    return os.open(dest.path, os.O_WRONLY | append | os.O_CLOEXEC)


def _handle(fd: int, binary: bool, encoding: str | None) -> IO:
    return os.fdopen(fd, "wb" if binary else "w", encoding=None if binary else encoding,
                     newline=None if binary else "")


@contextlib.contextmanager
def _write_in_place(dest: Destination, binary: bool, encoding: str | None) -> Iterator[IO]:
    try:
        fd = _open_in_place(dest)
    except OSError as exc:
        raise _cannot(dest.name, exc.strerror or str(exc)) from None
    try:
        with _handle(fd, binary, encoding) as handle:
            yield handle
    except BrokenPipeError:
        if dest.kind == "stdout":
            raise  # e.g. piped into `head`: the CLI treats it as a normal end
        raise _cannot(dest.name, os.strerror(errno.EPIPE)) from None
    except OSError as exc:
        raise _cannot(dest.name, exc.strerror or str(exc)) from None


def _replace(tmp: str, target: str) -> None:
    """fsync ``tmp``, give it ``target``'s owner and permissions, rename it over ``target``."""
    # Reopen for fsync: the caller may have closed the handle.
    sync_fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(sync_fd)
    finally:
        os.close(sync_fd)
    try:
        old = os.stat(target)
    except FileNotFoundError:
        os.chmod(tmp, _default_file_mode())
    else:
        # Root (a Slurm prolog) replacing a user's file keeps it the user's.
        with contextlib.suppress(OSError):
            os.chown(tmp, old.st_uid, old.st_gid)
        os.chmod(tmp, old.st_mode & 0o7777)
    os.replace(tmp, target)


@contextlib.contextmanager
def _write_replacing(dest: Destination, binary: bool, encoding: str | None) -> Iterator[IO]:
    directory = os.path.dirname(os.path.abspath(dest.path))
    with _signals_held() as caught:
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(dest.path)}.", suffix=".tmp",
                                       dir=directory)
        except OSError as exc:
            raise _cannot(dest.name, exc.strerror or str(exc)) from None
        try:
            with _handle(fd, binary, encoding) as handle:
                yield handle
            if caught:  # interrupted while writing: keep the old file, then stop
                raise _Discard
            _replace(tmp, dest.path)
        except _Discard:
            _remove(tmp)
            return
        except OSError as exc:
            _remove(tmp)
            raise _cannot(dest.name, exc.strerror or str(exc)) from None
        except BaseException:
            _remove(tmp)
            raise
    # Make the rename itself durable; not every file system supports this.
    with contextlib.suppress(OSError):
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


class _Discard(Exception):
    """Internal: a held signal arrived during the write; drop the temporary file."""


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", *,
                 encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open the output ``path`` for writing; it appears complete or not at all.

    Usage::

        with atomic_write("run.rankfile") as f:
            f.write(text)

    A regular file (existing or new, possibly behind symbolic links) is written
    to a temporary file in its own directory, flushed, fsync'ed and renamed over
    it with :func:`os.replace` when the body ends without an exception; it keeps
    the permission bits (and, for root, the owner) of the file it replaces, or
    gets the umask default. SIGINT and SIGTERM arriving meanwhile are held back
    and delivered afterwards, the temporary file removed and the old file kept.
    Devices, FIFOs and ``/proc/*/fd`` links are written in place; ``"-"`` and the
    file standard output goes to are written through standard output (a broken
    pipe there raises :class:`BrokenPipeError`). See :func:`resolve_output` for
    what is refused.

    ``mode`` is ``"w"`` (text, ``encoding``) or ``"wb"`` (binary, e.g. for
    ``np.save(f, array)``). Any ``OSError`` while creating, writing or renaming
    the file -- including one raised by the body, which only writes -- becomes
    :class:`ProcmapError` ``"cannot write <path>: <reason>"``; other exceptions
    of the body propagate unchanged, with nothing written.
    """
    if mode not in _WRITE_MODES:
        raise ValueError(f"atomic_write mode must be one of {_WRITE_MODES}, not {mode!r}")
    dest = resolve_output(path)
    write = _write_replacing if dest.kind == "file" else _write_in_place
    with write(dest, "b" in mode, encoding) as handle:
        yield handle


def _remove(tmp: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(tmp)


def read_bytes(path: str | os.PathLike) -> bytes:
    """Return the whole content of ``path``; any ``OSError`` becomes a FormatError.

    A read of the same file started by :func:`prefetch_bytes` is taken over (waited
    for) when the file still has the identity and size it had then; otherwise, or
    when that read failed, the file is read here as always (so errors read the same).
    """
    pending = _PREFETCHED.pop(os.fspath(path), None) if _PREFETCHED else None
    if pending is not None:
        data = pending.take()
        if data is not None:
            return data
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise FormatError(f"cannot read: {exc.strerror or exc}", path) from None


class Prefetch:
    """A whole-file read running in a background thread (the read releases the
    interpreter lock: ``procmap map`` imports its engines meanwhile), started by
    :func:`prefetch_bytes`; :func:`read_bytes` of the same path takes it over."""

    def __init__(self, path: str):
        self.path = path
        self._data: bytes | None = None
        self._identity = None
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name="procmap-prefetch")
        self._thread.start()

    def _run(self) -> None:
        try:
            with open(self.path, "rb") as handle:
                self._identity = _identity(os.fstat(handle.fileno()))
                self._data = handle.read()
        except Exception:  # noqa: BLE001 -- read_bytes reads again and reports it
            self._data = None

    def wait(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds (``None``: until it ends) for the read to end,
        done or failed; return whether it has ended."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def take(self) -> bytes | None:
        """Wait for the read; the bytes read, or ``None`` (failed, or the file changed
        since). The bytes are handed over once: a second call returns ``None``."""
        self.wait()
        data, self._data = self._data, None
        try:
            unchanged = _identity(os.stat(self.path)) == self._identity
        except OSError:
            unchanged = False
        if data is None or not unchanged or len(data) != self._identity[-1]:
            return None
        return data


def _identity(st: os.stat_result) -> tuple:
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


#: Reads started by :func:`prefetch_bytes` and not yet taken, by path as given.
_PREFETCHED: dict[str, Prefetch] = {}


def prefetch_bytes(path: str | os.PathLike) -> Prefetch:
    """Start reading ``path`` whole in a background thread; the next
    :func:`read_bytes` of the same path takes the bytes over. Whoever starts one
    calls :func:`discard_prefetch` once the reader is done (a read that no reader
    took is dropped then, not kept in memory). Returns the :class:`Prefetch` (the one
    already running when a read of ``path`` was started and not yet taken)."""
    key = os.fspath(path)
    if key not in _PREFETCHED:
        _PREFETCHED[key] = Prefetch(key)
    return _PREFETCHED[key]


def discard_prefetch(path: str | os.PathLike) -> None:
    """Drop a read started by :func:`prefetch_bytes` that no reader took."""
    _PREFETCHED.pop(os.fspath(path), None)


def as_format_error(error: InputError, path: str | os.PathLike) -> FormatError:
    """Return ``error`` (e.g. from a CommGraph constructor) as a FormatError naming ``path``.

    Keeps the line number when the error already has one.
    """
    return FormatError(error.message, path, error.line)

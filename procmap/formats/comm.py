"""procmap's own ``.comm`` edge-list format (docs/design.md section 7).

Layout::

    # any comment; '#' also ends a line early
    # tasks: 6            <- optional, only in the leading comment block
    0 1 80800             <- src dst volume: rank 0 sent 80800 (bytes, msgs, ...) to rank 1
    1 0 80000
    2 5 1.5e3

* Ranks are 0-based. ``volume`` is any finite number >= 0 (integers stay int64,
  exactly, up to 2^63 - 1; the total of all volumes, both directions, must fit too).
* Entries are *directed* (row = sender) and summed into ``C + C^T``: the two
  lines above give the undirected pair 0-1 the weight 160800. Repeated lines add up.
* The number of tasks is ``max rank + 1`` unless a ``# tasks: N`` line in the
  leading comment block says more (ranks that never communicate). Either may exceed
  the number of ranks the entries can show (twice the entries) by at most
  ``procmap.limits.MAX_SILENT_TASKS``: a tiny file never makes procmap allocate
  gigabytes.
* Vertex weights are not stored: every task reads back with weight 1.

The writer lists every undirected pair once (``u < v``) with its symmetrised
weight and writes ``# tasks: n``, so that reading the file back gives the same
:class:`~procmap.graph.CommGraph`.

This module also holds :func:`format_int_lines`, the Numba integer formatter the
other text writers share.
"""
from __future__ import annotations

import os
import re
import warnings

import numpy as np

from procmap.errors import FormatError, InputError
from procmap.graph import CommGraph
from procmap.limits import INT64_MAX, MAX_TASKS, check_declared_tasks, exact_sum

from .atomic import as_format_error, atomic_write, read_bytes
from procmap.textfmt import show_number

#: Files up to this size (bytes) are read by the ``"small"`` reader (pure NumPy) of
#: :func:`parse_comm`, larger ones by the ``"direct"`` one (Numba).
SMALL_FILE_BYTES = 1 << 20
#: Tokens of the plain spelling: decimal digits only, short enough for int64.
_PLAIN_DIGITS = 18

_TASKS_DIRECTIVE = re.compile(rb"#\s*tasks\s*:\s*(.*?)\s*$", re.IGNORECASE)
_LINES_PER_CHUNK = 1 << 20  # bounds the writer's temporary text to ~30 MB


# ----------------------------------------------------------------------------- reading


def _tasks_directive(data: bytes, path) -> tuple[int | None, int | None]:
    """Find ``# tasks: N`` in the leading comment block; return ``(N, line)`` or ``(None, None)``.

    Only the block of comment and blank lines before the first entry is scanned,
    so this Python loop is short however long the file is.
    """
    tasks, tasks_line = None, None
    pos, line_no = 0, 0
    while pos < len(data):
        end = data.find(b"\n", pos)
        if end < 0:
            end = len(data)
        line_no += 1
        line = data[pos:end].strip()
        pos = end + 1
        if not line:
            continue
        if not line.startswith(b"#"):
            break
        match = _TASKS_DIRECTIVE.match(line)
        if match is None:
            continue
        text = match.group(1)
        # (digit count first: int() refuses strings of over 4300 digits)
        if not (text.isdigit() and text.isascii()) or len(text) > 12 or int(text) > MAX_TASKS:
            shown = text.decode("utf-8", "replace")
            raise FormatError(f"'# tasks:' needs a task count between 0 and {MAX_TASKS}, "
                              f"got {shown!r}", path, line_no)
        if tasks is not None and int(text) != tasks:
            raise FormatError(f"'# tasks: {int(text)}' contradicts '# tasks: {tasks}' on line "
                              f"{tasks_line}", path, line_no)
        tasks, tasks_line = int(text), line_no
    return tasks, tasks_line


def _entry_problem(entry: np.ndarray, problem: int, tasks: int | None,
                   tasks_line: int | None) -> str:
    """The error message for a bad ``src dst volume`` entry found by
    :func:`procmap.kernels.io.comm_cpu.split_entries`."""
    from procmap.kernels.io.comm_cpu import BAD_SRC, BAD_VOLUME

    if problem == BAD_VOLUME:
        return f"volume {show_number(entry[2])} must be a finite number >= 0"
    rank = entry[0] if problem == BAD_SRC else entry[1]
    if not (rank >= 0 and rank == np.floor(rank)):
        return f"rank {show_number(rank)} is not a non-negative integer"
    if tasks is None:
        return f"rank {show_number(rank)} exceeds the largest supported rank {MAX_TASKS - 1}"
    return f"rank {show_number(rank)} out of range: '# tasks: {tasks}' (line {tasks_line})"


#: The values of ``parse_comm``'s ``reader``.
READERS = ("auto", "small", "direct", "general")


def read_comm(path: str | os.PathLike) -> CommGraph:
    """Read a ``.comm`` file into a CommGraph holding ``C + C^T``.

    Raises :class:`FormatError` naming the file and 1-based line for: a line
    without exactly three numbers, a non-integer or negative rank, a rank not
    below ``# tasks: N``, a negative, NaN or infinite volume, and a file with no
    entries (and no ``# tasks:`` line), or zero tasks. The file is parsed as by
    :func:`parse_comm` with ``reader="auto"``.
    """
    return _parse(read_bytes(path), path, "auto")


def parse_comm(data: bytes, path: str | os.PathLike, *, reader: str = "auto") -> CommGraph | None:
    """Parse the bytes of a ``.comm`` file; ``path`` only names it in errors and warnings.

    ``reader`` picks the parser. ``"auto"`` (what :func:`read_comm` does): a file of at
    most ``SMALL_FILE_BYTES`` bytes goes to ``"small"``, a larger one to ``"direct"``,
    and a file the fast path declines is parsed again by ``"general"``. The three:

    * ``"small"``: the plain spelling (entry lines ``int int int``, digits only, at most
      18 each) parsed with ``bytes`` methods and NumPy, no Numba (whose first kernel
      costs more start-up than such a file takes to parse);
    * ``"direct"``: the plain spelling parsed in parallel line-aligned chunks straight
      into the CSR arrays (:mod:`procmap.kernels.io.comm_cpu`);
    * ``"general"``: the tokenizer; accepts every spelling the format allows (float
      volumes, ``1e3``, 19-digit integers) and raises the :class:`FormatError` of any
      error, with its line.

    The fast paths give the general path's graph, array for array, on every file they
    accept, and return ``None`` (never raise for the file's content) on every other one:
    another spelling, or a check that would fail (task count, total weight). Only
    ``"small"`` and ``"direct"`` return ``None``.
    """
    if reader not in READERS:
        raise ValueError(f"reader must be one of {', '.join(READERS)}, got {reader!r}")
    return _parse(data, path, reader)


def _parse(data: bytes, path, reader: str) -> CommGraph | None:
    """:func:`parse_comm` after the check of ``reader``. :func:`read_comm` calls this
    too, so that a warning's stack level (its caller's line) is the same from both."""
    tasks, tasks_line = _tasks_directive(data, path)
    if reader == "auto":
        reader = "small" if len(data) <= SMALL_FILE_BYTES else "direct"
        graph = (_read_small if reader == "small" else _read_direct)(data, tasks, path)
        return graph if graph is not None else _read_general(data, tasks, tasks_line, path)
    if reader == "general":
        return _read_general(data, tasks, tasks_line, path)
    return (_read_small if reader == "small" else _read_direct)(data, tasks, path)


def _read_small(data: bytes, tasks: int | None, path) -> CommGraph | None:
    """The ``"small"`` reader of :func:`parse_comm` (files up to ``SMALL_FILE_BYTES``): the plain
    spelling parsed with ``bytes`` methods and NumPy, no Numba (whose first kernel
    costs more start-up than such a file takes to parse). ``None`` as for
    :func:`_read_direct`: the general path then reads the file and words the error.
    """
    fields = []
    for line in data.split(b"\n"):
        tokens = line.split(b"#", 1)[0].split()  # the same blanks as the tokenizer's
        if not tokens:
            continue
        if len(tokens) != 3 or not all(t.isdigit() and len(t) <= _PLAIN_DIGITS for t in tokens):
            return None
        fields += tokens
    if not fields:
        return None
    src, dst, volume = np.array(fields).astype(np.int64).reshape(-1, 3).T
    top = int(max(src.max(), dst.max()))
    try:
        check_declared_tasks(top + 1, min(top + 1, 2 * src.size), "", path)
        if tasks is not None:
            if top >= tasks:
                return None
            check_declared_tasks(tasks, min(top + 1, 2 * src.size), "", path)
        graph = CommGraph.from_edges(src, dst, volume, n=tasks)
    except InputError:
        return None
    if tasks is None:
        _warn_if_one_based(src, dst, path)
    return graph


def _read_direct(data: bytes, tasks: int | None, path) -> CommGraph | None:
    """The ``"direct"`` reader of :func:`parse_comm` (:mod:`procmap.kernels.io.comm_cpu`): a
    parallel parse of line-aligned chunks into ``src``/``dst`` (int32) and volumes (int64),
    then the symmetric CSR built directly (degree count of both directions, prefix
    sum, fill, per-row sort and merge of duplicates).

    Returns ``None`` whenever the file is not valid in the plain spelling, or a
    check would fail (the task count, the total weight): the caller then re-reads
    it with the general path, which raises the error. Peak memory: the file, 16
    bytes per entry line and 12 bytes per directed CSR entry, plus 16 per task.
    """
    import numba as nb

    from procmap.kernels.io import comm_cpu as kc

    buf = np.frombuffer(data, dtype=np.uint8)
    comment = ord("#")
    nchunks = max(1, min(buf.size >> 16, 8 * nb.get_num_threads()))
    starts = kc.chunk_starts(buf, nchunks)
    counts = kc.count_entries(buf, comment, starts)
    offsets = np.zeros(nchunks + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    entries = int(offsets[-1])
    if entries == 0:
        return None
    limit = MAX_TASKS if tasks is None else tasks
    src = np.empty(entries, dtype=np.int32)
    dst = np.empty(entries, dtype=np.int32)
    volume = np.empty(entries, dtype=np.int64)
    ok, top, bottom, heaviest, _, loops = kc.parse_entries(buf, comment, starts, offsets, 3, 0,
                                                           limit, src, dst, volume)
    if not ok:
        return None
    implied = int(top) + 1
    try:  # before anything of n entries exists; the general path words the error
        check_declared_tasks(implied, min(implied, 2 * entries), "", path)
        if tasks is not None:
            check_declared_tasks(tasks, min(implied, 2 * entries), "", path)
    except InputError:
        return None
    n = implied if tasks is None else tasks
    # The total that CommGraph.from_edges checks: volumes without self loops, x 2.
    if int(heaviest) * (entries - int(loops)) > 2**61:
        kept = volume if not loops else np.where(src != dst, volume, 0)
        if 2 * exact_sum(kept) > INT64_MAX:
            return None
        del kept
    if tasks is None and int(bottom) == 1 and kc.all_ranks_from_one(src, dst, implied - 1):
        _one_based_warning(implied - 1, path, stacklevel=5)

    xadj, adjncy, adjwgt = kc.build_symmetric(src, dst, volume, n)
    return CommGraph(xadj, adjncy, adjwgt, np.ones(n, dtype=np.int64))


def _read_general(data: bytes, tasks: int | None, tasks_line: int | None, path) -> CommGraph:
    """The ``"general"`` reader of :func:`parse_comm`: tokenize the whole file, check every
    entry and build with :meth:`CommGraph.from_edges`. Accepts every spelling the
    format allows (float volumes, exponents, 19-digit integers) and names the line
    of any error."""
    from procmap.kernels.io.comm_cpu import split_entries

    from .tokenizer import tokenize

    tokens = tokenize(data, path, comment="#")
    counts = tokens.counts()
    wrong = np.flatnonzero(counts != 3)
    if wrong.size:
        i = wrong[0]
        raise FormatError(f"expected 3 numbers 'src dst volume', found {counts[i]}",
                          path, int(tokens.line_no[i]))
    if tokens.nlines == 0:
        if tasks is None:
            raise FormatError("no communication entries", path)
        if tasks == 0:
            raise FormatError("empty graph: '# tasks: 0' and no entries", path, tasks_line)
    limit = MAX_TASKS if tasks is None else tasks
    src, dst, int_volume, float_volume, problem, i, integral = split_entries(
        tokens.values, tokens.integer_text, limit)
    if problem:
        raise FormatError(_entry_problem(tokens.values[3 * i:3 * i + 3], problem, tasks, tasks_line),
                          path, int(tokens.line_no[i]))
    _check_task_count(src, dst, tasks, tasks_line, tokens, path)
    if tasks is None:
        _warn_if_one_based(src, dst, path)
    if integral:
        volume = int_volume
        big = tokens.big_index % 3 == 2  # integer volumes beyond 2^53, exactly
        volume[tokens.big_index[big] // 3] = tokens.big_value[big]
    else:
        volume = float_volume
    try:
        return CommGraph.from_edges(src, dst, volume, n=tasks)
    except InputError as exc:
        raise as_format_error(exc, path) from None


def _warn_if_one_based(src: np.ndarray, dst: np.ndarray, path) -> None:
    """Warn (one line) when the ranks look 1-based: no ``# tasks:`` header, no entry
    mentions rank 0, and the entries mention every rank 1..max. Rank 0 would then
    be a task that never communicates, which is rarely what the file meant."""
    if src.size == 0 or min(int(src.min()), int(dst.min())) != 1:
        return
    top = max(int(src.max()), int(dst.max()))
    seen = np.zeros(top + 1, dtype=np.bool_)
    seen[src] = True
    seen[dst] = True
    if seen[1:].all():
        _one_based_warning(top, path, stacklevel=6)


def _one_based_warning(top: int, path, stacklevel: int) -> None:
    """The warning of :func:`_warn_if_one_based`; ``stacklevel`` points at the caller of
    read_comm or parse_comm (both call :func:`_parse`)."""
    warnings.warn(f"{os.fspath(path)}: the ranks run 1..{top:,} and no entry mentions rank "
                  "0: the file looks 1-based, but .comm ranks are 0-based, so rank 0 never "
                  f"communicates and {top + 1:,} tasks are mapped (renumber from 0, or add "
                  "'# tasks: N' to keep it as it is)", stacklevel=stacklevel)


def _check_task_count(src: np.ndarray, dst: np.ndarray, tasks: int | None,
                      tasks_line: int | None, tokens, path) -> None:
    """The task count (largest rank + 1, or ``# tasks:``) against what the entries show.

    ``E`` entries show at most ``2E`` ranks; ranks that never communicate are fine,
    but at most ``MAX_SILENT_TASKS`` of them (``procmap.limits``): ``0 2147483645 5``
    alone must not make procmap allocate CSR arrays for 2^31 tasks.
    """
    implied = 0
    try:
        if src.size:
            top = np.maximum(src, dst)
            e = int(np.argmax(top))
            implied = int(top[e]) + 1
            check_declared_tasks(implied, min(implied, 2 * src.size),
                                 f"rank {implied - 1} (the largest)", path, int(tokens.line_no[e]))
        if tasks is not None:
            check_declared_tasks(tasks, min(implied, 2 * src.size), "header '# tasks:'", path,
                                 tasks_line)
    except InputError as exc:
        raise as_format_error(exc, path) from None


# ----------------------------------------------------------------------------- writing
def format_int_lines(values: np.ndarray, line_start: np.ndarray, sep: str = " ") -> bytes:
    """Format integer lines quickly: line ``i`` holds ``values[line_start[i]:line_start[i+1]]``.

    Numbers are joined by ``sep`` and every line ends with ``"\\n"`` (an empty
    line for an empty range). Used by the text writers instead of ``np.savetxt``,
    which is an order of magnitude slower.
    """
    from procmap.kernels.io.format_cpu import format_int_lines as fill

    values = np.ascontiguousarray(values, dtype=np.int64)
    line_start = np.ascontiguousarray(line_start, dtype=np.int64)
    return fill(values, line_start, ord(sep)).tobytes()


def format_float_triples(first: np.ndarray, second: np.ndarray, value: np.ndarray) -> bytes:
    """Lines ``"<int> <int> <float>\\n"``; floats in their shortest round-trip form (``repr``).

    One ``%`` formatting call per chunk keeps the per-line work in C.
    """
    items = np.empty(3 * first.size, dtype=object)
    items[0::3] = first.tolist()
    items[1::3] = second.tolist()
    items[2::3] = np.asarray(value, dtype=np.float64).tolist()  # Python floats: '%r' is repr
    return (("%d %d %r\n" * first.size) % tuple(items)).encode()


def _upper_edges(graph: CommGraph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each undirected edge once as ``(u, v, w)`` with ``u < v``."""
    src = graph.edge_sources()
    upper = graph.adjncy > src
    return src[upper].astype(np.int64), graph.adjncy[upper].astype(np.int64), graph.adjwgt[upper]


def write_comm(graph: CommGraph, path: str | os.PathLike) -> None:
    """Write ``graph`` as ``.comm``: ``# tasks: n`` and one ``u v w`` line per edge, ``u < v``.

    Reading the file back (``C + C^T`` of these entries) gives ``graph`` again,
    except for vertex weights, which ``.comm`` does not store.
    """
    u, v, w = _upper_edges(graph)
    header = ("# procmap comm: 'src dst volume' per line, 0-based ranks; readers sum the entries "
              "into C + C^T\n"
              "# each communicating pair is listed once with its total (symmetrised) volume\n"
              f"# tasks: {graph.n}\n")
    integral = w.dtype.kind in "iu"
    with atomic_write(path, "wb") as handle:
        handle.write(header.encode())
        for start in range(0, u.size, _LINES_PER_CHUNK):
            stop = min(start + _LINES_PER_CHUNK, u.size)
            if integral:
                table = np.column_stack([u[start:stop], v[start:stop], w[start:stop]]).ravel()
                handle.write(format_int_lines(table, np.arange(0, table.size + 1, 3)))
            else:
                handle.write(format_float_triples(u[start:stop], v[start:stop], w[start:stop]))

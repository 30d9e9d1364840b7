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

import numba as nb
import numpy as np

from procmap.errors import FormatError, InputError
from procmap.graph import CommGraph
from procmap.limits import INT64_MAX, MAX_TASKS, check_declared_tasks, exact_sum

from .atomic import as_format_error, atomic_write, read_bytes
from .tokenizer import show_number, tokenize

#: Integers up to here are exact in the tokenizer's float64 values.
_EXACT_INT = 2.0**53

_TASKS_DIRECTIVE = re.compile(rb"#\s*tasks\s*:\s*(.*?)\s*$", re.IGNORECASE)
_LINES_PER_CHUNK = 1 << 20  # bounds the writer's temporary text to ~30 MB


# ----------------------------------------------------------------------------- reading
_BAD_SRC, _BAD_DST, _BAD_VOLUME = 1, 2, 3


@nb.njit(cache=True, nogil=True)
def _split_entries(values, integer_text, limit):
    """Split flat ``src dst volume`` triples into columns and validate them in one pass.

    Returns ``(src, dst, int volume, float volume, problem, entry, integral)``:
    ``problem`` is 0 or one of ``_BAD_*`` for the first bad ``entry``; the int64
    volume column is valid when ``integral`` (every volume a whole number that
    float64 holds exactly, or one written as an integer), which spares CommGraph a
    conversion pass. Volumes beyond 2^53 are left 0 there: the caller fills in
    their exact values from the tokenizer.
    """
    count = values.size // 3
    src = np.empty(count, dtype=np.int64)
    dst = np.empty(count, dtype=np.int64)
    int_volume = np.empty(count, dtype=np.int64)
    float_volume = np.empty(count, dtype=np.float64)
    integral = True
    for e in range(count):
        a = values[3 * e]
        b = values[3 * e + 1]
        w = values[3 * e + 2]
        # 'not (x >= 0)' is also true for NaN
        if not (a >= 0) or a >= limit or a != np.floor(a):
            return src, dst, int_volume, float_volume, _BAD_SRC, e, integral
        if not (b >= 0) or b >= limit or b != np.floor(b):
            return src, dst, int_volume, float_volume, _BAD_DST, e, integral
        if not (w >= 0) or w == np.inf:
            return src, dst, int_volume, float_volume, _BAD_VOLUME, e, integral
        src[e] = np.int64(a)
        dst[e] = np.int64(b)
        float_volume[e] = w
        if integral:
            if w == np.floor(w) and w < _EXACT_INT:
                int_volume[e] = np.int64(w)
            elif integer_text[3 * e + 2]:
                int_volume[e] = 0  # beyond 2^53: exact value from Tokens.big_value
            else:
                integral = False
    return src, dst, int_volume, float_volume, 0, 0, integral


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
    """The error message for a bad ``src dst volume`` entry found by :func:`_split_entries`."""
    if problem == _BAD_VOLUME:
        return f"volume {show_number(entry[2])} must be a finite number >= 0"
    rank = entry[0] if problem == _BAD_SRC else entry[1]
    if not (rank >= 0 and rank == np.floor(rank)):
        return f"rank {show_number(rank)} is not a non-negative integer"
    if tasks is None:
        return f"rank {show_number(rank)} exceeds the largest supported rank {MAX_TASKS - 1}"
    return f"rank {show_number(rank)} out of range: '# tasks: {tasks}' (line {tasks_line})"


def read_comm(path: str | os.PathLike) -> CommGraph:
    """Read a ``.comm`` file into a CommGraph holding ``C + C^T``.

    Raises :class:`FormatError` naming the file and 1-based line for: a line
    without exactly three numbers, a non-integer or negative rank, a rank not
    below ``# tasks: N``, a negative, NaN or infinite volume, and a file with no
    entries (and no ``# tasks:`` line), or zero tasks.

    A file whose entry lines are all plain ``int int int`` (digits only, at most
    18 each) is read straight into CSR arrays (:func:`_read_direct`); any other
    file (float volumes, ``1e3``, an error) is read again by the general tokenizer
    path (:func:`_read_general`), which words every error with its line.
    """
    data = read_bytes(path)
    tasks, tasks_line = _tasks_directive(data, path)
    graph = _read_direct(data, tasks, path)
    if graph is not None:
        return graph
    return _read_general(data, tasks, tasks_line, path)


def _read_direct(data: bytes, tasks: int | None, path) -> CommGraph | None:
    """The fast path of :func:`read_comm` (:mod:`procmap.kernels.comm_cpu`): a parallel
    parse of line-aligned chunks into ``src``/``dst`` (int32) and volumes (int64),
    then the symmetric CSR built directly (degree count of both directions, prefix
    sum, fill, per-row sort and merge of duplicates).

    Returns ``None`` whenever the file is not valid in the plain spelling, or a
    check would fail (the task count, the total weight): the caller then re-reads
    it with the general path, which raises the error. Peak memory: the file, 16
    bytes per entry line and 12 bytes per directed CSR entry, plus 16 per task.
    """
    from procmap.kernels import comm_cpu as kc

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
    ok, top, bottom, heaviest, loops = kc.parse_entries(buf, comment, starts, offsets, limit, src,
                                                        dst, volume)
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
        _one_based_warning(implied - 1, path, stacklevel=4)

    nparts = max(1, min(nb.get_num_threads(), n))
    bounds = np.linspace(0, n, nparts + 1).astype(np.int64)
    position = np.zeros(n, dtype=np.int64)
    kc.count_degrees(src, dst, volume, bounds, position)
    xadj = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(position, out=xadj[1:])
    nnz = int(xadj[-1])
    position[:] = xadj[:-1]
    if nparts > 1:  # rows split by their entries, for the fill
        bounds = np.searchsorted(xadj, np.linspace(0, nnz, nparts + 1)).astype(np.int64)
        bounds[0], bounds[-1] = 0, n
        bounds = np.maximum.accumulate(np.minimum(bounds, n))
    adjncy = np.empty(nnz, dtype=np.int32)
    adjwgt = np.empty(nnz, dtype=np.int64)
    kc.fill_both(src, dst, volume, bounds, position, adjncy, adjwgt)
    del src, dst, volume
    length = position  # reused: the merged length of every row
    kept_entries = int(kc.merge_rows(xadj, adjncy, adjwgt, length))
    if kept_entries != nnz:
        kc.compact_rows(xadj, adjncy, adjwgt, length)
        adjncy.resize(kept_entries, refcheck=False)
        adjwgt.resize(kept_entries, refcheck=False)
    del length, position
    return CommGraph(xadj, adjncy, adjwgt, np.ones(n, dtype=np.int64))


def _read_general(data: bytes, tasks: int | None, tasks_line: int | None, path) -> CommGraph:
    """The general path of :func:`read_comm`: tokenize the whole file, check every
    entry and build with :meth:`CommGraph.from_edges`. Accepts every spelling the
    format allows (float volumes, exponents, 19-digit integers) and names the line
    of any error."""
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
    src, dst, int_volume, float_volume, problem, i, integral = _split_entries(
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
        _one_based_warning(top, path, stacklevel=5)


def _one_based_warning(top: int, path, stacklevel: int) -> None:
    """The warning of :func:`_warn_if_one_based`; ``stacklevel`` points at read_comm's caller."""
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
@nb.njit(cache=True, nogil=True)
def _int_digits(value):
    """Characters needed to print ``value`` in decimal (sign included)."""
    width = 1
    if value < 0:
        width = 2
        value = -value
    while value >= 10:
        value //= 10
        width += 1
    return width


@nb.njit(cache=True, nogil=True)
def _format_int_lines(values, line_start, sep):
    """Bytes of lines ``values[line_start[i]:line_start[i+1]]`` joined by ``sep``, one per line."""
    nlines = line_start.size - 1
    size = 0
    for i in range(nlines):
        a = line_start[i]
        b = line_start[i + 1]
        for k in range(a, b):
            size += _int_digits(values[k])
        if b > a:
            size += b - a - 1
        size += 1
    out = np.empty(size, dtype=np.uint8)
    pos = 0
    for i in range(nlines):
        a = line_start[i]
        b = line_start[i + 1]
        for k in range(a, b):
            if k > a:
                out[pos] = sep
                pos += 1
            value = values[k]
            width = _int_digits(value)
            if value < 0:
                out[pos] = 45  # '-'
                value = -value
            end = pos + width
            j = end - 1
            while True:  # digits right to left
                out[j] = 48 + value % 10
                value //= 10
                j -= 1
                if value == 0:
                    break
            pos = end
        out[pos] = 10
        pos += 1
    return out


def format_int_lines(values: np.ndarray, line_start: np.ndarray, sep: str = " ") -> bytes:
    """Format integer lines quickly: line ``i`` holds ``values[line_start[i]:line_start[i+1]]``.

    Numbers are joined by ``sep`` and every line ends with ``"\\n"`` (an empty
    line for an empty range). Used by the text writers instead of ``np.savetxt``,
    which is an order of magnitude slower.
    """
    values = np.ascontiguousarray(values, dtype=np.int64)
    line_start = np.ascontiguousarray(line_start, dtype=np.int64)
    return _format_int_lines(values, line_start, ord(sep)).tobytes()


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

"""MatrixMarket ``.mtx`` files (NIST MatrixMarket exchange format).

Read:

* ``%%MatrixMarket matrix coordinate <integer|real|pattern> <general|symmetric>``
  and ``%%MatrixMarket matrix array <integer|real> <general|symmetric>``;
  ``%`` comment lines; 1-based indices; ``pattern`` entries weigh 1.
* ``general``: the file is the directed matrix ``C`` (row = sender) and the
  graph is ``C + C^T``, as for ``.comm``.
* ``symmetric``: the file lists one triangle of the already symmetric matrix
  ``S`` (the graph itself, like METIS); each off-diagonal entry is mirrored, so
  the graph is ``S``, not ``2S``.
* ``complex``, ``hermitian``, ``skew-symmetric`` (negative volumes) and vectors
  are rejected; the matrix must be square. Diagonal entries (self traffic) drop.
* As the MatrixMarket spec says, the size line and the indices are integers and an
  ``integer`` field holds integers: ``1e3`` or ``5.0`` there is an error, and values
  are read exactly up to 2^63 - 1. The size may exceed the rows the entries show
  (twice the entries) by at most ``procmap.limits.MAX_SILENT_TASKS``.

Written: ``coordinate integer|real symmetric``, lower triangle, so a write-read
round trip returns the same graph (vertex weights are not stored).

The parser is procmap's own rather than scipy/fast_matrix_market: it is strict
(token counts per line, integer fields, entry counts), names the line of every
problem, and needs no extra dependency. Plain ``coordinate`` files are parsed in
parallel straight into the CSR arrays (:mod:`procmap.kernels.io.comm_cpu`, the passes
of the ``.comm`` reader); everything else, and every error, goes through the
tokenizer.
"""
from __future__ import annotations

import os

import numpy as np

from procmap.errors import FormatError, InputError
from procmap.graph import CommGraph
from procmap.limits import INT64_MAX, MAX_TASKS, check_declared_tasks, exact_sum

from .atomic import as_format_error, atomic_write, read_bytes
from .comm import format_float_triples, format_int_lines, show_number
from .tokenizer import tokenize

_BANNER = "%%matrixmarket"
#: A ``real`` field whose values are all integers below this reads as int64 weights.
_EXACT_INT = 2**53


def _parse_banner(data: bytes, path) -> tuple[str, str, str]:
    """Return ``(format, field, symmetry)`` from the first line, lower case, validated."""
    end = data.find(b"\n")
    first = (data if end < 0 else data[:end]).decode("utf-8", "replace").strip().lower().split()
    if len(first) != 5 or first[0] != _BANNER:
        raise FormatError("first line must be '%%MatrixMarket matrix <coordinate|array> <field> "
                          "<symmetry>'", path, 1)
    obj, layout, field, symmetry = first[1:]
    if obj != "matrix":
        raise FormatError(f"MatrixMarket object {obj!r} is not supported (need 'matrix')", path, 1)
    if layout not in ("coordinate", "array"):
        raise FormatError(f"MatrixMarket format {layout!r} must be 'coordinate' or 'array'", path, 1)
    if field == "complex":
        raise FormatError("complex matrices are not communication volumes", path, 1)
    if field not in ("integer", "real", "pattern"):
        raise FormatError(f"MatrixMarket field {field!r} must be integer, real or pattern", path, 1)
    if field == "pattern" and layout == "array":
        raise FormatError("'pattern' needs the coordinate format", path, 1)
    if symmetry not in ("general", "symmetric"):
        why = " (negative volumes)" if symmetry == "skew-symmetric" else ""
        raise FormatError(f"MatrixMarket symmetry {symmetry!r} is not supported{why}; "
                          "use general or symmetric", path, 1)
    return layout, field, symmetry


#: The values of ``parse_mtx``'s ``reader``.
READERS = ("auto", "direct", "general")


def read_mtx(path: str | os.PathLike) -> CommGraph:
    """Read a MatrixMarket file into a CommGraph (see the module docstring for semantics).

    Parsed as by :func:`parse_mtx` with ``reader="auto"``; the file's bytes are freed
    before the CSR arrays are built.
    """
    # Only the list holds the bytes: the direct path empties it once it cannot fall back.
    return _parse([read_bytes(path)], path, "auto", None)


def parse_mtx(data: bytes, path: str | os.PathLike, *, reader: str = "auto",
              chunks: int | None = None) -> CommGraph | None:
    """Parse the bytes of a MatrixMarket file; ``path`` only names it in errors.

    ``reader`` picks the parser:

    * ``"direct"``: a ``coordinate`` file whose size line and entry lines are plain
      integers (at most 18 digits; an ``integer``, ``pattern``, or ``real`` field whose
      values are all written as integers below 2^53), parsed in parallel line-aligned
      chunks straight into the CSR arrays (:mod:`procmap.kernels.io.comm_cpu`);
    * ``"general"``: the tokenizer; reads every layout and spelling the module
      docstring allows (``array``, ``2.5``, ``1e3``) and raises the
      :class:`FormatError` of any error, with its line;
    * ``"auto"`` (what :func:`read_mtx` does): ``"direct"``, then ``"general"`` for a
      file it declines.

    The direct path gives the general path's graph, array for array, on every file
    it accepts and returns ``None`` on every other one (another layout or spelling,
    or a check that would fail: entry count, declared size, total weight); only
    ``"direct"`` returns ``None``. Every reader raises for a bad banner line.
    ``chunks``: the number of chunks the direct path splits the entry lines into
    (default: one per 64 KiB, at most 8 per Numba thread); every count >= 1 gives the
    same graph.
    """
    if reader not in READERS:
        raise ValueError(f"reader must be one of {', '.join(READERS)}, got {reader!r}")
    if chunks is not None and chunks < 1:
        raise ValueError(f"chunks must be at least 1, got {chunks}")
    return _parse([data], path, reader, chunks)


def _parse(holder: list, path, reader: str, chunks: int | None) -> CommGraph | None:
    """:func:`parse_mtx` on the bytes in the one-element list ``holder`` (see
    :func:`_read_direct` for why a list)."""
    layout, field, symmetry = _parse_banner(holder[0], path)
    if reader != "general" and layout == "coordinate":
        graph = _read_direct(holder, field, path, chunks)
        if graph is not None or reader == "direct":
            return graph
    elif reader == "direct":  # the direct path reads coordinate files only
        return None
    return _read_general(holder[0], layout, field, symmetry, path)


def _read_direct(data: bytes | list, field: str, path,
                 nchunks: int | None = None) -> CommGraph | None:
    """The ``"direct"`` reader of :func:`parse_mtx` for ``coordinate`` files
    (:mod:`procmap.kernels.io.comm_cpu`): a parallel parse of line-aligned chunks into
    ``src``/``dst`` (int32) and volumes (int64), then the symmetric CSR built
    directly (degrees of both directions, fill, per-row sort and merge), as for
    ``.comm``. ``general`` and ``symmetric`` files are the same sum ``C + C^T`` of
    the listed entries (see the module docstring).

    Returns ``None`` whenever the file is not valid in the plain spelling, or a
    check would fail (the entry count, the declared size, the total weight): the
    caller then re-reads it with the general path, which raises the error.

    ``data`` may be a one-element list holding the bytes: the list is emptied as
    soon as the file is parsed and checked (from there on no fall-back is
    possible), so that the bytes are freed before the CSR arrays exist, if the
    caller holds no other reference. Peak memory: the larger of the file plus 16
    bytes per entry line (parse), and 16 bytes per entry line plus 12 bytes per
    directed CSR entry before duplicates merge, plus 16 per row (fill).
    ``nchunks``: ``parse_mtx``'s ``chunks``.
    """
    import numba as nb

    from procmap.kernels.io import comm_cpu as kc
    from procmap.kernels.io.text_cpu import first_line, next_int

    holder = data if isinstance(data, list) else None
    buf = np.frombuffer(data[0] if holder is not None else data, dtype=np.uint8)
    del data
    comment = ord("%")
    head, ntok, body = first_line(buf, comment)
    if ntok != 3:
        return None
    size = []
    pos = int(head)
    for _ in range(3):
        value, pos = next_int(buf, pos, buf.size, comment)
        if value < 0:
            return None
        size.append(int(value))
    n, cols, expected = size
    if n != cols or n == 0 or n > MAX_TASKS:
        return None
    body = buf[int(body):]
    if nchunks is None:
        nchunks = max(1, min(body.size >> 16, 8 * nb.get_num_threads()))
    starts = kc.chunk_starts(body, nchunks)
    counts = kc.count_entries(body, comment, starts)
    offsets = np.zeros(nchunks + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    entries = int(offsets[-1])
    if entries == 0 or entries != expected:
        return None
    try:  # before anything of n entries exists; the general path words the error
        check_declared_tasks(n, min(n, 2 * entries), "", path)
    except InputError:
        return None
    src = np.empty(entries, dtype=np.int32)
    dst = np.empty(entries, dtype=np.int32)
    volume = np.empty(entries, dtype=np.int64)
    per_line = 2 if field == "pattern" else 3
    ok, _, _, heaviest, largest, loops = kc.parse_entries(body, comment, starts, offsets,
                                                          per_line, 1, n, src, dst, volume)
    if not ok:
        return None
    if field == "real" and largest >= _EXACT_INT:  # the general path keeps float64 weights
        return None
    # The total that CommGraph.from_edges checks: volumes without self loops, x 2.
    if int(heaviest) * (entries - int(loops)) > 2**61:
        kept = volume if not loops else np.where(src != dst, volume, 0)
        if 2 * exact_sum(kept) > INT64_MAX:
            return None
        del kept
    del buf, body  # views of the bytes
    if holder is not None:
        holder.clear()
    xadj, adjncy, adjwgt = kc.build_symmetric(src, dst, volume, n)
    return CommGraph(xadj, adjncy, adjwgt, np.ones(n, dtype=np.int64))


def _read_general(data: bytes, layout: str, field: str, symmetry: str, path) -> CommGraph:
    """The ``"general"`` reader of :func:`parse_mtx`: tokenize the whole file, check every
    entry and build with :meth:`CommGraph.from_edges`. Reads every layout and
    spelling the module docstring allows and names the line of any error."""
    tokens = tokenize(data, path, comment="%")  # the banner itself starts with '%'
    if tokens.nlines == 0:
        raise FormatError("missing size line", path)
    counts = tokens.counts()
    size_positions = tokens.positions(0)
    size_line = int(tokens.line_no[0])
    want = 3 if layout == "coordinate" else 2
    if (size_positions.size != want
            or tokens.bad_integer(size_positions, 0, INT64_MAX, written=True) >= 0):
        expected = "'rows cols entries'" if layout == "coordinate" else "'rows cols'"
        raise FormatError(f"size line must be {expected} (non-negative integers)", path, size_line)
    size = tokens.integers(size_positions).tolist()
    rows, cols = size[0], size[1]
    if rows != cols:
        raise FormatError(f"communication matrix must be square, got {rows:,} x {cols:,}", path,
                          size_line)
    n = rows
    if n == 0:
        raise FormatError("empty graph: 0 x 0 matrix", path, size_line)
    if n > MAX_TASKS:
        raise FormatError(f"{n:,} rows exceed the supported {MAX_TASKS:,} tasks", path, size_line)

    body = np.arange(1, tokens.nlines)
    if layout == "coordinate":
        expected_entries = size[2]
        per_line = 2 if field == "pattern" else 3
    else:
        expected_entries = n * n if symmetry == "general" else n * (n + 1) // 2
        per_line = 1
    wrong = np.flatnonzero(counts[body] != per_line)
    if wrong.size:
        i = body[wrong[0]]
        raise FormatError(f"expected {per_line} numbers per entry, found {counts[i]}", path,
                          int(tokens.line_no[i]))
    if body.size != expected_entries:
        if body.size > expected_entries:
            raise FormatError(f"more entries than the {expected_entries:,} the size line "
                              "announces", path, int(tokens.line_no[body[expected_entries]]))
        raise FormatError(f"size line announces {expected_entries:,} entries, found "
                          f"{body.size:,}", path, size_line)
    # the entries are real now; rows they cannot show are ranks that never communicate
    shown = n if layout == "array" else min(n, 2 * body.size)
    try:
        check_declared_tasks(n, shown, "size line", path, size_line)
    except InputError as exc:
        raise as_format_error(exc, path) from None
    first = int(tokens.line_start[1])  # the first token after the size line
    entries = tokens.values[first:].reshape(-1, per_line)
    entry_line = tokens.line_no[1:]
    # token index of each entry's value (its last token)
    value_index = first + per_line * np.arange(body.size, dtype=np.int64) + per_line - 1

    if layout == "coordinate":
        ids = entries[:, :2]
        bad = np.flatnonzero(((ids < 1) | (ids > n) | (ids != np.floor(ids))).any(axis=1))
        if bad.size:
            i = bad[0]
            pair = f"({show_number(entries[i, 0])}, {show_number(entries[i, 1])})"
            raise FormatError(f"index pair {pair} outside 1..{n}", path, int(entry_line[i]))
        volume = np.ones(len(entries), dtype=np.int64) if field == "pattern" else entries[:, 2]
    else:
        volume = entries[:, 0]
    if field == "integer":
        volume = _integer_volumes(tokens, value_index, entry_line, path)
    elif field == "real":
        _check_volumes(volume, entry_line, path)

    if layout == "coordinate":
        src = entries[:, 0].astype(np.int64) - 1
        dst = entries[:, 1].astype(np.int64) - 1
    elif symmetry == "general":
        # column-major: entry k is (row k % n, column k // n)
        k = np.arange(n * n, dtype=np.int64)
        src, dst = k % n, k // n
    else:
        # column-major lower triangle incl. diagonal = row-major upper triangle, transposed
        dst, src = np.triu_indices(n)
    # general: C + C^T of the listed directed entries; symmetric: the listed triangle
    # L plus its mirror, which is exactly the same sum C + C^T with C = L.
    try:
        return CommGraph.from_edges(src, dst, volume, n=n)
    except InputError as exc:
        raise as_format_error(exc, path) from None


def _integer_volumes(tokens, value_index: np.ndarray, line_no: np.ndarray, path) -> np.ndarray:
    """The values of an ``integer`` field, exactly: integers written as such, 0..2^63-1."""
    i = tokens.bad_integer(value_index, 0, INT64_MAX, written=True)
    if i >= 0:
        raise FormatError(f"value {tokens.token_text(value_index[i])} must be an integer in "
                          "0..2^63-1 (the banner declares an 'integer' field)", path,
                          int(line_no[i]))
    return tokens.integers(value_index)


def _check_volumes(volume: np.ndarray, line_no: np.ndarray, path) -> None:
    """The values of a ``real`` field: finite and >= 0."""
    hits = np.flatnonzero(~np.isfinite(volume) | (volume < 0))
    if hits.size:
        i = hits[0]
        raise FormatError(f"value {show_number(volume[i])} must be a finite number >= 0", path,
                          int(line_no[i]))


def write_mtx(graph: CommGraph, path: str | os.PathLike) -> None:
    """Write ``graph`` as ``coordinate integer|real symmetric`` (lower triangle, 1-based)."""
    src = graph.edge_sources()
    lower = src > graph.adjncy
    rows = src[lower].astype(np.int64) + 1
    cols = graph.adjncy[lower].astype(np.int64) + 1
    weight = graph.adjwgt[lower]
    integral = weight.dtype.kind in "iu"
    header = (f"%%MatrixMarket matrix coordinate {'integer' if integral else 'real'} symmetric\n"
              "% procmap: symmetric communication graph C + C^T (row = sender), lower triangle\n"
              f"{graph.n} {graph.n} {rows.size}\n")
    with atomic_write(path, "wb") as handle:
        handle.write(header.encode())
        if integral:
            table = np.column_stack([rows, cols, weight]).ravel()
            handle.write(format_int_lines(table, np.arange(0, table.size + 1, 3)))
        else:
            step = 1 << 20  # bounds the temporary text
            for start in range(0, rows.size, step):
                chunk = slice(start, start + step)
                handle.write(format_float_triples(rows[chunk], cols[chunk], weight[chunk]))

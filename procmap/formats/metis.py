"""METIS ``.graph`` files (METIS 5 manual, section 4.1.1).

Layout::

    % comment lines start with '%'
    n m [fmt [ncon]]
    [size] [w] v1 [e1] v2 [e2] ...     <- line i describes vertex i (1-based ids)

* ``m`` counts undirected edges once; every edge appears in the lines of both
  endpoints with the same weight (the file *is* the symmetric matrix, so it is
  stored as is, not as ``C + C^T``).
* ``fmt`` has up to three digits, written with or without leading zeros:
  hundreds = vertex sizes present (read, checked, ignored), tens = vertex
  weights present, units = edge weights present. ``1`` = ``001``, ``11`` = ``011``.
* A blank line is a vertex without neighbours.

Decisions (documented for users):

* ``ncon > 1`` (multi-constraint vertex weights) is rejected with a clear
  message: procmap balances one weight per task, and silently dropping the
  other constraints would change the problem.
* Self loops are dropped without error (a rank talking to itself costs
  nothing). The header's ``m`` may count them or not: both are accepted.
* Weights must be integers >= 0, as METIS requires, up to 2^63 - 1 (read exactly,
  never through float64); their totals must fit in int64 too. Duplicate neighbours
  in one line are an error (METIS' ``graphchk`` rejects them too).

The writer always writes the 3-digit ``fmt`` (``001``, or ``011`` when some
vertex weight differs from 1) and needs integer edge weights.
"""
from __future__ import annotations

import os

import numpy as np
import scipy.sparse as sp

from procmap.errors import FormatError, InputError
from procmap.graph import CommGraph
from procmap.limits import INT64_MAX, MAX_TASKS, exact_sum

from .atomic import as_format_error, atomic_write, read_bytes
from .comm import format_int_lines, show_number
from .tokenizer import tokenize

_VALID_FMT = (0, 1, 10, 11, 100, 101, 110, 111)


#: Integers up to here are exact in float64.
_INT_EXACT = 2.0 ** 53


def _parse_header(tokens, index: int, path) -> tuple[int, int, int, int]:
    """Validate the header line ``n m [fmt [ncon]]``; return ``(n, m, fmt, ncon)``.

    Checked before anything of size ``n`` or ``m`` exists.
    """
    positions = tokens.positions(index)
    line = int(tokens.line_no[index])
    if not 2 <= positions.size <= 4:
        raise FormatError(f"header must be 'n m [fmt [ncon]]', found {positions.size} numbers",
                          path, line)
    if tokens.bad_integer(positions, 0, INT64_MAX) >= 0:
        raise FormatError("header 'n m [fmt [ncon]]' must hold non-negative integers", path, line)
    header = tokens.integers(positions).tolist()
    n, m = header[0], header[1]
    fmt = header[2] if len(header) > 2 else 0
    if fmt not in _VALID_FMT:
        raise FormatError(f"fmt {fmt} is not a METIS format flag (digits 0/1: sizes, vertex "
                          "weights, edge weights, e.g. 011)", path, line)
    ncon = header[3] if len(header) > 3 else 1
    if len(header) > 3 and (fmt // 10) % 10 == 0:
        raise FormatError(f"ncon = {ncon} given but fmt {fmt:03d} has no vertex weights", path, line)
    if ncon != 1:
        raise FormatError(f"ncon = {ncon}: multi-constraint vertex weights are not supported "
                          "(procmap balances one weight per task)", path, line)
    if n == 0:
        raise FormatError("empty graph: n = 0", path, line)
    if n > MAX_TASKS:
        raise FormatError(f"n = {n:,} exceeds the supported {MAX_TASKS:,} tasks", path, line)
    return n, m, fmt, ncon


def read_metis(path: str | os.PathLike) -> CommGraph:
    """Read a METIS graph file into a CommGraph (stored as given: already symmetric).

    Raises :class:`FormatError` with file and line for a bad header, a vertex
    line with the wrong number of values for ``fmt``, neighbour ids outside
    ``1..n``, non-integer or negative weights, an edge missing from its other
    endpoint's line or with a different weight there ("asymmetric"), duplicate
    neighbours, too few/many vertex lines and an ``m`` that does not match.
    The file is parsed by :func:`parse_metis` with ``reader="auto"``.
    """
    return parse_metis(read_bytes(path), path)


#: The values of ``parse_metis``'s ``reader``.
READERS = ("auto", "direct", "general")


def parse_metis(data: bytes, path: str | os.PathLike, *, reader: str = "auto",
                chunks: int | None = None) -> CommGraph | None:
    """Parse the bytes of a METIS graph file; ``path`` only names it in errors.

    ``reader`` picks the parser:

    * ``"direct"``: the CSR arrays built straight from the bytes in parallel passes
      over line-aligned chunks, then verified (:mod:`procmap.kernels.io.metis_cpu`,
      :mod:`procmap.kernels.io.validate_cpu`);
    * ``"general"``: the tokenizer, COO arrays and :meth:`CommGraph.from_edges`;
      accepts every spelling the format allows (``2.0``, ``+3``, 19-digit integers,
      zero edge weights) and raises the :class:`FormatError` of any error, with its
      line;
    * ``"auto"`` (what :func:`read_metis` does): ``"direct"``, then ``"general"`` for a
      file it declines.

    The direct path gives the general path's graph, array for array, on every file it
    accepts and returns ``None`` on every other one (an error or a rarer spelling);
    only ``"direct"`` returns ``None``. ``chunks``: the number of chunks the direct
    path splits the vertex lines into (default: one per 64 KiB, at most 8 per Numba
    thread); every count >= 1 gives the same graph.
    """
    if reader not in READERS:
        raise ValueError(f"reader must be one of {', '.join(READERS)}, got {reader!r}")
    if chunks is not None and chunks < 1:
        raise ValueError(f"chunks must be at least 1, got {chunks}")
    if reader != "general":
        graph = _read_direct(data, path, chunks)
        if graph is not None or reader == "direct":
            return graph
    return _read_general(data, path)


def _read_direct(data: bytes, path, nchunks: int | None = None) -> CommGraph | None:
    """The ``"direct"`` reader of :func:`parse_metis`: build the CSR arrays in two parallel
    passes over line-aligned chunks of the bytes (count lines and tokens, then parse
    into ``adjncy``/``adjwgt``/``vwgt``/``xadj``), verify them with
    :mod:`procmap.kernels.io.validate_cpu` and wrap them as they are.

    Returns ``None`` whenever the file is not a valid graph in the plain spelling
    (the caller then re-reads it with the general path, which raises the error or
    accepts the rarer spelling). Peak memory: the file, 12 bytes per directed edge
    (``adjncy`` int32 + ``adjwgt`` int64) and 16 bytes per vertex (``xadj``,
    ``vwgt``); nothing per line. ``nchunks``: ``parse_metis``'s ``chunks``.
    """
    import numba as nb

    from procmap.kernels.io import metis_cpu as km
    from procmap.kernels.io import validate_cpu as kv
    from procmap.kernels.io.comm_cpu import chunk_starts
    from procmap.kernels.io.text_cpu import first_line, next_int

    buf = np.frombuffer(data, dtype=np.uint8)
    comment = ord("%")
    head, ntok, body = first_line(buf, comment)
    if head < 0 or not 2 <= ntok <= 4:
        return None
    header = []
    pos = int(head)
    for _ in range(int(ntok)):
        value, pos = next_int(buf, pos, buf.size, comment)
        if value < 0:
            return None
        header.append(int(value))
    n, m = header[0], header[1]
    fmt = header[2] if len(header) > 2 else 0
    if fmt not in _VALID_FMT or len(header) > 3 and (header[3] != 1 or (fmt // 10) % 10 == 0):
        return None
    if n == 0 or n > MAX_TASKS:
        return None
    has_size, has_vwgt, has_ewgt = fmt // 100, (fmt // 10) % 10, fmt % 10
    step = 1 + has_ewgt

    body = buf[int(body):]
    if nchunks is None:
        nchunks = max(1, min(body.size >> 16, 8 * nb.get_num_threads()))
    starts = chunk_starts(body, nchunks)
    lines, tokens = km.count_lines(body, comment, starts)
    first_vertex = np.zeros(nchunks + 1, dtype=np.int64)
    np.cumsum(lines, out=first_vertex[1:])
    if first_vertex[-1] < n:  # too few vertex lines: checked before allocating n
        return None
    vertex_lines = np.diff(np.minimum(first_vertex, n))
    rest = tokens - (has_size + has_vwgt) * vertex_lines
    if np.any((rest < 0) | (rest % step != 0)):
        return None
    first_entry = np.zeros(nchunks + 1, dtype=np.int64)
    np.cumsum(rest // step, out=first_entry[1:])
    nnz = int(first_entry[-1])
    xadj = np.empty(n + 1, dtype=np.int64)
    xadj[0] = 0
    adjncy = np.empty(nnz, dtype=np.int32)
    adjwgt = np.empty(nnz, dtype=np.int64)
    vwgt = np.ones(n, dtype=np.int64)
    ok, loops, zeros, unsorted = km.fill_rows(body, comment, starts, first_vertex, first_entry,
                                              bool(has_size), bool(has_vwgt), bool(has_ewgt),
                                              xadj, adjncy, adjwgt, vwgt)
    if not ok or zeros:  # zero weights: the general path drops them after its checks
        return None
    if loops:
        nnz = int(km.drop_self_loops(xadj, adjncy, adjwgt))
        adjncy, adjwgt = adjncy[:nnz], adjwgt[:nnz]
    if unsorted:
        km.sort_rows(xadj, adjncy, adjwgt)
    entry, code, upper, largest, total, _ = kv.check_rows(xadj, adjncy, adjwgt, 1)
    if code != kv.OK or 2 * upper != nnz:
        return None
    found = nnz // 2
    if m != found and m != found + loops:
        return None
    if largest * nnz > 2.0 ** 62 and exact_sum(adjwgt) > INT64_MAX:
        return None
    vertex_total = exact_sum(vwgt) if has_vwgt else n
    if vertex_total > INT64_MAX:
        return None
    # Positive integer weights whose float64 total (check_rows') stays below 2^53 have
    # that total exactly: the graph keeps it (map_tasks needs it; a pass saved).
    edge_total = int(total) if total < _INT_EXACT else None
    return CommGraph(xadj, adjncy, adjwgt, vwgt).keep_totals(edge=edge_total, vertex=vertex_total)


def _read_general(data: bytes, path) -> CommGraph:
    """The ``"general"`` reader of :func:`parse_metis`: tokenize the whole file, build COO
    arrays, check symmetry by sorting and build with :meth:`CommGraph.from_edges`.
    Accepts every spelling the format allows and names the line of any error."""
    tokens = tokenize(data, path, comment="%", keep_blank=True)
    counts = tokens.counts()
    nonblank = np.flatnonzero(counts > 0)
    if nonblank.size == 0:
        raise FormatError("no header line 'n m [fmt [ncon]]'", path)
    head = int(nonblank[0])
    header_line = int(tokens.line_no[head])
    n, m, fmt, ncon = _parse_header(tokens, head, path)
    has_size, has_vwgt, has_ewgt = fmt // 100, (fmt // 10) % 10, fmt % 10

    # Vertex lines follow the header; blank lines after the n-th are trailing space.
    lines = np.arange(head + 1, tokens.nlines)
    if lines.size < n:  # before any array of size n exists
        raise FormatError(f"header says n = {n:,} vertices but only {lines.size:,} vertex lines "
                          "follow", path, header_line)
    extra = lines[n:][counts[lines[n:]] > 0]
    if extra.size:
        raise FormatError(f"more vertex lines than n = {n} (header on line {header_line})",
                          path, int(tokens.line_no[extra[0]]))
    lines = lines[:n]
    line_no = tokens.line_no[lines]
    starts = tokens.line_start[lines]

    # Token counts: [size] [ncon weights] then deg neighbours (with a weight each if fmt says so).
    prefix = has_size + has_vwgt * ncon
    step = 1 + has_ewgt
    rest = counts[lines] - prefix
    bad = np.flatnonzero((rest < 0) | (rest % step != 0))
    if bad.size:
        i = bad[0]
        layout = ("[size] " if has_size else "") + ("weight " if has_vwgt else "")
        layout += "then neighbour weight pairs" if has_ewgt else "then neighbours"
        raise FormatError(f"vertex {i + 1} has {counts[lines[i]]} numbers; fmt {fmt:03d} expects "
                          f"{layout}", path, int(line_no[i]))
    degree = rest // step

    if has_size:
        i = tokens.bad_integer(starts, 0, INT64_MAX)
        if i >= 0:
            raise FormatError(f"vertex size {tokens.token_text(starts[i])} is not an integer "
                              ">= 0", path, int(line_no[i]))
    vwgt = None
    if has_vwgt:
        i = tokens.bad_integer(starts + has_size, 0, INT64_MAX)
        if i >= 0:
            raise FormatError(f"vertex weight {tokens.token_text(starts[i] + has_size)} is not an "
                              "integer in 0..2^63-1", path, int(line_no[i]))
        vwgt = tokens.integers(starts + has_size)

    # Gather every (vertex, neighbour, weight) entry with index arithmetic.
    first = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(degree, out=first[1:])
    total = int(first[-1])
    src = np.repeat(np.arange(n, dtype=np.int64), degree)
    position = np.repeat(starts + prefix - step * first[:-1], degree) + step * np.arange(total)
    neighbour = tokens.values[position]
    i = tokens.bad_integer(position, 1, n)
    if i >= 0:
        raise FormatError(f"neighbour {show_number(neighbour[i])} of vertex {src[i] + 1} is not a "
                          f"vertex id 1..{n}", path, int(line_no[src[i]]))
    dst = neighbour.astype(np.int64) - 1
    if has_ewgt:
        i = tokens.bad_integer(position + 1, 0, INT64_MAX)
        if i >= 0:
            raise FormatError(f"edge weight {tokens.token_text(position[i] + 1)} is not an integer "
                              "in 0..2^63-1 (METIS weights are integers)", path,
                              int(line_no[src[i]]))
        weight = tokens.integers(position + 1)
    else:
        weight = np.ones(total, dtype=np.int64)

    loop = src == dst
    loops = int(loop.sum())
    if loops:
        keep = ~loop
        src, dst, weight = src[keep], dst[keep], weight[keep]
    _check_symmetric(src, dst, weight, n, line_no, path)
    found = src.size // 2
    if m != found and m != found + loops:
        loops_note = f" (and {loops:,} self loops, dropped)" if loops else ""
        raise FormatError(f"header says m = {m:,} edges but the vertex lines hold {found:,}"
                          f"{loops_note}", path, header_line)
    upper = src < dst  # the symmetric matrix is C + C^T of its upper triangle
    try:
        return CommGraph.from_edges(src[upper], dst[upper], weight[upper], n=n, vwgt=vwgt)
    except InputError as exc:
        raise as_format_error(exc, path) from None


def _check_symmetric(src: np.ndarray, dst: np.ndarray, weight: np.ndarray, n: int,
                     line_no: np.ndarray, path) -> None:
    """Every entry u->v needs exactly one mirror v->u with the same weight.

    Fast test: the entries, grouped by ``src`` as in the file, form a CSR matrix;
    with indices sorted per row and no duplicates it is symmetric exactly when
    it equals its transpose array by array. Only a failing file pays for
    :func:`_explain_asymmetry`, which finds the offending line.
    """
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=indptr[1:])
    # copy: sort_indices works in place and the caller's arrays must keep file order
    matrix = sp.csr_matrix((weight, dst, indptr), shape=(n, n), copy=True)
    matrix.sort_indices()
    indices = matrix.indices
    row_start = np.zeros(indices.size, dtype=bool)
    row_start[indptr[:-1][indptr[:-1] < indptr[1:]]] = True
    duplicate = (indices[1:] == indices[:-1]) & ~row_start[1:]
    if not duplicate.any():
        mirror = matrix.transpose().tocsr()
        mirror.sort_indices()
        if (np.array_equal(matrix.indptr, mirror.indptr)
                and np.array_equal(matrix.indices, mirror.indices)
                and np.array_equal(matrix.data, mirror.data)):
            return
    _explain_asymmetry(src, dst, weight, n, line_no, path)
    raise AssertionError("unreachable: the CSR test and the sort test disagree")


def _explain_asymmetry(src: np.ndarray, dst: np.ndarray, weight: np.ndarray, n: int,
                       line_no: np.ndarray, path) -> None:
    """Raise a FormatError naming the first duplicate, missing mirror or weight mismatch.

    Sorting the keys ``u*n+v`` and ``v*n+u`` gives the same sequence exactly when
    the entry set is closed under reversal; weights are compared in that order.
    """
    forward = src * n + dst
    order = np.argsort(forward, kind="stable")
    sorted_forward = forward[order]
    dup = np.flatnonzero(sorted_forward[1:] == sorted_forward[:-1])
    if dup.size:
        e = order[dup[0] + 1]
        raise FormatError(f"vertex {src[e] + 1} lists neighbour {dst[e] + 1} twice", path,
                          int(line_no[src[e]]))
    backward = dst * n + src
    border = np.argsort(backward, kind="stable")
    sorted_backward = backward[border]
    differ = np.flatnonzero(sorted_forward != sorted_backward)
    if differ.size:
        i = differ[0]
        # The smaller key at the first difference is an entry whose mirror is missing.
        e = order[i] if sorted_forward[i] < sorted_backward[i] else border[i]
        u, v = int(src[e]) + 1, int(dst[e]) + 1
        raise FormatError(f"asymmetric graph: edge {u}-{v} is in the line of vertex {u} but not "
                          f"in the line of vertex {v} (line {int(line_no[v - 1])})", path,
                          int(line_no[u - 1]))
    differ = np.flatnonzero(weight[order] != weight[border])
    if differ.size:
        e, f = order[differ[0]], border[differ[0]]
        u, v = int(src[e]) + 1, int(dst[e]) + 1
        raise FormatError(f"asymmetric weights: edge {u}-{v} has weight {weight[e]} in the line of "
                          f"vertex {u} but {weight[f]} in the line of vertex {v} "
                          f"(line {int(line_no[v - 1])})", path, int(line_no[u - 1]))


def write_metis(graph: CommGraph, path: str | os.PathLike) -> None:
    """Write ``graph`` as a METIS file with fmt ``001`` (or ``011`` with vertex weights).

    Raises :class:`FormatError` if the edge weights are not integers (METIS
    cannot store them; use ``.comm``, ``.mtx`` or ``.npz``).
    """
    if graph.adjwgt.dtype.kind not in "iu":
        raise FormatError("METIS needs integer weights; this graph has fractional edge weights "
                          "(write .comm, .mtx or .npz instead)", path)
    n = graph.n
    with_vwgt = bool(np.any(graph.vwgt != 1))
    head = int(with_vwgt)
    degree = graph.degrees()
    # Line u = [vwgt[u]] then (neighbour + 1, weight) per CSR entry e, so entry e of
    # vertex u sits at 2*e + (u+1)*head in the flat token array.
    line_start = 2 * graph.xadj + head * np.arange(n + 1, dtype=np.int64)
    flat = np.empty(int(line_start[-1]), dtype=np.int64)
    if with_vwgt:
        flat[line_start[:-1]] = graph.vwgt
    position = 2 * np.arange(graph.num_directed_edges, dtype=np.int64)
    position += head * (np.repeat(np.arange(n, dtype=np.int64), degree) + 1)
    flat[position] = graph.adjncy.astype(np.int64) + 1
    flat[position + 1] = graph.adjwgt
    fmt = "011" if with_vwgt else "001"
    header = ("% procmap: symmetric communication graph (C + C^T), 1-based neighbour ids\n"
              f"{n} {graph.m} {fmt}\n")
    with atomic_write(path, "wb") as handle:
        handle.write(header.encode())
        handle.write(format_int_lines(flat, line_start))

"""Host lists: Slurm hostlist expressions, per-node CPU counts and MPI hostfiles.

Slurm hands a job its nodes as a compressed *hostlist expression*
(``node[01-04,07]``, ``a[1-2]b[3-4]``) and its CPUs as a run-length list
(``SLURM_JOB_CPUS_PER_NODE=36(x2),72``). A Slurm prolog must not call
``scontrol`` (launchers notes, section 3.4), so procmap expands these itself. The
expansion is delegated to python-hostlist (pure Python, the reference used by many
site tools); this module only adds validation and one-line :class:`TopologyError`
messages that name the offending text.

Every host name, from a host list, a hostfile or Slurm, passes
:func:`check_host_name`: letters, digits, ``-``, ``.`` and ``_`` only, so that a
name never carries a ``:``, ``=`` or space into a rankfile or machinefile, where it
would change the meaning of the line.
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterable

from procmap.errors import TopologyError
from procmap.limits import MAX_PES, MAX_SLOTS, is_decimal_int, parse_count

# Absolute import of the third-party module of the same name: inside the package
# this module is ``procmap.topology.hostlist``, so there is no clash.
import hostlist as _pyhostlist

__all__ = ["check_host_name", "expand_hostlist", "compress_hostlist", "parse_cpus_per_node",
           "read_hostfile"]

# Slurm's own hostlist parser splits on commas and on white space (tab, space,
# newline), and skips empty items; we do the same so that a node list pasted
# from a file (one host a line) is accepted.
_SEPARATORS = re.compile(r"[\s,]+")

# Upper bound on the number of nodes a host list or a run-length CPU list may
# describe: every node holds at least one PE, so more than MAX_PES nodes can never
# be a machine, and a typo like "32(x1000000000)" must not allocate gigabytes.
_MAX_NODES = MAX_PES

# What launcher files can carry: a ':' would read as host:slots in a machinefile,
# '=' and spaces would split a hostfile or rankfile line.
_HOST_NAME = re.compile(r"[A-Za-z0-9._-]+")


def check_host_name(name: str, where: str = "") -> str:
    """Return ``name`` if it is a usable host name, else raise :class:`TopologyError`.

    A host name is a non-empty string of ASCII letters, digits, ``-``, ``.`` and
    ``_``. ``where`` starts the message (``"hosts.txt:3"``, ``"host list 'a,b'"``)
    so that it points at the input to fix.
    """
    if isinstance(name, str) and _HOST_NAME.fullmatch(name):
        return name
    prefix = f"{where}: " if where else ""
    shown = repr(str(name)) if isinstance(name, str) else repr(name)  # np.str_ as plain text
    raise TopologyError(f"{prefix}invalid host name {shown}: host names may contain only "
                        "letters, digits, '-', '.' and '_'")


def _split_top_level(text: str) -> list[str]:
    """Split ``text`` at separators outside brackets (``n[1,3],m2`` -> 2 items)."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif depth == 0 and (ch == "," or ch.isspace()):
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return [item for item in items if item]


def expand_hostlist(text: str) -> list[str]:
    """Expand a Slurm hostlist expression into host names.

    ``"node[01-03,07]"`` -> ``["node01", "node02", "node03", "node07"]``; zero
    padding is kept, ``a[1-2]b[3-4]`` expands to the product in Slurm's order,
    and items may be separated by commas or white space. The order of the text is
    kept and duplicates are kept, as ``scontrol show hostnames`` does: callers that
    need a set (a job's node list) check uniqueness themselves.

    Raises
    ------
    TopologyError
        On an empty list, unbalanced brackets (``node[01-``), reversed or bad
        ranges (``node[3-1]``, ``node[a-b]``), a list too large to expand (more
        than ``MAX_PES`` hosts) or a name that :func:`check_host_name` refuses.
    """
    if not isinstance(text, str):
        raise TopologyError(f"host list must be a string, got {type(text).__name__}")
    items = _split_top_level(text.strip())
    if not items:
        raise TopologyError(f"host list {text!r} is empty")
    hosts: list[str] = []
    for item in items:
        try:
            # allow_duplicates keeps "n1,n1" as two entries; sort=False keeps
            # "n[3,1]" in the order written.
            hosts.extend(_pyhostlist.expand_hostlist(item, allow_duplicates=True, sort=False))
        except _pyhostlist.BadHostlist as exc:
            raise TopologyError(f"malformed host list {text!r}: {exc} in {item!r}") from None
        if len(hosts) > _MAX_NODES:
            raise TopologyError(f"host list {text!r} names more than {_MAX_NODES:,} hosts")
    for host in hosts:
        check_host_name(host, f"host list {text!r}")
    return hosts


def compress_hostlist(hosts: Iterable[str]) -> str:
    """Compress host names into a Slurm hostlist expression.

    ``["n1", "n2", "n3", "n7"]`` -> ``"n[1-3,7]"``. The result describes the
    *set* of hosts the way Slurm prints node lists: duplicates are removed and the
    names are sorted numerically, so ``expand_hostlist(compress_hostlist(h))`` is
    ``h`` exactly when ``h`` is already sorted and unique (a job's node list).
    Use one host a line (``SLURM_HOSTFILE``) where the order of ranks matters.

    Raises
    ------
    TopologyError
        If a name is not a valid host name (:func:`check_host_name`).
    """
    if isinstance(hosts, str):
        # A bare string would be iterated character by character.
        raise TopologyError(f"compress_hostlist expects a list of host names, got the string {hosts!r}")
    names = list(hosts)
    if not names:
        raise TopologyError("cannot compress an empty host list")
    for name in names:
        check_host_name(name)
    try:
        return _pyhostlist.collect_hostlist(names)
    except _pyhostlist.BadHostlist as exc:  # pragma: no cover - names are pre-checked
        raise TopologyError(f"cannot compress host list: {exc}") from None


# ASCII digits only: \d would also match fullwidth and other Unicode digits.
_CPU_ITEM = re.compile(r"([0-9]+)(?:\(x([0-9]+)\))?")


def parse_cpus_per_node(text: str, nnodes: int | None = None) -> list[int]:
    """Parse Slurm's run-length CPU counts, e.g. ``SLURM_JOB_CPUS_PER_NODE``.

    ``"32(x6)"`` -> six 32s, ``"36(x2),72"`` -> ``[36, 36, 72]``, ``"4"`` -> ``[4]``.
    The same syntax is used by ``SLURM_TASKS_PER_NODE``. White space around items
    is tolerated.

    Parameters
    ----------
    text:
        The variable's value.
    nnodes:
        If given, the number of nodes the list must describe (the length of the
        job's node list).

    Raises
    ------
    TopologyError
        On syntax errors (numbers are ASCII digits), zero repetitions, a count above
        ``MAX_PES`` CPUs on a node or ``MAX_PES`` nodes in all (checked before the
        list is built), or a node count other than ``nnodes``.
    """
    if not isinstance(text, str) or not text.strip():
        raise TopologyError(f"CPU count list {text!r} is empty")
    counts: list[int] = []
    for item in text.split(","):
        m = _CPU_ITEM.fullmatch(item.strip())
        if m is None:
            raise TopologyError(f"malformed CPU count list {text!r}: {item.strip()!r} is not "
                                "of the form N or N(xR)")
        value = int(m.group(1))
        repeat = 1 if m.group(2) is None else int(m.group(2))
        if repeat < 1:
            raise TopologyError(f"malformed CPU count list {text!r}: repetition count in {item.strip()!r} must be >= 1")
        if value > MAX_PES:
            raise TopologyError(f"CPU count list {text!r}: {value:,} CPUs on a node; procmap "
                                f"handles at most {MAX_PES:,} PEs")
        if len(counts) + repeat > _MAX_NODES:
            raise TopologyError(f"CPU count list {text!r} describes more than {_MAX_NODES:,} nodes")
        counts.extend([value] * repeat)
    if nnodes is not None and len(counts) != nnodes:
        raise TopologyError(f"CPU count list {text!r} describes {len(counts)} node"
                            f"{'s' if len(counts) != 1 else ''}, expected {nnodes}")
    return counts


# Spellings of the per-host limit accepted by Open MPI's (PRRTE's) hostfile lexer.
_MAX_SLOT_KEYS = frozenset(f"{a}{sep}{b}" for a, b in (("max", "slots"), ("slots", "max"),
                                                       ("max", "cpu"), ("cpu", "max"),
                                                       ("max", "count"), ("count", "max"))
                           for sep in "_-")


def _positive_int(text: str, path: str, lineno: int, what: str) -> int:
    """A slot count of a hostfile: ASCII digits, 1..MAX_SLOTS."""
    return parse_count(text, f"{path}:{lineno}: {what} {text!r}", 1, MAX_SLOTS, TopologyError)


def read_hostfile(path: str | os.PathLike) -> list[tuple[str, int]]:
    """Read an Open MPI hostfile or an MPICH/Hydra/Intel machinefile.

    Accepted lines (``#`` starts a comment anywhere, blank lines are skipped)::

        node01 slots=4          # Open MPI
        node01 slots=4 max_slots=8   # also "slots = 4", cpu=4, count=4
        node02:4                # MPICH / Hydra / Intel MPI
        node03                  # one slot

    Returns ``(host, slots)`` pairs in file order. A host listed twice appears
    twice: Open MPI adds the slots up while Hydra hands out the entries in turn,
    so the caller decides. A UTF-8 byte order mark (left by some Windows editors)
    is skipped.

    Raises
    ------
    TopologyError
        Naming file and line, for an invalid host name (:func:`check_host_name`), a
        bad slot count, an unknown option, or a file without hosts. ``OSError``
        propagates when the file cannot be read.
    """
    path_str = os.fspath(path)
    entries: list[tuple[str, int]] = []
    try:
        # utf-8-sig drops a leading BOM, which would otherwise become part of the
        # first host name.
        with open(path_str, encoding="utf-8-sig") as fh:
            lines = fh.readlines()
    except UnicodeDecodeError:
        raise TopologyError(f"{path_str}: not a text hostfile") from None
    for lineno, raw in enumerate(lines, start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        # Open MPI's lexer takes "=" as its own token, so "slots = 4" is valid.
        tokens = re.sub(r"\s*=\s*", "=", line).split()
        host, sep, count = tokens[0].partition(":")
        if not host:
            raise TopologyError(f"{path_str}:{lineno}: missing host name in {line!r}")
        check_host_name(host, f"{path_str}:{lineno}")
        slots = _positive_int(count, path_str, lineno, "slot count") if sep else 1
        slots_given = bool(sep)
        max_slots = None
        for token in tokens[1:]:
            key, eq, value = token.partition("=")
            key = key.lower()
            if not eq:
                raise TopologyError(f"{path_str}:{lineno}: expected key=value after the host "
                                    f"name, got {token!r}")
            if key in ("slots", "cpu", "count"):
                # "cpu" and "count" are older Open MPI spellings of "slots".
                if slots_given:
                    raise TopologyError(f"{path_str}:{lineno}: slot count given twice in {line!r}")
                slots = _positive_int(value, path_str, lineno, "slots")
                slots_given = True
            elif key in _MAX_SLOT_KEYS:
                max_slots = _positive_int(value, path_str, lineno, "max_slots")
            else:
                raise TopologyError(f"{path_str}:{lineno}: unknown hostfile option {key!r} "
                                    "(expected slots=N or max_slots=N)")
        if max_slots is not None and max_slots < slots:
            raise TopologyError(f"{path_str}:{lineno}: max_slots={max_slots} is less than slots={slots}")
        entries.append((host, slots))
    if not entries:
        raise TopologyError(f"{path_str}: no hosts in hostfile")
    return entries

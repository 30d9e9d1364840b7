"""Open MPI rankfiles and the launch line that matches the installed version.

Rankfile lines use the flat form ``rank N=<host> slot=<node-local core>`` for every
rank: the ``socket:core`` form was mis-bound by PRRTE
(openpmix/prrte#772), a missing rank is an error (``missing-rank``), and ``slot=pN``
(physical ids) was silently bound to core 0 by 4.1.4.

The option that reads a rankfile changed between versions: Open MPI 4
(ORTE) takes ``--rankfile F`` and rejects ``--map-by rankfile:file=F``; Open MPI 5
(PRRTE) takes ``--map-by rankfile:file=F`` and only warns about ``--rankfile``.
:func:`detect_openmpi` runs ``mpirun --version`` to pick the right one; Open MPI 4
says ``(OpenRTE) 4.1.4`` after whatever the launcher is called (``mpirun.openmpi``,
``orterun``), 5 says ``(Open MPI) 5.0.11`` (:mod:`.mpi_detect` reads both). The launch
line starts with the launcher's name as given (``--mpirun``), so that it runs verbatim
where it was printed (docs/design.md section 6).
"""
from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from procmap.errors import ProcmapError
from procmap.formats import atomic_write

from . import mpi_detect

__all__ = ["OpenMPIVersion", "rankfile_text", "write_rankfile", "parse_version_output",
           "parse_forced_version", "version_of", "detect_openmpi", "launch_lines",
           "OVERSUBSCRIBE_NOTE"]

OVERSUBSCRIBE_NOTE = ("do not add --oversubscribe: Open MPI 5 then silently drops every rankfile "
                      "binding (and refuses the rankfile without it when a host has too few slots)")


@dataclass(frozen=True)
class OpenMPIVersion:
    """What is known about the Open MPI that will launch the job.

    Attributes
    ----------
    major:
        4 (ORTE: ``--rankfile``) or 5 (PRRTE: ``--map-by rankfile:file=``); versions
        before 4 use the ORTE option too and are reported as themselves. ``None``
        when unknown.
    version:
        The version text (``"4.1.4"``), or ``None``.
    source:
        How it was found: ``"--openmpi-version"``, the ``mpirun`` path, or why
        detection failed (``"mpirun not found"``, ``"not Open MPI"``, ...).
    """

    major: int | None
    version: str | None
    source: str

    @property
    def known(self) -> bool:
        return self.major is not None


def rankfile_text(hosts: Sequence[str], node_of_rank: np.ndarray, cores: np.ndarray) -> str:
    """The rankfile: ``rank r=<hosts[node]> slot=<core>`` for every rank ``r`` in order."""
    lines = [f"rank {r}={hosts[node]} slot={core}\n"
             for r, (node, core) in enumerate(zip(np.asarray(node_of_rank).tolist(),
                                                  np.asarray(cores).tolist()))]
    return "".join(lines)


def write_rankfile(path: str | os.PathLike, hosts: Sequence[str], node_of_rank: np.ndarray,
                   cores: np.ndarray) -> None:
    """Write :func:`rankfile_text` atomically (never a half-written rankfile)."""
    text = rankfile_text(hosts, node_of_rank, cores)
    with atomic_write(path) as fh:
        fh.write(text)


def parse_version_output(text: str) -> tuple[int, str] | None:
    """``(major, "x.y.z")`` from ``mpirun --version`` output, or ``None``.

    Reads ``mpirun (Open MPI) 5.0.11`` and Open MPI 4's ``mpirun (OpenRTE) 4.1.4``,
    whatever the launcher is called. ``None`` means the output does not name Open
    MPI with a readable version (MPICH's Hydra prints "HYDRA build details", Intel
    MPI "Intel(R) MPI Library").
    """
    return mpi_detect.parse_openmpi_version(text)


def parse_forced_version(text: str) -> OpenMPIVersion:
    """Read ``--openmpi-version`` (``4``, ``5``, ``4.1.4``, ``5.0.11``).

    Raises
    ------
    ProcmapError
        For anything but a 4.x or 5.x version: the launch line would be a guess.
    """
    m = re.fullmatch(r"\s*v?(\d+)(?:\.\d+){0,2}\s*", text or "")
    if m is None or int(m.group(1)) not in (4, 5):
        raise ProcmapError(f"--openmpi-version {text!r}: unknown Open MPI version; expected 4 "
                           "or 5 (e.g. 4.1.4, 5.0.11)")
    return OpenMPIVersion(int(m.group(1)), text.strip().lstrip("v"), "--openmpi-version")


def version_of(info: mpi_detect.MPIInfo) -> OpenMPIVersion:
    """The :class:`OpenMPIVersion` of a :func:`.mpi_detect.detect_mpi` result."""
    where = info.path or info.name
    if info.kind is None:
        return OpenMPIVersion(None, None, info.reason)
    if info.kind != mpi_detect.OPENMPI:
        return OpenMPIVersion(None, None, f"{where} is {info.label}, not Open MPI")
    parsed = parse_version_output(f"(Open MPI) {info.version}") if info.version else None
    if parsed is None:
        said = f" (it says {info.said!r})" if info.said else ""
        return OpenMPIVersion(None, None, f"{where} is an unreadable Open MPI version{said}")
    return OpenMPIVersion(parsed[0], parsed[1], where)


def detect_openmpi(mpirun: str = "mpirun",
                   timeout: float = mpi_detect.DEFAULT_TIMEOUT) -> OpenMPIVersion:
    """Run ``mpirun --version`` and read the Open MPI version; never raises.

    A missing, hanging, failing or non-Open-MPI ``mpirun`` gives ``major=None`` with
    the reason in :attr:`OpenMPIVersion.source`, so that the caller can print both
    launch forms instead of a wrong one.
    """
    return version_of(mpi_detect.detect_mpi(mpirun, timeout))


def _line(mpirun: str, option: list[str], n: int, app: str) -> str:
    return shlex.join([mpirun, "-n", str(n), *option]) + f" {app}"


def launch_lines(version: OpenMPIVersion, n: int, rankfile: str, app: str = "./app",
                 mpirun: str = "mpirun") -> list[tuple[str, str]]:
    """``[(label, command), ...]``: one line for a known version, both when unknown.

    Open MPI 4 and older (ORTE) read ``--rankfile``; 5 and later (PRRTE) read
    ``--map-by rankfile:file=``. Every line starts with ``mpirun`` as given (a name
    on PATH such as ``mpirun.openmpi``, or a path), shell-quoted.
    """
    v4 = _line(mpirun, ["--rankfile", rankfile], n, app)
    v5 = _line(mpirun, ["--map-by", f"rankfile:file={rankfile}"], n, app)
    if version.major is None:
        return [("Open MPI 4", v4), ("Open MPI 5", v5)]
    if version.major >= 5:
        return [(f"Open MPI {version.version}", v5)]
    return [(f"Open MPI {version.version}", v4)]

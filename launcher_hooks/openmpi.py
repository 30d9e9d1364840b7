"""Open MPI rankfiles and the launch line that matches the installed version.

Rankfile lines use the flat form ``rank N=<host> slot=<node-local core>`` for every
rank (launcher notes 1.4/1.5): the ``socket:core`` form was mis-bound by PRRTE
(openpmix/prrte#772), a missing rank is an error (``missing-rank``), and ``slot=pN``
(physical ids) was silently bound to core 0 by 4.1.4.

The option that reads a rankfile changed between versions (notes 1.2): Open MPI 4
(ORTE) takes ``--rankfile F`` and rejects ``--map-by rankfile:file=F``; Open MPI 5
(PRRTE) takes ``--map-by rankfile:file=F`` and only warns about ``--rankfile``.
:func:`detect_openmpi` runs ``mpirun --version`` to pick the right one.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from procmap.errors import ProcmapError
from procmap.formats import atomic_write

__all__ = ["OpenMPIVersion", "rankfile_text", "write_rankfile", "parse_version_output",
           "parse_forced_version", "detect_openmpi", "launch_lines", "OVERSUBSCRIBE_NOTE"]

# "mpirun (Open MPI) 4.1.4", "mpirun (Open MPI) 5.0.11", "prterun (Open MPI) 5.0.0rc12"
_VERSION = re.compile(r"\(Open MPI\)\s+v?(\d+)(?:\.(\d+))?(?:\.(\d+))?")

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

    ``None`` means the output does not name Open MPI with a readable version
    (MPICH's Hydra prints "HYDRA build details", Intel MPI "Intel(R) MPI Library").
    """
    m = _VERSION.search(text)
    if m is None:
        return None
    parts = [p for p in m.groups() if p is not None]
    return int(parts[0]), ".".join(parts)


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


def detect_openmpi(mpirun: str = "mpirun", timeout: float = 5.0) -> OpenMPIVersion:
    """Run ``mpirun --version`` and read the Open MPI version; never raises.

    A missing, hanging, failing or non-Open-MPI ``mpirun`` gives ``major=None`` with
    the reason in :attr:`OpenMPIVersion.source`, so that the caller can print both
    launch forms instead of a wrong one.
    """
    path = shutil.which(mpirun)
    if path is None:
        return OpenMPIVersion(None, None, f"{mpirun} not found")
    try:
        proc = subprocess.run([path, "--version"], capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL, errors="replace")
    except subprocess.TimeoutExpired:
        return OpenMPIVersion(None, None, f"'{path} --version' did not answer within {timeout:g} s")
    except OSError as exc:
        return OpenMPIVersion(None, None, f"cannot run {path}: {exc.strerror or exc}")
    parsed = parse_version_output(proc.stdout + "\n" + proc.stderr)
    if parsed is None:
        first = (proc.stdout.strip() or proc.stderr.strip()).splitlines()
        said = f" (it says {first[0][:60]!r})" if first else ""
        what = "an unreadable Open MPI version" if "Open MPI" in proc.stdout + proc.stderr \
            else "not Open MPI"
        return OpenMPIVersion(None, None, f"{path} is {what}{said}")
    major, version = parsed
    return OpenMPIVersion(major, version, path)


def _line(option: list[str], n: int, app: str) -> str:
    return shlex.join(["mpirun", "-n", str(n), *option]) + f" {app}"


def launch_lines(version: OpenMPIVersion, n: int, rankfile: str, app: str = "./app") -> list[tuple[str, str]]:
    """``[(label, command), ...]``: one line for a known version, both when unknown.

    Open MPI 4 and older (ORTE) read ``--rankfile``; 5 and later (PRRTE) read
    ``--map-by rankfile:file=``.
    """
    v4 = _line(["--rankfile", rankfile], n, app)
    v5 = _line(["--map-by", f"rankfile:file={rankfile}"], n, app)
    if version.major is None:
        return [("Open MPI 4", v4), ("Open MPI 5", v5)]
    if version.major >= 5:
        return [(f"Open MPI {version.version}", v5)]
    return [(f"Open MPI {version.version}", v4)]

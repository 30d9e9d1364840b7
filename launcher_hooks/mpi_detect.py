"""Which MPI answers to a launcher name (``mpirun``, ``mpiexec``, a path), and which
name to print in a launch line.

Every printed launch line runs verbatim on the machine where it was printed
(docs/design.md section 6), but ``mpiexec`` and ``mpirun`` name different MPIs on
different machines: with Open MPI and MPICH both installed, Debian's alternatives
point both names at Open MPI, whose ``mpiexec`` rejects Hydra's ``-f`` and
``-bind-to user:``; MPICH's Hydra then answers only to ``mpiexec.hydra`` (and
``mpiexec.mpich``), Open MPI's to ``mpirun.openmpi`` as well.

:func:`detect_mpi` runs ``NAME --version`` with a short timeout and never raises
(a missing, hanging or failing binary is *unknown*); :func:`parse_mpi_version`
reads the output:

* Intel MPI: ``Intel(R) MPI Library for Linux* OS, Version 2021.10 Build ...``;
* Open MPI: ``mpirun (Open MPI) 5.0.11``; 4.x (ORTE) says ``(OpenRTE) 4.1.4``
  after whatever the binary is called (``mpirun``, ``mpiexec``, ``orterun``,
  ``mpirun.openmpi``);
* MPICH's Hydra: ``HYDRA build details:`` then ``Version: 4.0.2``.

:func:`pick_launcher` keeps the given name when it is the wanted MPI, else prints
an alternative name found on PATH that is, else keeps the given name and returns
a note saying the line will not run here as printed. Only the standard library is
imported (``procmap --help`` stays light).
"""
from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["OPENMPI", "MPICH", "INTEL", "MPI_NAMES", "ALTERNATIVES", "DEFAULT_TIMEOUT", "MPIInfo",
           "Launcher", "parse_openmpi_version", "parse_mpi_version", "detect_mpi",
           "pick_launcher"]

OPENMPI, MPICH, INTEL = "openmpi", "mpich", "intel"
MPI_NAMES = {OPENMPI: "Open MPI", MPICH: "MPICH", INTEL: "Intel MPI"}

#: Other names of each MPI's launcher, tried in order when the given name is
#: another MPI's (Debian's alternatives; Intel MPI installs mpiexec.hydra too).
ALTERNATIVES = {MPICH: ("mpiexec.hydra", "mpiexec.mpich"), INTEL: ("mpiexec.hydra",),
                OPENMPI: ("mpirun.openmpi",)}

#: Seconds a ``--version`` may take: every launcher answers at once, and a hanging
#: one (a wrapper waiting for a scheduler) must not stall procmap.
DEFAULT_TIMEOUT = 3.0

# "(Open MPI) 5.0.11", "(Open MPI) 5.0.0rc12"; Open MPI 4 (ORTE): "(OpenRTE) 4.1.4".
_OPENMPI_VERSION = re.compile(r"\((?:Open MPI|OpenRTE)\)\s+v?(\d+)(?:\.(\d+))?(?:\.(\d+))?")
_OPENMPI_NAME = re.compile(r"Open MPI|OpenRTE")
_INTEL = re.compile(r"Intel\(R\) MPI Library[^\n]*?Version\s+([0-9][\w.]*)|Intel\(R\) MPI Library")
_HYDRA = re.compile(r"HYDRA build details")
_HYDRA_VERSION = re.compile(r"^\s*Version:\s+(\S+)", re.MULTILINE)


@dataclass(frozen=True)
class MPIInfo:
    """What ``NAME --version`` said.

    Attributes
    ----------
    name:
        The name as given (``"mpiexec"``, ``"/opt/x/bin/mpirun"``).
    kind:
        :data:`OPENMPI`, :data:`MPICH`, :data:`INTEL`, or ``None`` when unknown.
    version:
        The version text (``"4.1.4"``), or ``None`` when unknown or unreadable.
    path:
        Where ``name`` resolved on PATH, or ``None`` when not found.
    reason:
        Why ``kind`` is ``None`` (``"mpiexec not found"``, ...); ``""`` otherwise.
    said:
        The first line of the output (at most 60 characters), for messages.
    """

    name: str
    kind: str | None
    version: str | None
    path: str | None
    reason: str = ""
    said: str = ""

    @property
    def label(self) -> str:
        """``"Open MPI 4.1.4"``, ``"MPICH 4.0.2"``, ``"Intel MPI"``; ``"unknown"``."""
        if self.kind is None:
            return "unknown"
        return MPI_NAMES[self.kind] + (f" {self.version}" if self.version else "")

    def describe(self) -> str:
        """One clause for notes: ``"mpiexec is Open MPI 4.1.4"`` or the reason."""
        return f"{self.name} is {self.label}" if self.kind else self.reason


@dataclass(frozen=True)
class Launcher:
    """The launcher name to print and what is known about it.

    Attributes
    ----------
    name:
        The name to print as the launch line's first word (shell-quote it).
    info:
        :func:`detect_mpi` of ``name``.
    note:
        Why ``name`` is not the given one, or why the line may not run here as
        printed; ``None`` when the given name is the wanted MPI.
    """

    name: str
    info: MPIInfo
    note: str | None = None


def parse_openmpi_version(text: str) -> tuple[int, str] | None:
    """``(major, "x.y.z")`` from Open MPI's ``--version`` output, or ``None``."""
    m = _OPENMPI_VERSION.search(text)
    if m is None:
        return None
    parts = [p for p in m.groups() if p is not None]
    return int(parts[0]), ".".join(parts)


def parse_mpi_version(text: str) -> tuple[str, str | None] | None:
    """``(kind, version)`` from a launcher's ``--version`` output, ``None`` if no MPI
    is named; ``version`` is ``None`` when the MPI is named without a readable one."""
    m = _INTEL.search(text)
    if m is not None:
        return INTEL, (m.group(1).rstrip(".,") if m.group(1) else None)
    if _OPENMPI_NAME.search(text):
        parsed = parse_openmpi_version(text)
        return OPENMPI, (parsed[1] if parsed else None)
    if _HYDRA.search(text):
        m = _HYDRA_VERSION.search(text)
        return MPICH, (m.group(1) if m else None)
    return None


def detect_mpi(name: str, timeout: float = DEFAULT_TIMEOUT) -> MPIInfo:
    """Run ``name --version`` and read which MPI it is; never raises.

    A missing, hanging, failing or unrecognised binary gives ``kind=None`` with the
    reason in :attr:`MPIInfo.reason`.
    """
    path = shutil.which(name)
    if path is None:
        return MPIInfo(name, None, None, None, f"{name} not found")
    try:
        proc = subprocess.run([path, "--version"], capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL, errors="replace")
    except subprocess.TimeoutExpired:
        return MPIInfo(name, None, None, path,
                       f"'{path} --version' did not answer within {timeout:g} s")
    except OSError as exc:
        return MPIInfo(name, None, None, path, f"cannot run {path}: {exc.strerror or exc}")
    text = proc.stdout + "\n" + proc.stderr
    first = (proc.stdout.strip() or proc.stderr.strip()).splitlines()
    said = first[0][:60] if first else ""
    parsed = parse_mpi_version(text)
    if parsed is None:
        what = f" (it says {said!r})" if said else " (it printed nothing)"
        return MPIInfo(name, None, None, path, f"{path} is not a known MPI launcher{what}", said)
    kind, version = parsed
    return MPIInfo(name, kind, version, path, "", said)


def pick_launcher(given: str, want: str, *, option: str,
                  alternatives: Sequence[str] | None = None,
                  timeout: float = DEFAULT_TIMEOUT) -> Launcher:
    """The launcher name to print for an MPI of kind ``want``.

    ``given`` when it is ``want``'s; else the first of ``alternatives`` (default
    :data:`ALTERNATIVES`) on PATH that is; else ``given`` with a note that no such
    launcher was found here (the line is printed for ``want`` all the same: the
    user may run it on another machine). ``option`` (``"--mpiexec"``) is named in
    that note as the way to point procmap at the right binary.
    """
    info = detect_mpi(given, timeout)
    if info.kind == want:
        return Launcher(given, info)
    alts = [a for a in (ALTERNATIVES[want] if alternatives is None else alternatives)
            if a != given]
    for alt in alts:
        other = detect_mpi(alt, timeout)
        if other.kind == want:
            return Launcher(alt, other, f"{info.describe()}: printed {alt} ({other.label}) "
                                        f"instead")
    mpi = MPI_NAMES[want]
    looked = f"; no {' or '.join(alts)} on PATH is {mpi}'s" if alts else ""
    if info.kind is None and info.path is not None:
        # Something answers to the name but could not be read: it may still work.
        return Launcher(given, info, f"could not check that {given} is {mpi}'s ({info.reason}"
                                     f"{looked}); {option} PATH names {mpi}'s launcher")
    return Launcher(given, info, f"no {mpi} {given} was found on this machine "
                                 f"({info.describe()}{looked}): this line does not run here as "
                                 f"printed; run it where {mpi} is installed, or name {mpi}'s "
                                 f"launcher with {option} PATH")

"""Writing outputs (issue 20 section 1): links, special files, inputs, early checks, signals.

Every test here reproduces a data-loss defect of the former ``atomic_write``: a
symlink replaced by a regular file, a device node turned into a regular file, an
input overwritten by the output, a bad ``-o`` reported only after the mapping, an
error without the file's name, and temporary files left (or a crash) after SIGINT
or SIGTERM. Most tests run ``procmap.cli.main`` in-process; the signal tests start
one Python process each.
"""
import errno
import glob
import os
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import procmap.cli as cli
from procmap.errors import ProcmapError
from procmap.formats import atomic_write, read_mapping, write_graph, write_mapping
from procmap.formats.atomic import check_output, resolve_output
from procmap.formats.comm import format_int_lines
from procmap.generators import grid_graph

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "examples", "halo3d.comm")
MAP = ["map", EXAMPLE, "-H", "4:8:6", "--quiet"]
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def run(capfd, *argv):
    """``procmap argv`` in-process: (exit status, stdout, stderr) at the fd level."""
    code = cli.main([str(a) for a in argv])
    out, err = capfd.readouterr()
    return code, out, err


def temp_files(*directories) -> list[str]:
    return [name for d in directories for name in glob.glob(os.path.join(d, ".*.tmp"))]


def assert_full_mapping(path) -> None:
    pes = read_mapping(path)
    assert pes.size == 192 and pes.min() >= 0 and pes.max() < 192


# ------------------------------------------------------------------------ symbolic links
def test_symlink_is_followed_and_stays_a_link(capfd, tmp_path):
    target = tmp_path / "target.map"
    target.write_text("stale\n")
    link = tmp_path / "link.map"
    link.symlink_to("target.map")
    code, _, err = run(capfd, *MAP, "-o", link)
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == "target.map"
    assert_full_mapping(target)
    assert temp_files(tmp_path) == []


def test_symlink_chain_dangling_and_other_directory(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    final = tmp_path / "b" / "final.map"
    final.write_text("old\n")
    final.chmod(0o640)
    (tmp_path / "b" / "mid.map").symlink_to("final.map")
    first = tmp_path / "a" / "first.map"
    first.symlink_to(os.path.join("..", "b", "mid.map"))  # relative to a/, not to the cwd
    write_mapping([3, 1, 2], first)
    assert final.read_text() == "3\n1\n2\n"
    assert stat.S_IMODE(final.stat().st_mode) == 0o640  # the replaced file's permissions
    assert first.is_symlink() and (tmp_path / "b" / "mid.map").is_symlink()

    dangling = tmp_path / "a" / "dangling.map"
    dangling.symlink_to(os.path.join("..", "b", "new.map"))
    write_mapping([0], dangling)
    assert dangling.is_symlink() and (tmp_path / "b" / "new.map").read_text() == "0\n"

    loop = tmp_path / "loop.map"
    loop.symlink_to("loop.map")
    with pytest.raises(ProcmapError, match="cannot write .*loop.map: Too many levels"):
        write_mapping([0], loop)
    assert temp_files(tmp_path, tmp_path / "a", tmp_path / "b") == []


# -------------------------------------------------------------------------- special files
def test_fifo_is_written_in_place(capfd, tmp_path):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    code, _, err = run(capfd, *MAP, "-o", fifo)
    reader.join(10)
    assert code == 0, err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert received and len(received[0].splitlines()) == 192
    assert temp_files(tmp_path) == []


def _char_device(path, minor: int) -> None:
    """A copy of /dev/null (minor 3) or /dev/full (minor 7) at ``path``, or skip."""
    if not IS_ROOT:
        pytest.skip("creating a device node needs root")
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, minor))
        os.close(os.open(path, os.O_WRONLY))
    except OSError as exc:  # no CAP_MKNOD, or a device cgroup forbids it
        pytest.skip(f"cannot use a device node here: {exc.strerror}")


def test_char_device_full_disk_names_the_file_and_stays_a_device(capfd, tmp_path):
    full = tmp_path / "full"
    _char_device(full, 7)
    code, out, err = run(capfd, *MAP, "-o", full)
    assert code == 2
    assert err == f"procmap: error: cannot write {full}: No space left on device\n"
    assert out == ""
    assert stat.S_ISCHR(os.lstat(full).st_mode)
    null = tmp_path / "null"
    _char_device(null, 3)
    code, _, err = run(capfd, *MAP, "-o", null)
    assert code == 0, err
    assert stat.S_ISCHR(os.lstat(null).st_mode)
    assert temp_files(tmp_path) == []


def test_dev_full_is_a_special_file():
    # Checked without writing: atomic_write writes in place exactly when this holds.
    assert resolve_output("/dev/full").kind == "special"
    assert resolve_output("/dev/null").kind == "special"


def test_dev_stdout_and_a_link_to_it_write_through_stdout(capfd, tmp_path):
    # Checked first, so that a regression fails here instead of replacing /dev/stdout.
    assert resolve_output("/dev/stdout").kind in ("stdout", "special")
    write_mapping([4, 5], "/dev/stdout")
    copy = tmp_path / "stdout"
    copy.symlink_to("/dev/stdout")  # what `cp -a /dev/stdout` makes
    write_mapping([6], copy)
    out, _ = capfd.readouterr()
    assert out == "4\n5\n6\n"
    assert os.path.islink("/dev/stdout") and copy.is_symlink()


def test_socket_is_refused(tmp_path):
    path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
        with pytest.raises(ProcmapError, match=r"cannot write .*s: is a socket"):
            check_output(path)


# ----------------------------------------------------------------- output == input refused
@pytest.fixture
def no_reading(monkeypatch):
    """Fail the test if any command reads its graph: the refusal must come first."""
    def boom(*args, **kwargs):
        raise AssertionError("the graph was read before the output was checked")
    # The pipeline first: it binds read_graph when first imported (the launcher
    # commands import it lazily), and must not bind the patched one for good.
    monkeypatch.setattr("procmap.launcher_hooks.pipeline.read_graph", boom)
    monkeypatch.setattr("procmap.formats.read_graph", boom)
    monkeypatch.delenv("PROCMAP_PROLOG", raising=False)


@pytest.mark.parametrize("case", ["map", "hardlink", "symlink", "distance-matrix", "convert",
                                  "rankfile-hostfile", "machinefile", "slurm-hostfile",
                                  "slurm-rank-map"])
def test_output_that_is_an_input_is_refused_first(capfd, tmp_path, no_reading, case):
    graph = tmp_path / "app.comm"
    graph.write_text("0 1 5\n")
    hostfile = tmp_path / "hosts.txt"
    hostfile.write_text("n1 slots=4\nn2 slots=4\n")
    dm = tmp_path / "d.txt"
    dm.write_text("0 1\n1 0\n")
    fresh = tmp_path / "fresh"   # does not exist: both outputs compared by name
    argv, victim = {
        "map": (["map", graph, "-H", "2:2", "-o", graph], graph),
        "hardlink": (["map", graph, "-H", "2:2", "-o", tmp_path / "hard.map"], graph),
        "symlink": (["map", graph, "-H", "2:2", "-o", tmp_path / "sym.map"], graph),
        "distance-matrix": (["map", graph, "--distance-matrix", dm, "-o", dm], dm),
        "convert": (["convert", graph, os.path.join(tmp_path, ".", "app.comm")], graph),
        "rankfile-hostfile": (["rankfile", graph, "-H", "2:2", "--hostfile", hostfile,
                               "-o", hostfile], hostfile),
        "machinefile": (["machinefile", graph, "-H", "2:2", "--hosts", "n[1-2]", "-o", graph],
                        graph),
        "slurm-hostfile": (["slurm", graph, "-H", "2:2", "--hostfile", hostfile,
                            "-o", hostfile], hostfile),
        "slurm-rank-map": (["slurm", graph, "-H", "2:2", "--hosts", "n[1-2]", "-o", fresh,
                            "--rank-map", fresh], fresh),
    }[case]
    if case == "hardlink":
        os.link(graph, tmp_path / "hard.map")
    if case == "symlink":
        (tmp_path / "sym.map").symlink_to("app.comm")
    before = {p: p.read_bytes() for p in (graph, hostfile, dm)}
    code, out, err = run(capfd, *argv)
    assert code == 2
    assert err.startswith("procmap: error: cannot write ") and err.count("\n") == 1
    assert "it is also the " in err
    assert {p: p.read_bytes() for p in before} == before
    assert not fresh.exists() and temp_files(tmp_path) == []
    assert victim.exists() or case == "slurm-rank-map"


# -------------------------------------------------------------- a bad -o fails at once
@pytest.mark.parametrize("output, reason", [
    ("", "cannot write '': empty file name"),
    ("{dir}/", "is a directory"),
    ("{dir}", "is a directory"),
    ("{tmp}/nodir/", "a file name cannot end with '/'"),
    ("{tmp}/missing/x.map", "directory {tmp}/missing does not exist"),
    ("{tmp}/afile/x.map", "Not a directory"),
])
def test_bad_output_is_reported_before_the_input_is_read(capfd, tmp_path, output, reason):
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("")
    fill = {"dir": tmp_path / "adir", "tmp": tmp_path}
    output, reason = output.format(**fill), reason.format(**fill)
    missing_graph = tmp_path / "nope.comm"  # reading it would be the first error otherwise
    for argv in (["map", missing_graph, "-H", "4:8:6", "-o", output],
                 ["convert", missing_graph, output]):
        code, out, err = run(capfd, *argv)
        assert code == 2 and out == ""
        assert err.startswith("procmap: error: cannot write ") and reason in err, err
        assert err.count("\n") == 1 and "nope.comm" not in err


@pytest.mark.skipif(IS_ROOT, reason="root may write anywhere: permissions are not checked")
def test_unwritable_directory_and_file_fail_fast(capfd, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    readonly = tmp_path / "ro.map"
    readonly.write_text("keep\n")
    readonly.chmod(0o444)
    locked.chmod(0o555)
    try:
        for output, reason in ((locked / "x.map", "no permission to create files in"),
                               (readonly, "Permission denied")):
            code, _, err = run(capfd, "map", tmp_path / "nope.comm", "-H", "4:8:6", "-o", output)
            assert code == 2 and reason in err and "nope.comm" not in err
    finally:
        locked.chmod(0o755)
    assert readonly.read_text() == "keep\n"


# ------------------------------------------------------------------------- -o - (stdout)
def test_dash_writes_the_mapping_to_stdout_and_the_report_to_stderr(capfd, tmp_path):
    code, out, err = run(capfd, *MAP, "-o", "-")
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 192 and all(line.isdigit() for line in lines)
    assert "engine" in err and "wrote     standard output" in err
    code, out, err = run(capfd, "convert", EXAMPLE, "-", "--to", "metis")
    assert code == 0
    header = next(line for line in out.splitlines() if not line.startswith("%"))
    assert header.split()[:2] == ["192", "472"]
    assert err.startswith("wrote standard output: 192 tasks")


def test_launch_files_are_not_written_to_stdout(capfd, no_reading):
    code, out, err = run(capfd, "rankfile", EXAMPLE, "-H", "4:8:6", "--hosts", "n[1-6]", "-o", "-")
    assert code == 2 and out == "" and "not standard output" in err


# --------------------------------------------------------------------------- write errors
def test_write_errors_name_the_file_and_keep_the_old_one(tmp_path):
    target = tmp_path / "x.map"
    target.write_text("old\n")
    with pytest.raises(ProcmapError, match=r"^cannot write .*x\.map: No space left on device$"):
        with atomic_write(target, "wb") as handle:
            handle.write(b"new\n")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert target.read_text() == "old\n" and temp_files(tmp_path) == []


def test_mapping_text_is_the_same_as_before(tmp_path):
    # The mapping writer is vectorised NumPy now (no kernel compiled at write time);
    # its bytes are those of the shared Numba formatter.
    rng = np.random.default_rng(1)
    path = tmp_path / "x.map"
    for ids in (np.array([0]), np.array([9, 10, 99, 100, 0, 1]), rng.integers(0, 2**62, 1000),
                rng.integers(0, 200, 5000), np.array([2**63 - 1, 0])):
        ids = ids.astype(np.int64)
        write_mapping(ids, path)
        assert path.read_bytes() == format_int_lines(ids, np.arange(ids.size + 1))
    write_mapping(np.zeros(0, dtype=np.int64), path)
    assert path.read_bytes() == b""


# --------------------------------------------------------------------------------- signals
@pytest.fixture
def sigint_raises():
    """SIGINT with Python's own handler (KeyboardInterrupt) during the test. pytest run as
    a background job of a non-interactive shell (``pytest &`` in a script) starts with
    SIGINT ignored, and ``atomic_write`` rightly leaves an ignored signal ignored."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_signal_during_write_discards_the_temporary_file(tmp_path, sigint_raises):
    target = tmp_path / "x.map"
    target.write_text("old\n")
    finished = []
    with pytest.raises(KeyboardInterrupt):
        with atomic_write(target) as handle:
            handle.write("new\n")
            signal.raise_signal(signal.SIGINT)  # held back until the file is cleaned up
            handle.write("more\n")
            finished.append(True)
    assert finished and target.read_text() == "old\n" and temp_files(tmp_path) == []
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.parametrize("signum, status, message", [(signal.SIGINT, 130, "interrupted"),
                                                     (signal.SIGTERM, 143, "terminated")])
def test_cli_exit_status_after_a_signal_while_writing(capfd, tmp_path, monkeypatch, signum,
                                                      status, message, sigint_raises):
    def interrupted(pes, path):
        with atomic_write(path, "wb") as handle:
            handle.write(b"0\n")
            signal.raise_signal(signum)
            handle.write(b"1\n")
    def unhandled(signum, frame):  # instead of SIGTERM's default: killing pytest
        raise AssertionError("main did not handle SIGTERM")
    monkeypatch.setattr("procmap.formats.write_mapping", interrupted)
    previous = signal.signal(signal.SIGTERM, unhandled)
    try:
        out = tmp_path / "x.map"
        code, _, err = run(capfd, *MAP, "-o", out)
        assert signal.getsignal(signal.SIGTERM) is unhandled  # main restored it
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert code == status
    assert err == f"procmap: {message}\n"
    assert not out.exists() and temp_files(tmp_path) == []


CHILD = textwrap.dedent("""\
    import signal, sys
    from procmap.cli import main
    late = []
    src, out = sys.argv[1], sys.argv[2]
    for line in sys.stdin:
        code = main(["convert", src, out])
        # A signal that arrives after main returned is recorded, not fatal.
        signal.signal(signal.SIGINT, lambda s, f: late.append(s))
        signal.signal(signal.SIGTERM, lambda s, f: late.append(s))
        print(code, len(late), flush=True)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    """)


def test_signals_at_any_point_of_the_write_leave_no_temporary_file(tmp_path):
    src = tmp_path / "grid.npz"
    write_graph(grid_graph((200, 200)), src)
    out = tmp_path / "grid.comm"
    write_graph(grid_graph((200, 200)), tmp_path / "expected.comm")
    expected = (tmp_path / "expected.comm").read_bytes()
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    child = subprocess.Popen([sys.executable, str(script), str(src), str(out)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, cwd=tmp_path)
    outcomes = []
    try:
        for signum in (signal.SIGINT, signal.SIGTERM):
            for delay in (0.0, 0.002, 0.008, 0.03):
                child.stdin.write("go\n")
                child.stdin.flush()
                deadline = time.monotonic() + 30
                while not temp_files(tmp_path) and time.monotonic() < deadline:
                    time.sleep(0.0002)
                time.sleep(delay)
                if temp_files(tmp_path):  # still writing (else: finished, nothing to send)
                    child.send_signal(signum)
                line = child.stdout.readline()
                assert line, child.stderr.read()
                code, late = map(int, line.split())
                outcomes.append((signum, delay, code))
                assert code in (0, 128 + signum)
                assert temp_files(tmp_path) == []
                assert not out.exists() or out.read_bytes() == expected
                assert late == 0 or code == 0
    finally:
        child.stdin.close()
        child.wait(30)
    assert child.returncode == 0, child.stderr.read()
    # At least one signal hit the write itself (the first one is sent as the temp appears).
    assert any(code != 0 for _, _, code in outcomes), outcomes


def test_sigterm_exit_status_of_the_command(tmp_path):
    src = tmp_path / "grid.npz"
    write_graph(grid_graph((200, 200)), src)
    out = tmp_path / "grid.comm"
    proc = subprocess.Popen([sys.executable, "-m", "procmap", "convert", str(src), str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not temp_files(tmp_path) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.0002)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode in (0, 143), (proc.returncode, err)
    if proc.returncode == 143:
        assert err == "procmap: terminated\n" and not out.exists()
    assert temp_files(tmp_path) == []


def test_sigterm_during_an_import_is_delivered_after_the_import(tmp_path):
    # A handler raising inside an import can lose its exception (CPython's parser turns
    # one raised during compile() into a SyntaxError, which code guarding an optional
    # import reads as an unusable module): procmap delivers such a SIGTERM again once
    # the import is over, and it then stops the command as any SIGTERM does.
    (tmp_path / "slow_module.py").write_text(
        "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n" + "x = 1\n" * 20000)
    script = (f"import sys, time\nsys.path.insert(0, {str(tmp_path)!r})\n"
              "from procmap import cli\n"
              "try:\n"
              "    with cli._sigterm_raises():\n"
              "        import slow_module\n"
              "        print('imported', flush=True)\n"
              "        time.sleep(5)\n"
              "        print('not stopped', flush=True)\n"
              "except cli._Terminated:\n"
              "    print('terminated', flush=True)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert done.stdout.split() == ["imported", "terminated"], done.stdout + done.stderr

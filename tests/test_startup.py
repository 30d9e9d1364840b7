"""Start-up: lazy imports, the first-run compile notice and ``procmap warmup``."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from procmap.cli import main

HEAVY = ("numba", "scipy", "pymetis", "procmap.engines", "procmap.api", "procmap.graph")


def _imported_after(code: str, env: dict | None = None) -> set[str]:
    """The modules a fresh interpreter has loaded after running ``code``."""
    probe = (f"import sys\n{code}\nprint(' '.join(sorted(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return set(done.stdout.split())


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["map", "--help"],
                                  ["rankfile", "--help"], ["slurm", "--help"]])
def test_version_and_help_import_no_engine(argv):
    loaded = _imported_after("from procmap.cli import main\n"
                             f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass")
    assert not [m for m in HEAVY if m in loaded], sorted(m for m in HEAVY if m in loaded)
    assert "numpy" not in loaded  # the parser needs no arrays


def test_topology_package_imports_no_engine():
    loaded = _imported_after("import procmap.topology")
    assert not [m for m in HEAVY if m in loaded]


def test_eval_of_a_small_file_imports_no_numba_or_scipy_sparse(tmp_path):
    # The small-input paths (procmap.formats.comm._read_small, NumPy merging in
    # CommGraph.from_edges, NumPy objective) keep eval free of the compiled kernels.
    path = tmp_path / "ring.comm"
    path.write_text("".join(f"{i} {(i + 1) % 64} {i + 1}\n" for i in range(64)))
    loaded = _imported_after("from procmap.cli import main\n"
                             f"main(['eval', {str(path)!r}, '--hierarchy', '4:4:4', "
                             "'--baseline', 'block'])")
    assert "numba" not in loaded and "scipy.sparse" not in loaded
    assert "procmap.objective" in loaded  # it did evaluate


_FIRST_KERNEL = ("import numpy as np\n"
                 "from procmap.kernels.objective import objective_cpu\n"
                 "objective_cpu.level_traffic(np.array([0, 1, 2]), np.array([1, 0], np.int32), "
                 "np.array([1, 1]), np.array([0, 1], np.int32), np.array([2]))\n")


def test_first_kernel_call_skips_numbas_blas_probe():
    """procmap.blas_probe: Numba's first dispatch does not import scipy.linalg (its BLAS
    probe), PROCMAP_NUMBA_BLAS_PROBE=1 restores the probe, and scipy.linalg and np.dot
    in jitted code still work afterwards."""
    loaded = _imported_after(_FIRST_KERNEL)
    assert "numba.np.arraymath" in loaded and "scipy.linalg" not in loaded
    probed = _imported_after(_FIRST_KERNEL, env={**os.environ, "PROCMAP_NUMBA_BLAS_PROBE": "1"})
    assert "scipy.linalg" in probed
    after = _imported_after(_FIRST_KERNEL + "import numba\nimport scipy.linalg\n"
                            "f = numba.njit(lambda a: np.dot(a, a))\n"
                            "assert f(np.ones(3)) == 3.0 and scipy.linalg.norm(np.ones(4)) == 2\n")
    assert "scipy.linalg" in after


def test_public_names_still_resolve():
    import procmap

    assert procmap.CommGraph.__name__ == "CommGraph"
    assert callable(procmap.map_tasks) and callable(procmap.evaluate)
    assert "map_tasks" in dir(procmap)
    with pytest.raises(AttributeError):
        procmap.no_such_name  # noqa: B018


def test_cold_cache_notice_names_the_cache(tmp_path):
    """With an empty NUMBA_CACHE_DIR the notice says a compile starts and where it goes;
    asking compiles nothing."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c",
                           "from procmap.warmup import cold_cache_notice\n"
                           "print(cold_cache_notice())"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "first run: compiling" in done.stdout and str(tmp_path) in done.stdout
    assert "procmap warmup" in done.stdout
    assert not [f for f in tmp_path.rglob("*") if f.is_file()]


def test_map_announces_a_compile_when_stderr_is_not_a_terminal(tmp_path, capsys, monkeypatch):
    import procmap.warmup as warm

    monkeypatch.setattr(warm, "cold_cache_notice", lambda: "first run: compiling (test)")
    graph = tmp_path / "g.comm"
    graph.write_text("0 1 5\n1 2 5\n2 3 5\n")
    assert main(["map", str(graph), "-H", "2:2"]) == 0
    err = capsys.readouterr().err
    assert "procmap: first run: compiling (test)" in err
    assert main(["map", str(graph), "-H", "2:2", "--quiet"]) == 0
    assert "first run" not in capsys.readouterr().err


def test_warmup_fills_the_cache(capsys):
    """procmap warmup runs every step and leaves the kernel cache warm."""
    from procmap.kernels.backend import kernel_cache_is_warm

    assert main(["warmup", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    steps = set(out["seconds"])
    assert {"readers and writers", "evaluation", "rank placement"} <= steps
    assert {f"{e}, {w} volumes" for e in ("im", "hm", "hm-ultra")
            for w in ("integer", "float")} <= steps
    assert {"im, power-law graph", "hm, power-law graph"} <= steps
    assert out["cache"] and kernel_cache_is_warm()
    # another power-law graph compiles nothing more: coarsening's two-hop matching (which
    # meshes never reach) was compiled too
    from numba.core import event

    from procmap import map_tasks
    from procmap.generators import chung_lu_graph
    from procmap.topology import Hierarchy
    compiled = []

    class Compiles(event.Listener):
        def on_start(self, ev):
            compiled.append(ev.data["dispatcher"].py_func.__name__)

        def on_end(self, ev):
            pass

    graph = chung_lu_graph(30_000, avg_degree=10, seed=5)
    with event.install_listener("numba:compile", Compiles()):
        for engine in ("im", "hm"):
            map_tasks(graph, Hierarchy.parse("4:8:2"), engine=engine, seed=3)
    assert compiled == []

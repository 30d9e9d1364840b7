"""Device selection (``device=`` / ``--device``) on a machine without a usable GPU,
and the dispatch layer's CPU side."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from procmap import map_tasks, preset
from procmap.cli import main
from procmap.errors import DeviceError, InputError
from procmap.generators import grid_graph
from procmap.kernels import backend
from procmap.topology import Hierarchy

NO_GPU = not backend.gpu_available()


def test_resolve_device_choices():
    assert backend.resolve_device("cpu", 10**9) == "cpu"
    with pytest.raises(ValueError, match="unknown device"):
        backend.resolve_device("tpu", 10)
    if NO_GPU:
        assert backend.resolve_device("auto", 10**9) == "cpu"
        with pytest.raises(RuntimeError, match="needs CuPy and a CUDA GPU"):
            backend.resolve_device("gpu", 10)
    # small graphs stay on the CPU under auto, GPU or not
    min_edges = preset("im").device.auto_gpu_min_edges
    assert backend.resolve_device("auto", min_edges - 1) == "cpu"
    assert backend.resolve_device("auto", 10**6, 10**6 + 1) == "cpu"


def test_backend_of_numpy_is_cpu():
    be = backend.of(np.zeros(3))
    assert be.name == "cpu" and be.xp is np
    dev = preset("hm").device
    assert backend.for_size("gpu", False).name == "cpu"
    assert backend.for_size("cpu", True).name == "cpu"
    # large by vertices, or by edges alone (dense subgraphs of power-law graphs)
    assert dev.on_gpu(dev.gpu_min_vertices, 0)
    assert dev.on_gpu(10, dev.gpu_min_edges)
    assert not dev.on_gpu(dev.gpu_min_vertices - 1, dev.gpu_min_edges - 1)


def test_map_tasks_reports_device_and_rejects_unknown():
    g = grid_graph((20, 20))
    topo = Hierarchy.parse("4:2", "1:10")
    m = map_tasks(g, topo, engine="hm", device="cpu")
    assert m.device == "cpu"
    with pytest.raises(InputError, match="unknown device"):
        map_tasks(g, topo, device="fpga")


@pytest.mark.skipif(not NO_GPU, reason="checks the error raised where no GPU is usable")
def test_device_gpu_without_gpu_is_a_clear_error(tmp_path, capsys):
    g = grid_graph((20, 20))
    with pytest.raises(DeviceError, match="needs CuPy and a CUDA GPU"):
        map_tasks(g, Hierarchy.parse("4:2", "1:10"), device="gpu")
    graph = tmp_path / "g.comm"
    graph.write_text("0 1 5\n1 2 5\n2 3 5\n")
    out = tmp_path / "map.txt"
    rc = main(["map", str(graph), "--hierarchy", "2", "--device", "gpu", "-o", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "needs CuPy and a CUDA GPU" in err[0]
    assert not out.exists()


def test_cpu_path_never_imports_cupy():
    code = ("import sys; import procmap; from procmap.generators import grid_graph; "
            "from procmap.topology import Hierarchy; "
            "m = procmap.map_tasks(grid_graph((30, 30)), Hierarchy.parse('4:2', '1:10'), "
            "engine='im', device='cpu'); "
            "assert 'cupy' not in sys.modules, 'cupy imported'; print(m.device)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "cpu"


def test_kernel_cache_check_sees_a_cold_cache(tmp_path):
    """`procmap map` announces the first-run compilation when Numba's cache is cold:
    with an empty cache directory the check says cold; after a mapping in this
    process (the test session has run kernels, so the cache was written) it says warm."""
    map_tasks(grid_graph((20, 20)), Hierarchy.parse("2:2", "1:10"), engine="hm", device="cpu")
    assert backend.kernel_cache_is_warm()
    code = "from procmap.kernels.backend import kernel_cache_is_warm as w; print(w())"
    env = dict(__import__("os").environ, NUMBA_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"

"""The engines end to end on the GPU backend (``map_tasks(..., device="gpu")``): valid
mappings, the same mapping for the same seed, the same mapping whether tries and
splits run concurrently (worker threads, a CUDA stream each) or one after another,
and quality comparable to the CPU backend's.

The graphs are large enough (>= ``DeviceContext.gpu_min_vertices`` vertices, also below
the top split) for the GPU paths to run: device splits, device tries, GPU levels."""
from dataclasses import replace

import numpy as np
import pytest

from procmap import map_tasks, preset
from procmap.engines import hm, multilevel
from procmap.generators import grid_graph, random_geometric_graph
from procmap.kernels import backend
from procmap.topology import Hierarchy

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")

# 2-way top split: both halves (~150k vertices) are split on the device
GRID = grid_graph((600, 500))
TOP2 = Hierarchy.parse("4:2:2", "1:10:100")


@pytest.fixture(scope="module")
def rgg():
    return random_geometric_graph(200_000, seed=5)


def _serial(monkeypatch):
    """Force tries and splits to run one after another in the calling thread (the
    path taken under Numba's workqueue threading layer)."""
    monkeypatch.setattr(hm, "threading_layer", lambda: "workqueue")
    monkeypatch.setattr(multilevel, "threading_layer", lambda: "workqueue")


@pytest.mark.parametrize("engine", ["hm", "hm-ultra", "im"])
def test_gpu_mapping_is_valid_and_deterministic(engine):
    assert GRID.n // 2 >= preset(engine).device.gpu_min_vertices
    a = map_tasks(GRID, TOP2, engine=engine, seed=4, device="gpu")
    b = map_tasks(GRID, TOP2, engine=engine, seed=4, device="gpu")
    assert a.device == "gpu"
    assert a.evaluation.valid
    assert a.evaluation.loads.max() <= a.evaluation.limit
    assert np.array_equal(a.pes, b.pes) and a.J == b.J


@pytest.mark.parametrize("engine", ["hm", "im"])
def test_gpu_gkway_schemes_give_valid_deterministic_mappings(engine):
    """Union-find coarsening and independent-set refinement end to end on the GPU,
    including the refinement that ends GPU splits (hm) and im's finest level."""
    kw = dict(engine=engine, seed=3, device="gpu", coarsening="unionfind", refinement="isr")
    a = map_tasks(GRID, TOP2, **kw)
    b = map_tasks(GRID, TOP2, **kw)
    assert a.device == "gpu" and a.evaluation.valid
    assert np.array_equal(a.pes, b.pes)


@pytest.mark.parametrize("engine", ["hm", "hm-ultra"])
def test_concurrent_device_tries_and_splits_equal_serial(engine, monkeypatch):
    """hm-ultra's top split makes 4 tries, its device subgraphs 2 each: concurrently
    on worker streams they must give the mapping the serial order gives."""
    concurrent = map_tasks(GRID, TOP2, engine=engine, seed=7, device="gpu")
    _serial(monkeypatch)
    serial = map_tasks(GRID, TOP2, engine=engine, seed=7, device="gpu")
    assert np.array_equal(concurrent.pes, serial.pes)
    assert concurrent.J == serial.J


def test_concurrent_tries_return_arrays_safe_to_keep():
    """kway_partition's result on the GPU is a fresh array of the calling thread's
    stream (adopted from the worker), equal to the serial result."""
    g = GRID
    dev = backend.gpu().upload_graph(g.xadj, g.adjncy, g.adjwgt, g.vwgt)
    lmax = int(np.ceil(1.03 * g.n / 4))
    hm_ctx = preset("hm")
    ctx = replace(hm_ctx, schedule=replace(hm_ctx.schedule, tries=(3,)))
    parts = [multilevel.kway_partition(*dev, 4, lmax, eps=0.03, seed=2, ctx=ctx)
             for _ in range(2)]
    assert isinstance(parts[0], cp.ndarray)
    assert cp.array_equal(parts[0], parts[1])
    assert int(cp.bincount(parts[0], minlength=4).max()) <= lmax


@pytest.mark.parametrize("engine", ["hm", "im"])
def test_gpu_quality_close_to_cpu(engine, rgg):
    """Deliverable 5 of the GPU issue: equal quality on the same input. Random
    geometric graphs measure within 1% at 2^23. At this size one seed's J varies by a
    few percent on either device (the coarsest graph's METIS partition): the geometric
    means over three seeds are compared, within 5%."""
    h = Hierarchy.parse("4:8:2", "1:10:100")
    js = {}
    for device in ("gpu", "cpu"):
        runs = [map_tasks(rgg, h, engine=engine, seed=s, device=device) for s in (1, 2, 3)]
        assert all(r.evaluation.valid for r in runs)
        js[device] = np.exp(np.mean(np.log([r.J for r in runs])))
    assert js["gpu"] <= 1.05 * js["cpu"]


def test_im_refines_groups_on_device_levels():
    """RefinementContext.device_group_levels: the node and processor groups are refined on
    the GPU levels too (they always are on host levels); the mapping stays valid and
    deterministic, and differs from the one without."""
    im = preset("im")
    on = replace(im, refinement=replace(im.refinement, device_group_levels=2, group_max_n=10**9))
    im = replace(im, refinement=replace(im.refinement, device_group_levels=0))
    a = map_tasks(GRID, TOP2, context=on, seed=4, device="gpu")
    b = map_tasks(GRID, TOP2, context=on, seed=4, device="gpu")
    off = map_tasks(GRID, TOP2, context=im, seed=4, device="gpu")
    assert a.device == "gpu" and a.evaluation.valid
    assert a.evaluation.loads.max() <= a.evaluation.limit
    assert np.array_equal(a.pes, b.pes)
    assert not np.array_equal(a.pes, off.pes)


MESH = grid_graph((1024, 512))


@pytest.mark.parametrize("engine, ratio", [("hm", 1.04), ("im", 1.08)])
def test_gpu_quality_on_a_mesh_close_to_cpu(engine, ratio):
    """Meshes are where the GPU path lost most against the CPU's FM: before Jet ran longer
    on the GPU levels (RefinementContext.gpu_patience and polish_patience) this mesh
    measured GPU / CPU J of 1.079 (hm) and 1.123 (im) on an H100, after it 0.999 and
    1.060."""
    h = Hierarchy.parse("4:8:2", "1:10:100")
    gpu = map_tasks(MESH, h, engine=engine, seed=1, device="gpu")
    cpu = map_tasks(MESH, h, engine=engine, seed=1, device="cpu")
    assert gpu.evaluation.valid and cpu.evaluation.valid
    assert gpu.J <= ratio * cpu.J


def test_im_on_a_device_graph_that_does_not_coarsen():
    """Power-law-like input above DeviceContext.gpu_min_vertices that matching does not
    contract (CoarseningContext.max_edge_keep): im's coarsest graph is the input, still on
    the device, and its initial multisection runs there (hm without FM, random starts).
    The mapping is valid, deterministic, never worse than that hm pipeline alone with the
    same seed, and close to plain hm's."""
    from procmap import CommGraph
    rng = np.random.default_rng(7)
    n = 60_000
    src, dst = rng.integers(0, n, 8 * n), rng.integers(0, n, 8 * n)
    keep = src != dst
    g = CommGraph.from_edges(src[keep], dst[keep], np.ones(int(keep.sum())), n=n)
    h = Hierarchy.parse("4:8:2", "1:10:100")
    from procmap.engines.context import preset
    im = [map_tasks(g, h, engine="im", seed=2, device="gpu") for _ in range(2)]
    hm_gpu = map_tasks(g, h, engine="hm", seed=2, device="gpu")
    start = map_tasks(g, h, context=preset("im").initial.uncoarsened, seed=2, device="gpu")
    assert im[0].evaluation.valid and hm_gpu.evaluation.valid
    np.testing.assert_array_equal(im[0].pes, im[1].pes)
    assert im[0].J <= start.J
    assert im[0].J <= 1.01 * hm_gpu.J

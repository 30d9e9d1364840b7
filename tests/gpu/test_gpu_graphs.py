"""The Jet loop as a CUDA graph (kernels/cuda_graphs.py): every loop mode gives the
same result, the while node really loops on the device, and the loop state stays
right across rebalancing iterations run from the host."""
import numpy as np
import pytest

from procmap.generators import delaunay_graph, grid_graph, random_geometric_graph
from procmap.graph import CommGraph
from procmap.kernels.refinement import jet_cpu

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")

HIER = (np.array([4, 32, 192]), np.array([1.0, 10.0, 100.0]))
CUT = (np.array([8]), np.array([1.0]))


def _modes():
    from procmap.kernels import cuda_graphs
    modes = ["off", "replay"]
    if cuda_graphs.cudart() is not None:
        modes.append("while")
    return modes


def dev(g):
    return tuple(cp.asarray(a) for a in (g.xadj, g.adjncy, g.adjwgt, g.vwgt))


def lmax_of(g, k, eps=0.03):
    return int(np.ceil((1 + eps) * g.vwgt.sum() / k))


def float_graph(seed=4):
    rng = np.random.default_rng(seed)
    n, m = 1500, 12000
    return CommGraph.from_edges(rng.integers(0, n, m), rng.integers(0, n, m), rng.random(m) * 7,
                                n=n, vwgt=rng.integers(1, 4, n))


GRAPHS = {
    "grid": lambda: grid_graph((60, 50)),
    "rgg": lambda: random_geometric_graph(4000, seed=1),
    "delaunay": lambda: delaunay_graph(4000, seed=2),
    "float": float_graph,
}


def starts(n, k):
    rng = np.random.default_rng(7)
    balanced = rng.permutation(np.arange(n) % k).astype(np.int32)
    skewed = (np.arange(n) * k // n).astype(np.int32)
    skewed[: n // 4] = 0  # block 0 overloaded: weak and strong rebalancing run
    return {"balanced": balanced, "skewed": skewed}


@pytest.mark.parametrize("name", sorted(GRAPHS))
@pytest.mark.parametrize("hier", ["cut", "dist"])
@pytest.mark.parametrize("start", ["balanced", "skewed"])
def test_every_loop_mode_gives_the_same_result(name, hier, start):
    from procmap.kernels.refinement import jet_gpu
    g = GRAPHS[name]()
    prefix, dist = HIER if hier == "dist" else CUT
    k = int(prefix[-1])
    part = starts(g.n, k)[start]
    results = {}
    for mode in _modes():
        p, c = jet_gpu.jet_refine(*dev(g), cp.asarray(part), k, lmax_of(g, k), prefix, dist,
                                  graph_mode=mode, seed=2)
        results[mode] = (p.get(), c)
    ref_part, ref_cost = results["off"]
    for mode, (p, c) in results.items():
        np.testing.assert_array_equal(p, ref_part, err_msg=mode)
        assert c == ref_cost, mode
    # and the result is a real refinement: balanced, cost reported right
    assert jet_cpu.block_weights(ref_part, g.vwgt, k).max() <= lmax_of(g, k)
    assert ref_cost == pytest.approx(jet_cpu.cost(g.xadj, g.adjncy, g.adjwgt, ref_part, prefix,
                                                  dist), rel=1e-12)


@pytest.mark.parametrize("hier", ["cut", "dist"])
def test_graph_loop_is_bit_identical_to_the_cpu_loop_when_lp_only(hier):
    """Integer weights and no overload possible: the device-side decisions must be the
    CPU loop's, iteration for iteration."""
    from procmap.kernels.refinement import jet_gpu
    g = GRAPHS["rgg"]()
    prefix, dist = HIER if hier == "dist" else CUT
    k = int(prefix[-1])
    part = starts(g.n, k)["balanced"]
    lmax = int(g.vwgt.sum())
    want, want_cost = jet_cpu.jet_refine(g.xadj, g.adjncy, g.adjwgt, g.vwgt, part, k, lmax,
                                         prefix, dist)
    for mode in _modes():
        got, cost = jet_gpu.jet_refine(*dev(g), cp.asarray(part), k, lmax, prefix, dist,
                                       graph_mode=mode)
        np.testing.assert_array_equal(got.get(), want, err_msg=mode)
        assert cost == want_cost


_COUNTER_SRC = r"""
typedef __device_builtin__ unsigned long long cudaGraphConditionalHandle;
extern "C" __device__ __cudart_builtin__ void cudaGraphSetConditional(
    cudaGraphConditionalHandle handle, unsigned int value);
extern "C" __global__ void step(long long* counter, long long stop_at,
                                unsigned long long handle, long long* status) {
    long long c = ++counter[0];
    long long go_on = c < stop_at;
    status[0] = go_on;
    status[1] = c;
    if (handle != 0) cudaGraphSetConditional(handle, (unsigned)go_on);
}
"""


@pytest.mark.parametrize("mode", ["off", "replay", "while"])
def test_device_loop_runs_until_the_device_says_stop(mode):
    from procmap.kernels import cuda_graphs
    if mode == "while" and cuda_graphs.cudart() is None:
        pytest.skip("cuda.bindings is not installed")
    step = cp.RawModule(code=_COUNTER_SRC).get_function("step")
    with cuda_graphs.loop_stream():
        counter = cp.zeros(1, dtype=cp.int64)

        def body(handle, status_ptr):
            step((1,), (1,), (counter, np.int64(37), handle, status_ptr))

        loop = cuda_graphs.DeviceLoop(body, mode)
        launches = loop.run()
    assert loop.mode == mode
    assert int(counter.get()[0]) == 37 and int(loop.status[1]) == 37
    assert int(loop.status[0]) == 0
    # the first iteration runs directly; then the while node needs one launch for the
    # remaining 36 iterations, the other modes one each
    assert launches == (2 if mode == "while" else 37)
    # once captured, a run starts with the graph: the while node's condition starts at 1
    with cuda_graphs.loop_stream():
        counter.fill(0)
        launches = loop.run()
    assert int(counter.get()[0]) == 37 and int(loop.status[0]) == 0
    assert launches == (1 if mode == "while" else 37)


def test_a_single_iteration_captures_nothing():
    from procmap.kernels import cuda_graphs
    step = cp.RawModule(code=_COUNTER_SRC).get_function("step")
    with cuda_graphs.loop_stream():
        counter = cp.zeros(1, dtype=cp.int64)
        loop = cuda_graphs.DeviceLoop(
            lambda h, p: step((1,), (1,), (counter, np.int64(1), h, p)), "replay")
        assert loop.run() == 1
    assert not loop.captured and int(counter.get()[0]) == 1


def test_bad_mode_is_rejected(monkeypatch):
    from procmap.kernels import cuda_graphs
    monkeypatch.setenv("PROCMAP_CUDA_GRAPHS", "sometimes")
    with pytest.raises(ValueError, match="PROCMAP_CUDA_GRAPHS"):
        cuda_graphs.mode_from_env()

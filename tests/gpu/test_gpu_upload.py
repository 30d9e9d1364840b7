"""Graph upload through narrowed dtypes and pinned staging buffers (gpu_common.upload)."""
import numpy as np
import pytest

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")

from procmap.kernels import gpu_common  # noqa: E402


@pytest.mark.parametrize("top,dtype", [(1, np.int64), (200, np.int64), (60_000, np.int64),
                                       (2**31 - 1, np.int64), (2**40, np.int64),
                                       (70_000, np.int32)])
@pytest.mark.parametrize("chunk_bytes", [64, 4096, gpu_common.STAGING_BYTES])
def test_upload_round_trips_integers(monkeypatch, top, dtype, chunk_bytes):
    monkeypatch.setattr(gpu_common, "STAGING_BYTES", chunk_bytes)
    rng = np.random.default_rng(top % 97)
    a = rng.integers(0, top, 10_007, endpoint=True).astype(dtype)
    a[-1] = top
    dev = gpu_common.upload(a, np.int64 if dtype == np.int64 else np.int32)
    assert dev.dtype == (np.int64 if dtype == np.int64 else np.int32)
    np.testing.assert_array_equal(dev.get(), a)


def test_upload_floats_and_empty():
    a = np.random.default_rng(1).random(5000) * 1e6
    np.testing.assert_array_equal(gpu_common.upload(a, np.float64).get(), a)
    assert gpu_common.upload(np.zeros(0, np.int64), np.int64).size == 0


def test_upload_graph_dtypes():
    from procmap.generators import grid_graph
    g = grid_graph((30, 40), weight=3)
    out = gpu_common.upload_graph(g.xadj, g.adjncy, g.adjwgt, g.vwgt)
    for host, dev, dt in zip((g.xadj, g.adjncy, g.adjwgt, g.vwgt), out,
                             (np.int64, np.int32, np.int64, np.int64)):
        assert dev.dtype == dt
        np.testing.assert_array_equal(dev.get(), host)

"""Kernel modules: the source CuPy compiles (and keys its disk cache by) covers the headers."""
import pytest

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")

from procmap.kernels import gpu_common  # noqa: E402


def test_module_source_changes_with_a_header(tmp_path):
    (tmp_path / "k.cu").write_text('#include "h.cuh"\nextern "C" __global__ void f() {}\n')
    (tmp_path / "cuda").mkdir()
    (tmp_path / "cuda" / "h.cuh").write_text("#define X 1\n")
    first = gpu_common.module_source("k.cu", tmp_path)
    assert first.split("\n", 1)[1] == (tmp_path / "k.cu").read_text()
    assert gpu_common.module_source("k.cu", tmp_path) == first  # deterministic
    (tmp_path / "cuda" / "h.cuh").write_text("#define X 2\n")
    assert gpu_common.module_source("k.cu", tmp_path) != first


def test_every_module_compiles_with_the_digest_line():
    paths = sorted(gpu_common.KERNELS_DIR.glob("*/*.cu"))
    assert len(paths) >= 9  # every phase folder's modules, not an empty glob
    for path in paths:
        name = path.relative_to(gpu_common.KERNELS_DIR).as_posix()
        assert gpu_common.module_source(name).startswith("// headers ")
        gpu_common.module(name)

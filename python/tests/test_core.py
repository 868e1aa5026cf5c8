"""The ctypes core: loading, version, threads, errors, zero-copy views."""
import threading

import numpy as np
import pytest

import attn
from attn import _arrays

from conftest import naive_sdpa, close


def test_version_matches_library():
    assert attn.version() == attn.__version__ == "0.1.0"


def test_loaded_from_the_installed_package():
    # the shared library sits inside the package (not the source tree's python/attn)
    import os
    from attn import _lib
    assert os.path.dirname(_lib._library_path()) == os.path.dirname(attn.__file__) or \
        os.environ.get("ATTN_LIBRARY")


def test_threads():
    # one per physical core, within the cgroup's CPU quota (attn_cpu_default_threads)
    assert 1 <= attn.default_threads() <= attn.cpu_count()
    assert attn.get_num_threads() == attn.default_threads()
    try:
        attn.set_num_threads(1)
        assert attn.get_num_threads() == 1
        with pytest.raises(ValueError):
            attn.set_num_threads(-1)
    finally:
        attn.set_num_threads(0)
    assert attn.get_num_threads() == attn.default_threads()


def test_cpu_info():
    text = attn.cpu_info()
    assert text.startswith("cpu: ")
    assert "matmul precision (auto): " in text
    assert f"{attn.default_threads()} by default (one per physical core" in text
    assert text.endswith("\n") and "\0" not in text
    # the same text from a second call (the choice is a fixed table, not a timing)
    assert attn.cpu_info() == text


def test_errors_carry_the_library_message(rng):
    q = rng.standard_normal((1, 2, 3, 4), dtype=np.float32)
    k = rng.standard_normal((1, 2, 5, 3), dtype=np.float32)
    with pytest.raises(ValueError) as e:
        attn.sdpa(q, k, k)
    assert isinstance(e.value, attn.AttnError)
    assert e.value.status_name == "ATTN_E_SHAPE"
    assert "does not match query" in str(e.value)
    # non-finite input: ATTN_E_NONFINITE
    bad = q.copy()
    bad[0, 0, 0, 0] = np.nan
    with pytest.raises(attn.AttnValueError) as e:
        attn.sdpa(bad, q, q)
    assert e.value.status_name == "ATTN_E_NONFINITE"
    # a mask that does not broadcast
    with pytest.raises(ValueError) as e:
        attn.sdpa(q, q, q, attn_mask=np.ones((2, 2), dtype=bool))
    assert e.value.status_name == "ATTN_E_BROADCAST"
    # dtypes attn does not take are TypeError, before any call
    with pytest.raises(TypeError):
        attn.sdpa(q.astype(np.float64), q, q)
    # the context stays usable after errors
    close(attn.sdpa(q, q, q), naive_sdpa(q, q, q)[0])


def test_views_are_zero_copy(rng):
    base = rng.standard_normal((2, 5, 3, 4), dtype=np.float32)  # [B, L, H, D]
    q = base.transpose(0, 2, 1, 3)                                # [B, H, L, D], strided
    r = _arrays.raw(q)
    assert r.obj is q
    assert r.ptr == base.__array_interface__["data"][0]
    assert r.stride == [60, 4, 12, 1]
    t = r.tensor()
    assert t.data == base.ctypes.data and list(t.stride) == [60, 4, 12, 1]
    # a slice: the pointer moves, nothing is copied
    s = base[:, 1:4, :, ::2]
    rs = _arrays.raw(s)
    assert rs.ptr == base.ctypes.data + 12 * 4 and rs.stride == [60, 12, 4, 2]
    # broadcast (stride 0) views stay views
    m = np.broadcast_to(np.ones((1, 5), dtype=bool), (3, 5))
    assert _arrays.raw(m).stride == [0, 1]
    # negative strides are copied (attn refuses them)
    assert _arrays.raw(base[:, ::-1]).obj is not None
    assert _arrays.raw(base[:, ::-1]).ptr != base.ctypes.data
    # results on strided inputs are right
    close(attn.sdpa(q, q, q), naive_sdpa(q, q, q)[0])


def test_out_is_written_in_place(rng):
    q = rng.standard_normal((2, 3, 5, 4), dtype=np.float32)
    buf = np.zeros((2, 5, 3, 4), dtype=np.float32)   # [B, L, H, D] memory
    out = buf.transpose(0, 2, 1, 3)                   # written as [B, H, L, D]
    res = attn.sdpa(q, q, q, out=out)
    assert res is out
    close(buf.transpose(0, 2, 1, 3), naive_sdpa(q, q, q)[0])
    with pytest.raises(TypeError):
        attn.sdpa(q, q, q, out=np.zeros((2, 3, 5, 4), dtype=np.float64))
    with pytest.raises(ValueError):
        attn.sdpa(q, q, q, out=np.zeros((2, 3, 5, 5), dtype=np.float32))


def test_python_threads_run_concurrently(rng):
    # each thread has its own context; results equal the single-threaded ones
    qs = [rng.standard_normal((2, 4, 64, 32), dtype=np.float32) for _ in range(4)]
    want = [attn.sdpa(q, q, q, is_causal=True) for q in qs]
    got = [None] * 4
    errors = []

    def work(i):
        try:
            for _ in range(5):
                got[i] = attn.sdpa(qs[i], qs[i], qs[i], is_causal=True)
        except Exception as e:  # pragma: no cover
            errors.append(e)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    for g, w in zip(got, want):
        assert np.array_equal(g, w)

"""Bad input: wrong dtypes, devices, masks that do not broadcast, negative strides, outputs
that cannot be written, other types.  Each raises a Python exception naming the argument
(never a crash).  And no memory grows over 10^5 calls, nor over thousands of failing ones."""
import gc
import os
import threading

import numpy as np
import pytest

import attn

from conftest import close, naive_sdpa


def _f(rng, *shape):
    return rng.standard_normal(shape, dtype=np.float32)


@pytest.mark.parametrize("which", ["query", "key", "value"])
@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int32, np.complex64, ">f4"])
def test_wrong_dtype_names_the_argument(rng, which, dtype):
    args = {n: _f(rng, 1, 2, 3, 4) for n in ("query", "key", "value")}
    args[which] = args[which].astype(dtype)
    with pytest.raises(TypeError, match=f"attn: {which} has dtype"):
        attn.sdpa(**args)


def test_wrong_types_name_the_argument(rng):
    q = _f(rng, 1, 2, 3, 4)
    with pytest.raises(TypeError, match="query must be a numpy array"):
        attn.sdpa([[1.0]], q, q)
    with pytest.raises(TypeError, match="value must be a numpy array"):
        attn.sdpa(q, q, "v")
    with pytest.raises(TypeError, match="attn_mask must be a numpy array"):
        attn.sdpa(q, q, q, attn_mask=[[True]])
    with pytest.raises(TypeError, match="attn_mask has dtype int32"):
        attn.sdpa(q, q, q, attn_mask=np.ones((3, 3), np.int32))
    with pytest.raises(TypeError, match="out must be a numpy array"):
        attn.sdpa(q, q, q, out=[0.0])
    with pytest.raises(TypeError, match="out must be float32"):
        attn.sdpa(q, q, q, out=np.empty((1, 2, 3, 4), np.float64))
    with pytest.raises(TypeError, match="cu_seqlens_q"):
        attn.sdpa_varlen(q[0], q[0], q[0], [0, 2], np.array([0, 2]))
    with pytest.raises(TypeError, match="cu_seqlens_k must be a 1-D int32 or int64"):
        attn.sdpa_varlen(q[0], q[0], q[0], np.array([0, 2]), np.array([0.0, 2.0]))


def test_bad_options_name_the_argument(rng):
    q = _f(rng, 1, 2, 3, 4)
    with pytest.raises(ValueError, match="window"):
        attn.sdpa(q, q, q, window="wide")
    with pytest.raises(ValueError, match="window"):
        attn.sdpa(q, q, q, window=(-5, 2))
    with pytest.raises(ValueError, match="is_causal"):
        attn.sdpa(q, q, q, is_causal="sideways")
    with pytest.raises(ValueError, match="dropout_p"):
        attn.sdpa(q, q, q, dropout_p=1.5)
    with pytest.raises(ValueError, match="alibi_slopes has 3 values for 2 heads"):
        attn.sdpa(q, q, q, alibi_slopes=[1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="softcap"):
        attn.sdpa(q, q, q, softcap=-1.0)
    with pytest.raises(ValueError, match="enable_gqa"):
        attn.sdpa(q, _f(rng, 1, 1, 3, 4), _f(rng, 1, 1, 3, 4))
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        attn.sdpa(q[0, 0, 0], q[0, 0, 0], q[0, 0, 0])


@pytest.mark.parametrize("shape", [(2, 2), (1, 3, 3, 4), (3, 1, 3, 3), (2, 1, 1, 3, 3)])
def test_mask_that_does_not_broadcast(rng, shape):
    q = _f(rng, 1, 2, 3, 4) if len(shape) < 5 else _f(rng, 1, 1, 2, 3, 4)
    with pytest.raises(ValueError, match="attn_mask") as e:
        attn.sdpa(q, q, q, attn_mask=np.ones(shape, bool))
    assert "broadcast" in str(e.value)


def test_negative_strides_are_read_right(rng):
    # attn refuses negative strides; inputs with them are copied, and the result is right
    base = _f(rng, 2, 3, 5, 4)
    q, k, v = base[::-1], base[:, ::-1], base[..., ::-1, :]
    m = (rng.random((5, 5)) > 0.3)[::-1, ::-1]
    m[:, 0] = True
    close(attn.sdpa(q, k, v, attn_mask=m), naive_sdpa(q, k, v, mask=m)[0])
    qv = _f(rng, 7, 2, 4)[::-1]
    got = attn.sdpa_varlen(qv, qv, qv, np.array([0, 3, 7], np.int32)[::-1][::-1],
                           np.array([0, 3, 7], np.int32))
    assert got.shape == (7, 2, 4)


def test_out_that_cannot_be_written(rng):
    q = _f(rng, 1, 2, 3, 4)
    ro = np.zeros((1, 2, 3, 4), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="out is read-only"):
        attn.sdpa(q, q, q, out=ro)
    assert not ro.any()
    # memory that is really read-only (bytes): a Python error, not a segfault
    frozen = np.frombuffer(bytes(4 * 24), np.float32).reshape(1, 2, 3, 4)
    with pytest.raises(ValueError, match="out is read-only"):
        attn.sdpa(q, q, q, out=frozen)
    with pytest.raises(ValueError, match="out has strides"):
        attn.sdpa(q, q, q, out=np.zeros((1, 2, 3, 4), np.float32)[:, :, ::-1])
    with pytest.raises(ValueError, match="out has shape"):
        attn.sdpa(q, q, q, out=np.zeros((1, 2, 3, 5), np.float32))
    bc = np.lib.stride_tricks.as_strided(np.zeros(4, np.float32), (1, 2, 3, 4), (0, 0, 0, 4))
    with pytest.raises(ValueError, match="out has overlapping memory"):
        attn.sdpa(q, q, q, out=bc)


def test_empty_sizes(rng):
    # nothing to compute: the empty result, as PyTorch gives
    for qs in [(1, 2, 0, 4), (0, 2, 3, 4)]:
        q = _f(rng, *qs)
        k = _f(rng, qs[0], 2, 3, 4)
        out, lse = attn.sdpa(q, k, k, return_lse=True)
        assert out.shape == qs and lse.shape == qs[:-1]
    # no keys: the library says so
    with pytest.raises(ValueError, match="key"):
        attn.sdpa(_f(rng, 1, 2, 3, 4), _f(rng, 1, 2, 0, 4), _f(rng, 1, 2, 0, 4))


def test_misaligned_memory_is_read_and_written(rng):
    # float32 data at an odd address (a bytearray with an offset)
    raw = bytearray(4 * 24 + 1)
    a = np.frombuffer(raw, np.float32, offset=1).reshape(1, 2, 3, 4)
    a[:] = _f(rng, 1, 2, 3, 4)
    outb = bytearray(4 * 24 + 1)
    out = np.frombuffer(outb, np.float32, offset=1).reshape(1, 2, 3, 4)
    attn.sdpa(a, a, a, out=out)
    close(out, naive_sdpa(a, a, a)[0])


def test_sentence_encoder_bad_input():
    from conftest import FIXTURES
    with pytest.raises(FileNotFoundError):
        attn.SentenceEncoder(os.path.join(FIXTURES, "no_such_model"))
    enc = attn.SentenceEncoder(os.path.join(FIXTURES, "bert_tiny"))
    with pytest.raises(TypeError, match=r"sentences\[1\]"):
        enc.encode(["a", 2])
    with pytest.raises(ValueError, match="batch_size"):
        enc.encode(["a"], batch_size=0)


# --------------------------------------------------------------------------------------------
# leaks
# --------------------------------------------------------------------------------------------


def _rss() -> int:
    """Resident set size in bytes (Linux /proc/self/statm)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


needs_proc = pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="no /proc")
BOUND = 2 << 20  # bytes of growth allowed after the warm-up (a leak of 32 B a call: 3 MiB)


def _grows(fn, n, warm):
    for _ in range(warm):
        fn()
    gc.collect()
    before = _rss()
    for _ in range(n):
        fn()
    gc.collect()
    return _rss() - before


@needs_proc
def test_no_leak_over_1e5_calls(rng):
    q = _f(rng, 1, 2, 4, 8)
    m = rng.random((4, 4)) > 0.2
    m[:, 0] = True
    qt = q.transpose(0, 2, 1, 3)  # strided

    def call():
        attn.sdpa(q, q, q, attn_mask=m)
        attn.sdpa(qt, qt, qt, is_causal=True, return_lse=True)

    grown = _grows(call, 50_000, 2_000)  # 10^5 calls
    assert grown < BOUND, f"RSS grew by {grown / 2**20:.2f} MiB over 10^5 calls"


@needs_proc
def test_no_leak_on_the_error_paths(rng):
    q = _f(rng, 1, 2, 3, 4)
    bad_k = _f(rng, 1, 2, 5, 3)            # the library refuses it (ATTN_E_SHAPE)
    bad_mask = np.ones((2, 2), bool)       # ATTN_E_BROADCAST
    nan = q.copy()
    nan[0, 0, 0, 0] = np.nan               # ATTN_E_NONFINITE
    ro = np.zeros((1, 2, 3, 4), np.float32)
    ro.flags.writeable = False

    def call():
        for args, kw in (((q, bad_k, bad_k), {}), ((q, q, q), {"attn_mask": bad_mask}),
                         ((nan, q, q), {}), ((q.astype(np.float64), q, q), {}),
                         ((q, q, q), {"out": ro})):
            try:
                attn.sdpa(*args, **kw)
            except (ValueError, TypeError):
                pass
            else:  # pragma: no cover
                raise AssertionError("no error")

    grown = _grows(call, 1_000, 200)  # 5000 failing calls
    assert grown < BOUND, f"RSS grew by {grown / 2**20:.2f} MiB over 5000 failing calls"


@needs_proc
def test_no_leak_of_thread_contexts(rng):
    # each Python thread gets its own context (and worker pool), freed when it ends
    q = _f(rng, 1, 2, 4, 8)

    def one_thread():
        t = threading.Thread(target=lambda: attn.sdpa(q, q, q))
        t.start()
        t.join()

    grown = _grows(one_thread, 300, 30)
    assert grown < BOUND, f"RSS grew by {grown / 2**20:.2f} MiB over 300 threads"

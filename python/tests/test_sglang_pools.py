"""kvcache.sglang: request pools and token allocators against the seeds' behaviour and the
worked examples of sglang-spec.md (host backend; NumPy, or torch CPU tensors when torch is
installed)."""
import pytest

np = pytest.importorskip("numpy")

import kvcache  # noqa: E402
import kvcache.sglang as S  # noqa: E402
from kvcache.sglang import _ops as T  # noqa: E402


def L(x):
    """A tensor or array as a list."""
    return [int(v) for v in T.tolist(x)]


def arr(values):
    return T.host_array(values)


def test_module_does_not_import_sglang():
    import sys
    assert "sglang" not in sys.modules
    src = open(S.__file__.replace("__init__.py", "common.py")).read()
    assert "import sglang" not in src


def test_req_pool_fifo_none_and_reuse():
    pool = S.ReqToTokenPool(4, 16, "cpu", False)
    reqs = [S.Req() for _ in range(3)]
    assert pool.alloc(reqs) == [1, 2, 3]
    assert [r.req_pool_idx for r in reqs] == [1, 2, 3]
    assert pool.available_size() == 1
    pool.free(reqs[1])
    pool.free(reqs[0])
    assert reqs[0].req_pool_idx is None
    # FIFO (seeds): the row free longest comes first: 4, then 2, then 1.
    new = [S.Req() for _ in range(3)]
    assert pool.alloc(new) == [4, 2, 1]
    # Shortage: None, nothing changed (no request touched).
    extra = [S.Req(), S.Req()]
    assert pool.alloc(extra) is None
    assert extra[0].req_pool_idx is None and pool.available_size() == 0
    # A reusing request keeps its row (chunked), an empty list is fine.
    new[0].is_chunked = 1
    assert pool.alloc([new[0]]) == [4]
    assert pool.alloc([]) == []
    # Reusing without chunked / committed KV: SGLang's assertion.
    with pytest.raises(AssertionError):
        pool.alloc([new[1]])
    with pytest.raises(AssertionError):
        pool.free(S.Req())
    pool.clear()
    assert pool.available_size() == 4


def test_req_pool_double_free_refused():
    pool = S.ReqToTokenPool(2, 8, "cpu")
    r = S.Req()
    pool.alloc([r])
    row = r.req_pool_idx
    pool.free(r)
    r.req_pool_idx = row
    with pytest.raises(kvcache.Misuse):  # SGLang would duplicate the row in its free list
        pool.free(r)


def test_req_pool_write_and_views():
    pool = S.ReqToTokenPool(2, 8, "cpu")
    r = S.Req()
    pool.alloc([r])
    pool.write((r.req_pool_idx, slice(2, 5)), arr([7, 8, 9]))
    assert L(pool.req_to_token[r.req_pool_idx]) == [0, 0, 7, 8, 9, 0, 0, 0]
    pool.write((arr([r.req_pool_idx, r.req_pool_idx]), arr([0, 7])), arr([3, 4]))
    assert L(pool.req_to_token[r.req_pool_idx]) == [3, 0, 7, 8, 9, 0, 0, 4]
    assert L(pool.row_host(r.req_pool_idx, 0, 3)) == [3, 0, 7]
    assert tuple(pool.req_to_token.shape) == (3, 8)


def test_token_allocator_fifo_need_sort_and_groups():
    a = S.TokenToKVPoolAllocator(8, "float16", "cpu", None, need_sort=False)
    assert a.page_size == 1 and a.size == 8
    x = a.alloc(3)
    assert L(x) == [1, 2, 3]
    a.free(arr([2]))
    a.free(arr([1]))
    assert L(a.alloc(6)) == [4, 5, 6, 7, 8, 2]  # FIFO: freed slots after the older ones
    assert a.alloc(2) is None                   # None on shortage, nothing taken
    assert a.available_size() == 1
    assert L(a.alloc(0)) == []
    a.free(arr([]))                              # empty free is a no-op
    with pytest.raises(kvcache.Misuse):          # double free (SGLang accepts it)
        a.free(arr([3, 3]))
    with pytest.raises(kvcache.Misuse):          # the padding slot
        a.free(arr([0]))
    with pytest.raises(NotImplementedError):
        a.alloc_extend()
    # need_sort: frees deferred, merged sorted when an alloc runs short.
    b = S.TokenToKVPoolAllocator(6, "float16", "cpu", None, need_sort=True)
    b.alloc(6)
    b.free(arr([5, 2]))
    b.free(arr([4]))
    assert b.available_size() == 3
    assert L(b.alloc(3)) == [2, 4, 5]
    # Groups: frees inside are released together at the end.
    b.free_group_begin()
    b.free(arr([3]))
    b.free(arr([1]))
    b.free_group_end()
    assert b.available_size() == 2
    st = b.backup_state()
    b.alloc(2)
    b.restore_state(st)
    assert b.available_size() == 2
    b.clear()
    assert b.available_size() == 6


def _paged(size=40, ps=4, need_sort=False):
    return S.PagedTokenToKVPoolAllocator(size, ps, "float16", "cpu", None, need_sort)


def _free_pages(a, pages, ps=4):
    for p in pages:
        a.free(arr(list(range(p * ps, p * ps + ps))))


def test_paged_alloc_free_lifo_sorted_unique():
    a = _paged()
    assert a.num_pages == 10 and a.available_size() == 40
    x = a.alloc(8)
    assert L(x) == list(range(4, 12))           # pages 1, 2, page-major
    with pytest.raises(kvcache.InvalidArgument):  # SGLang silently floors 6 -> 4
        a.alloc(6)
    a.alloc(8)                                   # pages 3, 4
    # One free: touched pages released whole, ascending unique, at the FRONT.
    a.free(arr([13, 9, 8, 14]))                  # pages 3 and 2
    assert L(a.alloc(4)) == [8, 9, 10, 11]       # page 2 first (LIFO, ascending in a call)
    assert L(a.alloc(4)) == [12, 13, 14, 15]
    assert a.get_num_new_pages(arr([13, 3]), arr([6, 0])) == 3
    assert a.get_num_new_pages(arr([13, 7, 5]), decode=True) == 2
    assert S.get_num_new_pages(arr([5]), 1, decode=True) == 0  # SGLang's ps = 1 quirk


def test_paged_alloc_extend_worked_example():
    """sglang-spec 6.8: F = [7, 3, 9, 5, ...]; A: p=6, s=13, last_loc 9; B: p=0, s=3."""
    a = _paged()
    a.alloc(36)                                  # pages 1..9 held, free [10]
    _free_pages(a, [5, 9, 3, 7])                 # prepends: F = [7, 3, 9, 5, 10]
    out = a.alloc_extend(arr([6, 0]), arr([6, 0]), arr([13, 3]), arr([13, 3]), arr([9, -1]), 10)
    assert L(out) == [10, 11, 28, 29, 30, 31, 12, 36, 37, 38]
    assert a.available_size() == 2 * 4           # free list [5, 10]
    # Shortage: None, nothing consumed (SGLang's kernel would have run first).
    assert a.alloc_extend(arr([0]), arr([0]), arr([20]), arr([20]), arr([-1]), 20) is None
    assert a.available_size() == 8
    with pytest.raises(ValueError):              # extend_num_tokens must be exact
        a.alloc_extend(arr([0]), arr([0]), arr([3]), arr([3]), arr([-1]), 4)


def test_paged_alloc_decode_worked_example():
    """sglang-spec 6.9: F = [7, 3, ...], new lengths [13, 7, 5], last_loc of the second
    25 (in-page offset 1) -> [28, 26, 12], two pages consumed."""
    a = _paged()
    a.alloc(40)
    _free_pages(a, [3, 7])
    out = a.alloc_decode(arr([13, 7, 5]), arr([13, 7, 5]), arr([11, 25, 19]))
    assert L(out) == [28, 26, 12]
    assert a.available_size() == 0
    assert a.alloc_decode(arr([9]), arr([9]), arr([31])) is None
    # A last_loc whose offset contradicts the length is refused (SGLang: debug mode only).
    with pytest.raises(kvcache.InvalidArgument):
        a.alloc_decode(arr([7]), arr([7]), arr([26]))


def test_paged_free_segments_and_groups():
    a = _paged()
    a.alloc(16)                                  # pages 1..4: slots 4..19
    a.free_segments([(arr([4, 5, 6, 7]), 0), (arr([], ), 4), (arr([8, 9, 10, 11]), 4)])
    assert a.available_size() == 32
    with pytest.raises(AssertionError):          # start_pos must be page-aligned
        a.free_segment(arr([12]), start_pos=1)
    a.free_group_begin()
    a.free(arr([12, 13]))
    a.free(arr([14, 15]))                        # same page: released once at group end
    a.free_group_end()
    assert a.available_size() == 36
    assert L(a.alloc(4)) == [12, 13, 14, 15]


def test_allocator_resize_is_refused():
    with pytest.raises(NotImplementedError):
        _paged().resize(None)

"""kvcache.sglang.MambaRadixCache: SGLang-style call sequences on the host backend (NumPy,
or torch CPU tensors where torch is installed) with the adapter's HybridReqToTokenPool /
MambaPool, a token allocator and the scheduler functions of mem_cache/common.py.

Expected values are worked out from radix-spec.md section 7 and SGLang's MambaRadixCache:
a node holds at most one state, the state after exactly the tokens up to its end (a split
leaves it with the lower part); a match ends at the deepest node with a state and, with
cow_mamba, copies it into the request's own slot; a finished request donates its running
state to the node at its end (or frees it when that node has one); a lock pins the full
path and the node's state; eviction counts full tokens and states separately, in LRU
order, a node closer to the root being older."""
import pytest

np = pytest.importorskip("numpy")

import kvcache  # noqa: E402
import kvcache.sglang as S  # noqa: E402
from kvcache.sglang import _ops as T  # noqa: E402


def L(x):
    return [int(v) for v in T.tolist(x)]


def npy(x):
    return x.numpy() if hasattr(x, "numpy") else np.asarray(x)


def _params():
    return S.MambaCacheParams(S.Mamba2StateShape(conv=[(4, 3)], temporal=(2, 2, 2)),
                              S.Mamba2StateDType(conv="float32", temporal="float32"))


class World:
    def __init__(self, size=128, states=8, rows=8):
        self.size, self.states = size, states
        self.pool = S.HybridReqToTokenPool(size=rows, mamba_size=states, mamba_spec_state_size=0,
                                           max_context_len=64, device="cpu", enable_memory_saver=False,
                                           cache_params=_params(), mamba_layer_ids=[0, 2],
                                           enable_mamba_extra_buffer=False)
        self.alloc = S.TokenToKVPoolAllocator(size, "float32", "cpu", None, False)
        self.cache = S.MambaRadixCache(S.CacheInitParams(self.pool, self.alloc, 1))
        self.live = []

    def batch(self, reqs):
        return S.ScheduleBatch(list(reqs), self.pool, self.cache)

    def admit(self, req):
        """Match the tokens minus the last (the matched state copied into the request's
        own slot), adopt the prefix, lock the node, cache_protected_len = prefix."""
        key = (req.origin_input_ids + req.output_ids)[:-1]
        m = self.cache.match_prefix(S.MatchPrefixParams(key=S.RadixKey(key), cow_mamba=True, req=req))
        req.prefix_indices = m.device_indices
        req.last_node = m.last_device_node
        self.cache.inc_lock_ref(req.last_node)
        req.cache_protected_len = T.numel(m.device_indices)
        if not req.fill_ids:
            req.fill_ids = list(req.origin_input_ids + req.output_ids)
        self.live.append(req)
        return T.numel(m.device_indices)

    def run(self, req, decode=0):
        """Admitted request: extend, decode, release."""
        b = self.batch([req])
        b.prepare_for_extend()
        self.conserve()
        for _ in range(decode):
            b.prepare_for_decode()
            self.conserve()
        self.release(req)

    def release(self, req, is_insert=True):
        S.release_kv_cache(req, self.cache, is_insert=is_insert)
        self.live.remove(req)

    def conserve(self):
        """KV: free + held by requests + cached == size; Mamba: free + the requests' slots
        + cached states == the pool's size."""
        c = self.cache
        held = sum(max(0, r.kv_allocated_len - r.cache_protected_len) for r in self.live)
        held_states = sum(r.mamba_pool_idx is not None for r in self.live)
        full, states = c.total_size()
        assert self.alloc.available_size() + held + full == self.size
        assert self.pool.mamba_pool.available_size() + held_states + states == self.states
        assert c.full_evictable_size() + c.full_protected_size() == full
        assert c.mamba_evictable_size() + c.mamba_protected_size() == states
        c.sanity_check()


def sizes(c):
    return (c.full_evictable_size(), c.full_protected_size(), c.mamba_evictable_size(),
            c.mamba_protected_size())


def matched(c, tokens):
    return T.numel(c.match_prefix(S.MatchPrefixParams(key=S.RadixKey(list(tokens)))).device_indices)


def test_interface():
    w = World()
    c = w.cache
    assert c.supports_mamba() and not c.supports_swa() and not c.is_chunk_cache()
    assert c.total_size() == (0, 0)
    with pytest.raises(NotImplementedError):
        c.evictable_size()
    with pytest.raises(NotImplementedError):
        c.protected_size()
    m = c.match_prefix(S.MatchPrefixParams(key=S.RadixKey([1, 2])))
    assert T.numel(m.device_indices) == 0 and m.last_device_node == c.root_node
    assert c.inc_lock_ref(c.root_node) == S.IncLockRefResult()
    c.dec_lock_ref(c.root_node)
    assert c.pretty_print() == "#full_tokens: 0, #mamba_num: 0"
    assert c.available_and_evictable_str().startswith("Available full tokens: 128")
    assert c.evict(S.EvictParams(num_tokens=0)) == S.EvictResult()
    S.MambaRadixCache(w.pool, w.alloc, 1)  # the positional form
    plain = S.ReqToTokenPool(4, 32, "cpu")
    with pytest.raises(kvcache.InvalidArgument):
        S.MambaRadixCache(S.CacheInitParams(plain, w.alloc, 1))
    with pytest.raises(kvcache.InvalidArgument):  # SGLang: page 1 without the extra buffer
        S.MambaRadixCache(S.CacheInitParams(w.pool, S.PagedTokenToKVPoolAllocator(
            64, 2, "float32", "cpu", None, False), 2))
    with pytest.raises(kvcache.InvalidArgument):  # the pool has no track buffers
        S.MambaRadixCache(S.CacheInitParams(w.pool, w.alloc, 1, enable_mamba_extra_buffer=True))
    with pytest.raises(NotImplementedError):
        S.MambaRadixCache(S.CacheInitParams(w.pool, w.alloc, 1, disable=True))


def test_prefix_and_state_reuse_split_keeps_the_state_below():
    w = World()
    c = w.cache
    mp = w.pool.mamba_pool
    r1 = S.Req(origin_input_ids=list(range(10)))
    assert w.admit(r1) == 0 and r1.mamba_pool_idx is None  # a miss copies nothing
    b = w.batch([r1])
    assert L(b.prepare_for_extend()) == list(range(1, 11))
    running = r1.mamba_pool_idx
    assert running == 1                                     # the row's fresh slot
    w.conserve()
    for _ in range(4):
        b.prepare_for_decode()
        w.conserve()
    w.release(r1)
    # The running state went to the tree with the 14 tokens: one node, one state.
    assert c.total_size() == (14, 1) and sizes(c) == (14, 0, 1, 0)
    assert r1.mamba_pool_idx is None and mp.available_size() == 8 - 1
    w.conserve()
    mp.mamba2_layer_cache(2).conv[0][running] = 5.0         # the cached state's content
    # r2 shares the 14 tokens: the state is copied into a slot of its own.
    r2 = S.Req(origin_input_ids=list(range(14)) + [100, 101])
    assert w.admit(r2) == 14
    assert L(r2.prefix_indices) == list(range(1, 15))
    assert r2.mamba_pool_idx not in (None, running)
    own = r2.mamba_pool_idx
    assert float(npy(mp.mamba2_layer_cache(2).conv[0])[own].sum()) == 5.0 * 12
    assert sizes(c) == (0, 14, 0, 1)                        # full path + the node's state
    w.conserve()
    b = w.batch([r2])
    assert L(b.prepare_for_extend()) == [15, 16]
    assert r2.mamba_pool_idx == own                         # the row took the copied slot
    w.conserve()
    w.release(r2)
    # [14, 16) is a new leaf with r2's state.
    assert c.total_size() == (16, 2) and sizes(c) == (16, 0, 2, 0)
    w.conserve()
    # A key that leaves the path at 12 splits [0,14): the state stays with [12,14), so no
    # node with a state ends on the key's path: nothing matched, nothing copied.
    r3 = S.Req(origin_input_ids=list(range(12)) + [200, 201])
    assert w.admit(r3) == 0 and r3.mamba_pool_idx is None
    assert c._tree.stats()["nodes"] == 3
    assert matched(c, range(14)) == 14 and matched(c, range(13)) == 0
    w.run(r3)
    assert c.total_size() == (16 + 14 - 12, 3)
    w.conserve()


def test_mamba_then_full_eviction_with_their_own_counts():
    w = World(states=5)
    c = w.cache
    # a: [0,8); b: [0,8) + [50,54); c: [0,4) + [60,64) (its match splits [0,8) at 4).
    ra = S.Req(origin_input_ids=list(range(8)))
    w.admit(ra)
    w.run(ra)
    rb = S.Req(origin_input_ids=list(range(8)) + [50, 51, 52, 53])
    assert w.admit(rb) == 8                                  # a's state ends at 8
    w.run(rb)
    rc = S.Req(origin_input_ids=list(range(4)) + [60, 61, 62, 63])
    assert w.admit(rc) == 0                                  # no state at 4
    w.run(rc)
    assert c.total_size() == (16, 3) and w.pool.mamba_pool.available_size() == 2
    w.conserve()
    # A new request needs 3 states (SGLang's MAMBA_STATE_PER_REQ_PREFIX_CACHE), 2 are free:
    # alloc_req_slots asks EvictParams(num_tokens=0, mamba_num=1). The Mamba LRU is
    # refreshed by the state a match ends at and by an attach (0.5.23's MambaComponent):
    # a's (rb's match end), then b's and c's (attached). a's node has a child: it keeps its
    # KV and loses its state.
    rd = S.Req(origin_input_ids=[90, 91, 92])
    w.admit(rd)
    b = w.batch([rd])
    b.prepare_for_extend()
    assert c.total_size() == (16, 2)
    assert matched(c, list(range(8)) + [1]) == 0             # no state on that path now
    assert matched(c, list(range(4)) + [60, 61, 62, 63, 1]) == 8  # c
    assert matched(c, list(range(8)) + [50, 51, 52, 53, 1]) == 12  # b
    w.conserve()
    w.release(rd)
    assert c.total_size() == (19, 3)
    w.conserve()
    # Direct evictions report their own counts. Mamba, 1 state: the LRU is c's (its match
    # came before b's and rd's attach); its node is a childless leaf and goes whole, the
    # KV it frees not counted (SGLang's evict_mamba counts states only).
    assert c.evict(S.EvictParams(num_tokens=0, mamba_num=1)) == S.EvictResult(0, mamba_num_evicted=1)
    assert c.total_size() == (15, 2)
    w.conserve()
    # Full, 1 token: the LRU leaf is b's [8,12) (rd's is newer); the stateless [4,8) and
    # [0,4) above it are then childless and go with it (SGLang's
    # _iteratively_delete_tombstone_leaf); the state freed with b does not count.
    assert c.evict(S.EvictParams(num_tokens=1)) == S.EvictResult(num_tokens_evicted=12)
    assert c.total_size() == (3, 1)
    w.conserve()
    assert c.evict(S.EvictParams(num_tokens=1, mamba_num=1)) == S.EvictResult(3, 0)
    assert c.total_size() == (0, 0)
    assert w.alloc.available_size() == 128 and w.pool.mamba_pool.available_size() == 5
    w.conserve()


def test_chunked_prefill_checkpoint_and_abort():
    w = World()
    c = w.cache
    r = S.Req(origin_input_ids=list(range(12)), fill_ids=list(range(8)))
    assert w.admit(r) == 0
    b = w.batch([r])
    b.prepare_for_extend()
    w.conserve()
    # The checkpoint: a copy of the running state goes into a new slot, inserted with [0,8).
    S.maybe_cache_unfinished_req(r, c, chunked=True)
    assert r.cache_protected_len == 8 and L(r.prefix_indices) == list(range(1, 9))
    assert c.total_size() == (8, 1) and sizes(c) == (0, 8, 0, 1)
    assert r.mamba_pool_idx == 1                            # the request keeps its own slot
    w.conserve()
    r.fill_ids = list(range(12))
    assert L(b.prepare_for_extend()) == [9, 10, 11, 12]
    w.conserve()
    w.release(r)
    # Two states: the checkpoint at 8 and the running one at 12.
    assert c.total_size() == (12, 2) and sizes(c) == (12, 0, 2, 0)
    assert matched(c, range(13)) == 12
    assert matched(c, range(10)) == 8                       # the deepest state on the path
    w.conserve()
    # Aborted after its extend: its own KV and Mamba slot go back, the tree is unchanged.
    r2 = S.Req(origin_input_ids=list(range(12)) + [7, 8, 9])
    assert w.admit(r2) == 12
    w.batch([r2]).prepare_for_extend()
    w.conserve()
    w.release(r2, is_insert=False)
    assert c.total_size() == (12, 2)
    assert r2.mamba_pool_idx is None and w.pool.mamba_pool.available_size() == 8 - 2
    w.conserve()
    # A request that got a copied state but never a row: release_kv_cache frees the slot.
    r3 = S.Req(origin_input_ids=list(range(12)) + [5])
    assert w.admit(r3) == 12 and r3.mamba_pool_idx is not None
    c.dec_lock_ref(r3.last_node)
    r3.last_node = None
    r3.cache_protected_len = 0
    S.release_kv_cache(r3, c)
    w.live.remove(r3)
    assert r3.mamba_pool_idx is None
    w.conserve()


def test_insert_mamba_exist_and_refusals():
    w = World(size=64, states=4)
    c = w.cache
    mp = w.pool.mamba_pool
    kv = w.alloc.alloc(6)
    s1 = mp.alloc(1)
    r = c.insert(S.InsertParams(key=S.RadixKey([1, 2, 3, 4, 5, 6]), value=kv, mamba_value=s1))
    assert r == S.InsertResult(prefix_len=0, mamba_exist=False)
    assert c.total_size() == (6, 1)
    # Same key again: the node has a state (mamba_exist), the caller keeps its slot; the
    # KV duplicates are freed.
    kv2, s2 = w.alloc.alloc(6), mp.alloc(1)
    assert c.insert(S.InsertParams(key=S.RadixKey([1, 2, 3, 4, 5, 6]), value=kv2,
                                   mamba_value=s2)) == S.InsertResult(6, True)
    assert w.alloc.available_size() == 64 - 6 and c.total_size() == (6, 1)
    mp.free(s2)
    before = (w.alloc.available_size(), mp.available_size())
    with pytest.raises(kvcache.InvalidArgument):
        c.insert(S.InsertParams(key=S.RadixKey([7]), value=None, mamba_value=s1))
    with pytest.raises(kvcache.InvalidArgument):
        c.insert(S.InsertParams(key=S.RadixKey([7]), value=[9], mamba_value=s1, prev_prefix_len=1))
    with pytest.raises(kvcache.Misuse):                     # the slot is the tree's already
        c.insert(S.InsertParams(key=S.RadixKey([8, 9]), value=w.alloc.alloc(2), mamba_value=s1))
    assert (w.alloc.available_size() + 2, mp.available_size()) == before
    with pytest.raises(kvcache.Misuse):
        c.dec_lock_ref(c.match_prefix(S.MatchPrefixParams(key=S.RadixKey([1, 2, 3, 4, 5, 6])))
                       .last_device_node)
    assert c.evict(S.EvictParams(num_tokens=1)) == S.EvictResult(num_tokens_evicted=6)
    assert c.total_size() == (0, 0) and mp.available_size() == 4
    c.reset()

"""kvcache.sglang.SWARadixCache: SGLang-style call sequences on the host backend (NumPy, or
torch CPU tensors where torch is installed) with the adapter's SWATokenToKVPoolAllocator,
ReqToTokenPool and SWAKVPool and the scheduler functions of mem_cache/common.py.

Expected values are worked out from radix-spec.md sections 1-6 (SGLang's SWA component):
a match ends at the deepest node where at least a window of live SWA tokens follows the
last tombstone (a path without a tombstone is valid at every node); the part of a new leaf
below the request's swa_evicted_seqlen is a tombstone and its live part is capped at one
page-aligned window; a lock pins the full side of the whole path and the SWA side of the
nodes covering the last window; eviction counts full and SWA tokens separately."""
import pytest

np = pytest.importorskip("numpy")

import kvcache  # noqa: E402
import kvcache.sglang as S  # noqa: E402
from kvcache.sglang import _ops as T  # noqa: E402


def L(x):
    return [int(v) for v in T.tolist(x)]


def ceil(n, ps):
    return -(-n // ps) * ps


class World:
    """The pools and the cache of one test; conserve() after every step."""

    def __init__(self, ps=1, size=256, size_swa=128, window=4, rows=8, ctx_len=256):
        self.ps, self.window = ps, window
        self.pool = S.ReqToTokenPool(rows, ctx_len, "cpu")
        self.kv = S.SWAKVPool(size, size_swa, ps, "float32", 2, 4, swa_attention_layer_ids=[0, 2],
                              full_attention_layer_ids=[1], device="cpu")
        self.alloc = S.SWATokenToKVPoolAllocator(size, size_swa, ps, "float32", "cpu", self.kv, False)
        self.cache = S.SWARadixCache(S.CacheInitParams(self.pool, self.alloc, ps,
                                                       sliding_window_size=window))
        self.live = []

    def batch(self, reqs):
        return S.ScheduleBatch(list(reqs), self.pool, self.cache, sliding_window_size=self.window)

    def admit(self, req):
        """The scheduler's admission: match the prompt (+ outputs) minus its last token,
        adopt the prefix, lock the node (schedule_policy), cache_protected_len = prefix."""
        key = (req.origin_input_ids + req.output_ids)[:-1]
        m = self.cache.match_prefix(S.MatchPrefixParams(key=S.RadixKey(key)))
        req.prefix_indices = m.device_indices
        req.last_node = m.last_device_node
        req.swa_uuid_for_lock = self.cache.inc_lock_ref(req.last_node).swa_uuid_for_lock
        req.cache_protected_len = T.numel(m.device_indices)
        if not req.fill_ids:
            req.fill_ids = list(req.origin_input_ids + req.output_ids)
        self.live.append(req)
        return T.numel(m.device_indices)

    def release(self, req, is_insert=True):
        S.release_kv_cache(req, self.cache, is_insert=is_insert)
        self.live.remove(req)

    def conserve(self):
        """full free + held by requests + cached == size_full, and the same for SWA. A
        request holds its row's pages past the tree's part (cache_protected_len), and on
        the SWA side past what window eviction freed (swa_evicted_seqlen)."""
        a, c = self.alloc, self.cache
        # (A request admitted on a prefix holds nothing until its extend.)
        held_full = sum(max(0, ceil(r.kv_allocated_len, self.ps) - r.cache_protected_len)
                        for r in self.live)
        held_swa = sum(max(0, ceil(r.kv_allocated_len, self.ps)
                           - max(r.cache_protected_len, r.swa_evicted_seqlen)) for r in self.live)
        full, swa = c.total_size()
        assert a.full_available_size() + held_full + full == a.size_full
        assert a.swa_available_size() + held_swa + swa == a.size_swa
        assert c.full_evictable_size() + c.full_protected_size() == full
        assert c.swa_evictable_size() + c.swa_protected_size() == swa
        c.sanity_check()
        self.alloc._a.check()


def sizes(c):
    return (c.full_evictable_size(), c.full_protected_size(), c.swa_evictable_size(),
            c.swa_protected_size())


def test_interface():
    w = World()
    c = w.cache
    assert c.supports_swa() and not c.supports_mamba() and not c.is_chunk_cache()
    assert c.swa_reprefill_tail_tokens() == 0
    assert c.total_size() == (0, 0)
    with pytest.raises(NotImplementedError):  # SGLang: use the full_ / swa_ sizes
        c.evictable_size()
    with pytest.raises(NotImplementedError):
        c.protected_size()
    m = c.match_prefix(S.MatchPrefixParams(key=S.RadixKey([1, 2, 3])))
    assert T.numel(m.device_indices) == 0 and m.last_device_node == c.root_node
    assert c.inc_lock_ref(c.root_node).swa_uuid_for_lock is None
    c.dec_lock_ref(c.root_node)
    assert "Available full tokens: 256" in c.available_and_evictable_str()
    assert c.pretty_print() == "#full_tokens: 0, #swa_tokens: 0"
    assert c.evict(S.EvictParams(num_tokens=0)) == S.EvictResult()
    # The older positional constructor works too; a non-SWA allocator or no window is
    # refused (SGLang asserts).
    S.SWARadixCache(w.pool, w.alloc, 4, 1)
    plain = S.TokenToKVPoolAllocator(64, "float32", "cpu", None, False)
    with pytest.raises(kvcache.InvalidArgument):
        S.SWARadixCache(S.CacheInitParams(w.pool, plain, 1, sliding_window_size=4))
    with pytest.raises(kvcache.InvalidArgument):
        S.SWARadixCache(S.CacheInitParams(w.pool, w.alloc, 1))
    with pytest.raises(NotImplementedError):
        S.SWARadixCache(S.CacheInitParams(w.pool, w.alloc, 1, disable=True, sliding_window_size=4))
    with pytest.raises(NotImplementedError):  # the plain RadixCache points here
        S.RadixCache(w.pool, w.alloc, 1)


def test_prefix_reuse_across_the_window_rule_then_both_evictions():
    w = World(ps=1, window=4)
    c = w.cache
    # r1: a 10-token prompt, 6 decode steps. Window eviction (free_swa_out_of_window_slots
    # through batch.maybe_evict_swa) at pre_len p frees the SWA side below p - 4 - 1.
    r1 = S.Req(origin_input_ids=list(range(10)))
    assert w.admit(r1) == 0
    b = w.batch([r1])
    assert L(b.prepare_for_extend()) == list(range(1, 11))
    w.conserve()
    for k in range(1, 7):
        assert L(b.prepare_for_decode()) == [10 + k]
        assert r1.swa_evicted_seqlen == 4 + k
        w.conserve()
    # Finished: [0, 16) cached; below swa_evicted_seqlen 10 a tombstone, the live [10, 16)
    # capped at one window: nodes A [0,10) (tombstone), B [10,12), C [12,16).
    w.release(r1)
    assert c.total_size() == (16, 6)
    assert w.alloc.full_available_size() == 256 - 16 and w.alloc.swa_available_size() == 128 - 6
    assert c._tree.stats()["nodes"] == 3
    w.conserve()
    # r2 shares all 16: valid at 16 (6 live tokens after the tombstone), not at 12 (2).
    r2 = S.Req(origin_input_ids=list(range(16)) + [100, 101, 102])
    assert w.admit(r2) == 16
    assert L(r2.prefix_indices) == list(range(1, 17))
    # Its lock: full on the whole path, SWA on C alone (4 tokens cover the window).
    assert r2.swa_uuid_for_lock is not None
    assert sizes(c) == (0, 16, 2, 4)
    w.conserve()
    # A match ending inside C splits it at 14 (both halves keep the lock): 2 + 2 live
    # tokens after the tombstone make 14 a valid end; 12 is not (2), so a key that
    # leaves the path at 12 gets nothing (the tombstone is no valid end either).
    m = c.match_prefix(S.MatchPrefixParams(key=S.RadixKey(list(range(14)) + [200])))
    assert T.numel(m.device_indices) == 14
    assert sizes(c) == (0, 16, 2, 4)
    m = c.match_prefix(S.MatchPrefixParams(key=S.RadixKey(list(range(12)) + [300])))
    assert T.numel(m.device_indices) == 0 and m.last_device_node == c.root_node
    # r2 prefills its 3 new tokens on the cached prefix and decodes 3 (no window eviction:
    # never below cache_protected_len 16).
    b = w.batch([r2])
    assert L(b.prepare_for_extend()) == [17, 18, 19]
    assert L(w.pool.req_to_token[r2.req_pool_idx, :19]) == list(range(1, 20))
    w.conserve()
    for k in range(3):
        b.prepare_for_decode()
        assert r2.swa_evicted_seqlen == 16
        w.conserve()
    w.release(r2)
    # [16, 22) inserted live (swa_evicted_seqlen 16), capped at a window: D [16,18), E [18,22).
    assert c.total_size() == (22, 12)
    assert sizes(c) == (22, 0, 12, 0)
    w.conserve()
    # r3 admitted on 14, prefills 2, then aborted: its own [14, 16) is freed, the tree
    # keeps what it had.
    r3 = S.Req(origin_input_ids=list(range(14)) + [200, 201])
    assert w.admit(r3) == 14
    w.batch([r3]).prepare_for_extend()
    w.conserve()
    w.release(r3, is_insert=False)
    assert c.total_size() == (22, 12)
    assert w.alloc.full_available_size() == 256 - 22 and w.alloc.swa_available_size() == 128 - 12
    w.conserve()
    # SWA shortage: evict_from_tree_cache asks EvictParams(num_tokens=0, swa_num_tokens=4).
    # The SWA LRU (upper nodes older on a path; r3's match touched B and C1 last): C2
    # [14,16) and D, both inner nodes, become tombstones, 2 + 2 SWA tokens, no full token.
    full0 = w.alloc.full_available_size()
    S.evict_from_tree_cache(c, 128 - 12 + 4)
    assert c.total_size() == (22, 8)
    assert w.alloc.full_available_size() == full0 and w.alloc.swa_available_size() == 128 - 8
    w.conserve()
    # The path is now A(t) B C1 C2(t) D(t) E: a window of live tokens ends at 22 (E) and
    # at 14 (B + C1), nowhere in between.
    key = list(range(16)) + [100, 101, 102, 19, 20, 21]
    assert T.numel(c.match_prefix(S.MatchPrefixParams(key=S.RadixKey(key + [7]))).device_indices) == 22
    assert T.numel(c.match_prefix(S.MatchPrefixParams(key=S.RadixKey(key[:20]))).device_indices) == 14
    # (That match split E at 20: E1 [18,20), E2 [20,22).) Full eviction of one token:
    # the only leaf, E2, goes (2 full, 2 SWA); its parent E1 is live, so it stays.
    assert c.evict(S.EvictParams(num_tokens=1)) == S.EvictResult(num_tokens_evicted=2,
                                                                  swa_num_tokens_evicted=2)
    assert c.total_size() == (20, 6)
    w.conserve()
    # Both short: evict_from_tree_cache(238) asks EvictParams(num_tokens=2,
    # swa_num_tokens=116). Full: the leaf E1 (2 full + 2 SWA) and the childless
    # tombstones D and C2 above it (4 full). SWA: the LRU's B (inner: a tombstone, 2
    # SWA), then C1, now an unlocked leaf, goes, and the tombstone chain B, A with it.
    assert (w.alloc.full_available_size(), w.alloc.swa_available_size()) == (236, 122)
    S.evict_from_tree_cache(c, 238)
    assert c.total_size() == (0, 0)
    assert w.alloc.full_available_size() == 256 and w.alloc.swa_available_size() == 128
    w.conserve()


def key_of(tokens):
    return S.MatchPrefixParams(key=S.RadixKey(list(tokens)))


def matched(c, tokens):
    return T.numel(c.match_prefix(key_of(tokens)).device_indices)


def test_chunked_prefill_checkpoints_then_swa_eviction():
    w = World(ps=1, window=4)
    c = w.cache
    r = S.Req(origin_input_ids=list(range(24)), fill_ids=list(range(8)))
    assert w.admit(r) == 0
    b = w.batch([r])
    # Chunk 1: [0, 8), checkpointed (insert, lock moved to the new node, the leaf's live
    # part capped at a window: [0,4) [4,8)).
    assert L(b.prepare_for_extend()) == list(range(1, 9))
    w.conserve()
    S.maybe_cache_unfinished_req(r, c, chunked=True)
    assert r.cache_protected_len == 8 and L(r.prefix_indices) == list(range(1, 9))
    assert r.swa_uuid_for_lock is not None
    assert sizes(c) == (0, 8, 4, 4)     # SWA lock: [4,8) alone covers the window
    w.conserve()
    # Chunk 2: window eviction never goes below cache_protected_len (the tree's), so it
    # frees nothing; [8,16) is inserted live, capped: [8,12) [12,16).
    r.fill_ids = list(range(16))
    assert L(b.prepare_for_extend()) == list(range(9, 17))
    assert r.swa_evicted_seqlen == 8
    w.conserve()
    S.maybe_cache_unfinished_req(r, c, chunked=True)
    assert r.cache_protected_len == 16
    assert sizes(c) == (0, 16, 12, 4)   # the lock moved to [12,16); the old one is gone
    w.conserve()
    # Last chunk, then finished: [0, 24) cached, no decode.
    r.fill_ids = list(range(24))
    assert L(b.prepare_for_extend()) == list(range(17, 25))
    w.conserve()
    w.release(r)
    assert c.total_size() == (24, 24) and sizes(c) == (24, 0, 24, 0)
    w.conserve()
    # SWA LRU: the oldest nodes are the upper ones (each walk touches its path downwards,
    # a match stamps upwards with decreasing ticks, a split child is newer than its upper
    # part): 12 SWA tokens make [0,4) [4,8) [8,12) tombstones, no full token.
    assert c.evict(S.EvictParams(num_tokens=0, swa_num_tokens=12)) == S.EvictResult(0, 12)
    assert c.total_size() == (24, 12)
    w.conserve()
    assert matched(c, range(25)) == 24
    assert matched(c, range(16)) == 16      # [12,16): 4 live tokens after the tombstones
    assert matched(c, range(14)) == 0       # 2 live tokens: no valid end
    # A request checkpointed then aborted frees its own part, the tree keeps the rest.
    r2 = S.Req(origin_input_ids=list(range(24)) + [70, 71, 72, 73, 74], fill_ids=[])
    assert w.admit(r2) == 24
    r2.fill_ids = list(range(24)) + [70, 71, 72]
    w.batch([r2]).prepare_for_extend()
    S.maybe_cache_unfinished_req(r2, c)
    assert r2.cache_protected_len == 27
    w.conserve()
    w.release(r2, is_insert=False)
    assert c.total_size() == (27, 15)        # the checkpointed [24, 27) stays cached
    assert sizes(c)[1] == 0 and sizes(c)[3] == 0
    w.conserve()


@pytest.mark.parametrize("ps", [1, 16])
def test_decode_across_pages_window_eviction_and_reuse(ps):
    window = 32
    w = World(ps=ps, size=512, size_swa=256, window=window)
    c = w.cache
    r1 = S.Req(origin_input_ids=list(range(40)))
    assert w.admit(r1) == 0
    b = w.batch([r1])
    first = ps  # the first slot handed out (slot 0 / page 0 are never used)
    assert L(b.prepare_for_extend()) == list(range(first, first + 40))
    w.conserve()
    outs = []
    for _ in range(30):  # 40 -> 70 tokens, crossing the pages at 48 and 64 (ps 16)
        outs += L(b.prepare_for_decode())
        w.conserve()
    assert outs == list(range(first + 40, first + 70))  # pages come in order
    # Window eviction: at pre_len p the SWA side below p - window - page goes, floored
    # to pages. ps 1: 69 - 33 = 36; ps 16: floor(69 - 48 = 21) = 16.
    ev = 36 if ps == 1 else 16
    assert r1.swa_evicted_seqlen == ev
    assert w.alloc.swa_available_size() == 256 - (ceil(70, ps) - ev)
    w.release(r1)
    # Cached: 70 floored to pages, the part below swa_evicted_seqlen a tombstone; the
    # unaligned tail (ps 16: [64, 70), its page) freed.
    cached = 70 // ps * ps
    assert c.total_size() == (cached, cached - ev)
    assert w.alloc.full_available_size() == 512 - cached
    assert w.alloc.swa_available_size() == 256 - (cached - ev)
    w.conserve()
    # r2 shares the 64 first tokens: a window of live tokens ends at 64 (ps 16: the live
    # [16, 64) is 48 >= 32; ps 1: [36, 64) is 28 < 32 -- no valid end before the window
    # is reached: the match must end at 68 or later, but r2 diverges at 64).
    r2 = S.Req(origin_input_ids=list(range(64)) + [900, 901, 902, 903])
    got = w.admit(r2)
    assert got == (64 if ps == 16 else 0)
    w.conserve()
    b2 = w.batch([r2])
    out = L(b2.prepare_for_extend())
    assert len(out) == 68 - got
    if ps == 16:
        assert out[0] % 16 == 0             # the extend starts on a new page
    w.conserve()
    for _ in range(14):                     # 68 -> 82, crossing the page at 80
        b2.prepare_for_decode()
        w.conserve()
    w.release(r2)
    w.conserve()
    full, swa = c.total_size()
    # r2's first 64 tokens were in the tree already (its own copies freed as duplicates).
    assert full == cached + (82 // ps * ps) - 64
    # Abort: a request admitted on the cached prefix, extended, then aborted.
    r3 = S.Req(origin_input_ids=list(range(64)) + [900, 901, 902, 903, 5, 6])
    w.admit(r3)
    w.batch([r3]).prepare_for_extend()
    w.conserve()
    w.release(r3, is_insert=False)
    assert c.total_size() == (full, swa)
    w.conserve()


def test_locks_full_path_swa_window_and_early_swa_release():
    w = World(ps=1, window=4)
    c = w.cache
    r1 = S.Req(origin_input_ids=list(range(12)))
    w.admit(r1)
    w.batch([r1]).prepare_for_extend()
    w.release(r1)
    assert c.total_size() == (12, 12)       # [0,8) [8,12): the live leaf capped at a window
    r2 = S.Req(origin_input_ids=list(range(12)) + [50, 51])
    assert w.admit(r2) == 12
    assert sizes(c) == (0, 12, 8, 4)        # full: the path; SWA: [8,12) covers the window
    b = w.batch([r2])
    b.prepare_for_extend()
    w.conserve()
    for _ in range(6):                      # 14 -> 20; never below cache_protected_len 12
        b.prepare_for_decode()
        w.conserve()
    assert r2.swa_evicted_seqlen == 14      # pre_len 19 - 4 - 1
    # The window moved past the prefix: SGLang releases the prefix's SWA lock early.
    c.dec_swa_lock_only(r2.last_node, r2.swa_uuid_for_lock)
    r2.swa_prefix_lock_released = True
    assert sizes(c) == (0, 12, 12, 0)
    w.conserve()
    with pytest.raises(kvcache.Misuse):     # released already
        c.dec_swa_lock_only(r2.last_node, r2.swa_uuid_for_lock)
    with pytest.raises(kvcache.InvalidArgument):  # no receipt: refused, not a silent no-op
        c.dec_swa_lock_only(r2.last_node, None)
    # SWA eviction may now take the prefix: [0,8) (inner) and [8,12) (a leaf still
    # full-locked by r2) become tombstones; their full side stays protected.
    assert c.evict(S.EvictParams(swa_num_tokens=12)) == S.EvictResult(0, 12)
    assert c.total_size() == (12, 0) and sizes(c) == (0, 12, 0, 0)
    w.conserve()
    # Finished: the full lock is dropped (skip the SWA part), [0,20) inserted with
    # swa_evicted_seqlen 14: [12,14) a tombstone, [14,20) live, capped: [14,16) [16,20).
    w.release(r2)
    assert c.total_size() == (20, 6) and sizes(c) == (20, 0, 6, 0)
    w.conserve()
    key = list(range(12)) + [50, 51] + list(range(14, 20))
    assert matched(c, key + [1]) == 20
    assert matched(c, key[:18]) == 18       # 2 + 2 live tokens after the tombstone
    assert matched(c, key[:17]) == 0
    # Lock misuse is refused.
    m = c.match_prefix(key_of(key))
    with pytest.raises(kvcache.Misuse):
        c.dec_lock_ref(m.last_device_node)  # not locked
    res = c.inc_lock_ref(m.last_device_node)
    assert sizes(c) == (0, 20, 2, 4)        # SWA: [16,20) alone covers the window
    with pytest.raises(kvcache.InvalidArgument):  # a receipt that is not this lock's
        c.dec_lock_ref(m.last_device_node, S.DecLockRefParams(swa_uuid_for_lock=res.swa_uuid_for_lock + 99))
    c.dec_lock_ref(m.last_device_node, S.DecLockRefParams(swa_uuid_for_lock=res.swa_uuid_for_lock))
    assert sizes(c) == (20, 0, 6, 0)
    w.conserve()


def test_insert_tombstones_revival_and_refusals():
    w = World(ps=1, window=4, size=64, size_swa=32)
    c = w.cache
    toks = list(range(1, 9))
    a = w.alloc.alloc(8)
    r = c.insert(S.InsertParams(key=S.RadixKey(toks), value=a, swa_evicted_seqlen=4))
    assert r == S.InsertResult(prefix_len=0)
    # The SWA sides of the first 4 were freed by the window: a tombstone.
    assert c.total_size() == (8, 4)
    assert matched(c, toks) == 8 and matched(c, toks[:7]) == 0
    # What the test's allocator lends the tree: the 8 full slots, 8 SWA peers (the tree
    # accounts for the live 4; the tombstone's 4 peers are the caller's, freed now).
    w.alloc.free_swa(T.host_i64(a)[:4])
    w.conserve()
    # Insert again with fresh slots and nothing evicted: the overlapped unlocked tombstone
    # takes the incoming slots (its old full slots freed), the rest are duplicates.
    b = w.alloc.alloc(8)
    assert c.insert(S.RadixKey(toks), b).prefix_len == 8
    assert c.total_size() == (8, 8)
    assert matched(c, toks[:4]) == 4        # no tombstone left: valid anywhere
    assert w.alloc.full_available_size() == 64 - 8 and w.alloc.swa_available_size() == 32 - 8
    w.conserve()
    before = (w.alloc.full_available_size(), w.alloc.swa_available_size(), c.total_size())
    with pytest.raises(kvcache.InvalidArgument):
        c.insert(S.InsertParams(key=S.RadixKey([40, 41])))            # no slots
    with pytest.raises(kvcache.InvalidArgument):
        c.insert(S.InsertParams(key=S.RadixKey([40, 41]), value=w.alloc.alloc(2), prev_prefix_len=1))
    with pytest.raises(OverflowError):                                # token ids are int32
        c.match_prefix(key_of([1 << 40]))
    assert c.total_size() == before[2]
    assert c.evict(S.EvictParams(num_tokens=100)) == S.EvictResult(8, 8)
    assert c.total_size() == (0, 0)
    assert w.alloc.full_available_size() == 64 - 2 and w.alloc.swa_available_size() == 32 - 2
    c.reset()
    assert c.match_prefix(key_of(toks)).last_device_node == c.root_node

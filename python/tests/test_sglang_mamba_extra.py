"""kvcache.sglang.MambaRadixCache with the Mamba extra buffer (enable_mamba_extra_buffer: the
ping-pong track slots of HybridReqToTokenPool): SGLang-style call sequences on the host
backend (NumPy or torch CPU) and, where torch, a GPU and a CUDA-capable library are
present, on the CUDA backend with torch device tensors.

The scheduler's part is played by track(): when a forward writes a checkpoint (the state
after `seqlen` page-aligned tokens) into the track slot at mamba_next_track_idx, SGLang
sets mamba_prev_track_seqlen = the last one, mamba_last_track_seqlen = seqlen,
mamba_last_track_idx = that slot and flips mamba_next_track_idx. Each checkpoint's state
holds its seqlen as content, so a test sees which checkpoint the tree took.

The expected values of test_same_results_as_sglang_0_5_23 were produced by SGLang 0.5.23's
own UnifiedRadixCache (FULL + MAMBA, extra buffer, page 4) on the same calls, with
bench/python/mamba_extra_vs_sglang.py (bench/RESULTS.md, session 12, mamba18x); the other
expectations follow SGLang's documented rules (radix-spec.md section 7, sglang-spec.md 3)."""
import pytest

pytest.importorskip("numpy")

import kvcache  # noqa: E402
import kvcache.sglang as S  # noqa: E402
from kvcache.sglang import _ops as T  # noqa: E402
from test_sglang_mamba_radix import World as PlainWorld  # noqa: E402


def _devices():
    out = ["cpu"]
    torch = T.torch
    if torch is not None and torch.cuda.is_available():
        try:
            T.get_context("cuda:0")  # the shared CUDA context (made here on first use)
            out.append("cuda")
        except kvcache.KvcacheError:  # a library built without CUDA
            pass
    return out


DEVICES = _devices()


def L(x):
    return [int(v) for v in T.tolist(x)]


def _params():
    return S.MambaCacheParams(S.Mamba2StateShape(conv=[(4, 3)], temporal=(2, 2, 2)),
                              S.Mamba2StateDType(conv="float32", temporal="float32"))


class World:
    def __init__(self, dev="cpu", ps=16, size=512, states=16, rows=6, pp=2, ctx_len=256):
        self.dev, self.ps, self.size, self.states = dev, ps, size, states
        self.pool = S.HybridReqToTokenPool(size=rows, mamba_size=states, mamba_spec_state_size=0,
                                           max_context_len=ctx_len, device=dev,
                                           enable_memory_saver=False, cache_params=_params(),
                                           mamba_layer_ids=[0, 2], enable_mamba_extra_buffer=True,
                                           enable_overlap_schedule=pp == 2)
        self.alloc = (S.TokenToKVPoolAllocator(size, "float32", dev, None, False) if ps == 1 else
                      S.PagedTokenToKVPoolAllocator(size, ps, "float32", dev, None, False))
        self.cache = S.MambaRadixCache(S.CacheInitParams(self.pool, self.alloc, ps,
                                                         enable_mamba_extra_buffer=True))
        self.live = []

    def conv(self):
        return self.pool.mamba_pool.mamba2_layer_cache(2).conv[0]

    def content(self, slot):
        """The marker a state holds (every element of it is the same value)."""
        return float(self.conv()[int(slot)].sum()) / 12

    # The scheduler's admission as without the extra buffer: match (minus the last token),
    # the matched state copied into the request's own slot, lock, cache_protected_len.
    admit = PlainWorld.admit

    def batch(self, reqs):
        return S.ScheduleBatch(list(reqs), self.pool, self.cache, device=self.dev)

    def prefilled(self, tokens, checkpoints=()):
        """A new request admitted and extended, then the checkpoints its forward wrote:
        (request, its batch, the slots of the extend)."""
        r = S.Req(origin_input_ids=list(tokens))
        self.admit(r)
        b = self.batch([r])
        slots = L(b.prepare_for_extend())
        for n in checkpoints:
            self.track(r, n)
        return r, b, slots

    def track(self, req, seqlen):
        """The forward wrote the state after seqlen tokens into the next track slot."""
        i = req.mamba_next_track_idx
        slot = L(req.mamba_ping_pong_track_buffer)[i]
        self.conv()[slot] = float(seqlen)
        req.mamba_prev_track_seqlen = req.mamba_last_track_seqlen
        req.mamba_last_track_seqlen = seqlen
        req.mamba_last_track_idx = i
        req.mamba_next_track_idx = self.pool.get_mamba_ping_pong_other_idx(i)

    def release(self, req, is_insert=True):
        S.release_kv_cache(req, self.cache, is_insert=is_insert)
        self.live.remove(req)

    def conserve(self):
        """KV (whole pages): free + held by live requests + cached == size; Mamba: free +
        the live requests' running and track slots + cached states == pool size."""
        c, ps = self.cache, self.ps
        held = sum(-(-r.kv_allocated_len // ps) * ps - r.cache_protected_len for r in self.live)
        slots = 0
        for r in self.live:
            slots += r.mamba_pool_idx is not None
            if r.mamba_ping_pong_track_buffer is not None:
                slots += sum(s > 0 for s in L(r.mamba_ping_pong_track_buffer))
        full, states = c.total_size()
        assert self.alloc.available_size() + held + full == self.size
        assert self.pool.mamba_pool.available_size() + slots + states == self.states
        c.sanity_check()


def matched(c, tokens):
    return T.numel(c.match_prefix(S.MatchPrefixParams(key=S.RadixKey(list(tokens)))).device_indices)


def test_interface_with_the_extra_buffer():
    w = World()
    c = w.cache
    assert c.enable_mamba_extra_buffer and c.page_size == 16 and c.supports_mamba()
    assert w.pool.mamba_ping_pong_track_buffer_size == 2
    S.MambaRadixCache(w.pool, w.alloc, 16)  # the positional form follows the pool
    with pytest.raises(kvcache.InvalidArgument):  # the checkpoints live in the pool: both agree
        S.MambaRadixCache(S.CacheInitParams(w.pool, w.alloc, 16, enable_mamba_extra_buffer=False))
    with pytest.raises(kvcache.InvalidArgument):  # the tree's page is the allocator's
        S.MambaRadixCache(S.CacheInitParams(w.pool, w.alloc, 8, enable_mamba_extra_buffer=True))
    r = S.Req(origin_input_ids=list(range(20)))
    w.admit(r)
    w.batch([r]).prepare_for_extend()
    assert T.numel(r.mamba_ping_pong_track_buffer) == 2 and r.mamba_next_track_idx == 0
    assert w.pool.get_mamba_ping_pong_keep_idx(r) == 1  # nothing tracked: the seeds' other index
    w.conserve()


@pytest.mark.parametrize("dev", DEVICES)
def test_finished_request_caches_its_newest_checkpoint(dev):
    w = World(dev)
    c = w.cache
    r, b, slots = w.prefilled(range(40), [32])  # the prefill's last whole page: a checkpoint
    for _ in range(5):                   # decode to 45 tokens: no page boundary reached
        b.prepare_for_decode()       # (ScheduleBatch appends the decoded token)
        w.conserve()
    w.release(r)
    # 32 tokens with the checkpoint's state; the KV past it went back, and so did the
    # running slot and the other track slot; the request's track fields are cleared.
    assert c.total_size() == (32, 1)
    assert w.alloc.available_size() == w.size - 32
    assert w.pool.mamba_pool.available_size() == w.states - 1
    assert r.mamba_pool_idx is None and r.mamba_ping_pong_track_buffer is None
    assert r.mamba_last_track_seqlen is None and r.mamba_next_track_idx is None
    w.conserve()
    # The next request with the same prompt gets 32 tokens and a copy of that state.
    r2 = S.Req(origin_input_ids=list(range(40)) + [7])
    assert w.admit(r2) == 32
    assert L(r2.prefix_indices) == slots[:32]
    assert w.content(r2.mamba_pool_idx) == 32.0
    b = w.batch([r2])
    b.prepare_for_extend()
    w.conserve()
    w.track(r2, 32)  # a checkpoint the tree already has: the tree keeps its own (mamba_exist)
    w.release(r2)
    assert c.total_size() == (32, 1)
    assert w.pool.mamba_pool.available_size() == w.states - 1
    w.conserve()


def test_overshoot_takes_the_previous_checkpoint_or_nothing():
    # Two track slots: the newest checkpoint (48) ran past the 40 committed tokens
    # (speculative decoding), so the previous one (32) is cached.
    w = World()
    r = w.prefilled(range(40), [32, 48])[0]
    w.release(r)
    assert w.cache.total_size() == (32, 1)
    r2 = S.Req(origin_input_ids=list(range(40)) + [1])
    assert w.admit(r2) == 32 and w.content(r2.mamba_pool_idx) == 32.0
    w.release(r2, is_insert=False)
    w.conserve()
    # One track slot: there is no previous checkpoint to fall back to: nothing is cached.
    w1 = World(pp=1)
    r = w1.prefilled(range(40), [32, 48])[0]
    assert r.mamba_prev_track_seqlen == 32 and r.mamba_last_track_idx == 0
    w1.release(r)
    assert w1.cache.total_size() == (0, 0)
    assert w1.alloc.available_size() == w1.size
    assert w1.pool.mamba_pool.available_size() == w1.states
    w1.conserve()


@pytest.mark.parametrize("dev", DEVICES)
def test_chunked_prefill_checkpoints_land_at_chunk_ends(dev):
    w = World(dev)
    c = w.cache
    prompt = list(range(1000, 1070))  # 70 tokens in chunks of 32
    r = S.Req(origin_input_ids=list(prompt), fill_ids=prompt[:32])
    w.admit(r)
    b = w.batch([r])
    slots = L(b.prepare_for_extend())
    w.track(r, 32)                    # the chunk's end is a checkpoint
    S.maybe_cache_unfinished_req(r, c, chunked=True)
    assert c.total_size() == (32, 1)
    assert r.cache_protected_len == 32 and L(r.prefix_indices) == slots
    assert r.mamba_last_track_seqlen is None and r.mamba_prev_track_seqlen is None  # forgotten
    w.conserve()
    r.fill_ids = prompt[:64]
    slots += L(b.prepare_for_extend())
    # A chunk without a checkpoint caches nothing; the row stays the request's prefix.
    S.maybe_cache_unfinished_req(r, c, chunked=True)
    assert c.total_size() == (32, 1) and r.cache_protected_len == 32
    assert L(r.prefix_indices) == slots
    w.conserve()
    w.track(r, 64)
    S.maybe_cache_unfinished_req(r, c, chunked=True)
    assert c.total_size() == (64, 2) and r.cache_protected_len == 64
    w.conserve()
    r.fill_ids = list(prompt)
    b.prepare_for_extend()            # the last chunk: 70 tokens, no new whole page
    for _ in range(10):               # decode to 80: the page boundary at 80 is checkpointed
        b.prepare_for_decode()
        w.conserve()
    w.track(r, 80)
    tokens = r.origin_input_ids + r.output_ids
    w.release(r)
    assert c.total_size() == (80, 3)
    for n, state in ((80, 80.0), (79, 64.0), (64, 64.0), (63, 32.0), (31, None)):
        key = tokens[:n]
        q = S.Req(origin_input_ids=key + [9])
        got = w.admit(q)
        assert got == (0 if state is None else int(state))
        if state is not None:
            assert w.content(q.mamba_pool_idx) == state
        w.release(q, is_insert=False)
    w.conserve()


def test_page_one_with_the_extra_buffer_caches_checkpoints_not_the_running_state():
    w = World(ps=1, size=64)
    r = w.prefilled(range(10), [7])[0]
    w.release(r)
    assert w.cache.total_size() == (7, 1) and w.alloc.available_size() == 64 - 7
    w.conserve()


def test_bad_checkpoint_length_changes_nothing():
    w = World()
    c = w.cache
    r = w.prefilled(range(40), [30])[0]  # a checkpoint length off the page grid
    before = (c.total_size(), w.alloc.available_size(), w.pool.mamba_pool.available_size())
    with pytest.raises(kvcache.InvalidArgument):
        S.release_kv_cache(r, c)
    assert (c.total_size(), w.alloc.available_size(), w.pool.mamba_pool.available_size()) == before
    assert r.last_node is not None and r.mamba_pool_idx is not None
    w.conserve()
    r.mamba_last_track_seqlen = 32    # fixed: the release goes through
    w.release(r)
    assert c.total_size() == (32, 1)
    w.conserve()


def test_retraction_frees_every_mamba_slot_and_readmits():
    w = World()
    c = w.cache
    r = w.prefilled(range(40), [32])[0]
    old_tracks = L(r.mamba_ping_pong_track_buffer)
    w.conserve()
    w.release(r, is_insert=False)     # SGLang's retract: release without insert
    assert c.total_size() == (0, 0)
    assert w.pool.mamba_pool.available_size() == w.states
    assert w.alloc.available_size() == w.size
    assert r.mamba_pool_idx is None and r.mamba_ping_pong_track_buffer is None
    assert r.mamba_last_track_seqlen is None
    w.conserve()
    # Re-admitted later: new slots (the old ones were freed, not reused from the request).
    r.last_node = None
    r.cache_protected_len = 0
    r.kv_committed_len = r.kv_allocated_len = 0
    r.req_pool_idx = None
    w.admit(r)
    b = w.batch([r])
    b.prepare_for_extend()
    assert r.mamba_next_track_idx == 0 and len(L(r.mamba_ping_pong_track_buffer)) == 2
    assert all(s > 0 for s in L(r.mamba_ping_pong_track_buffer)) and old_tracks
    w.conserve()
    w.track(r, 32)
    w.release(r)
    assert c.total_size() == (32, 1)
    w.conserve()


def test_same_results_as_sglang_0_5_23():
    """The call sequence of bench/python/mamba_extra_vs_sglang.py (page 4, two track slots):
    (full tokens cached, states cached, KV free, Mamba slots free, match of each key) after
    each step as SGLang 0.5.23's UnifiedRadixCache gave them, except the last step, where
    kvcache differs (see docs/sglang.md)."""
    ps, rows = 4, 10
    w = World(ps=ps, size=256, states=60, rows=rows, ctx_len=512)
    c = w.cache
    reqs = {}

    def start(name, tokens, n):
        # A request admitted without a match (SGLang's kit locks the root), KV for n tokens.
        req = S.Req(origin_input_ids=list(tokens))
        w.pool.alloc([req])
        req.last_node = c.root_node
        c.inc_lock_ref(req.last_node)
        reqs[name] = req
        grow(name, n)

    def grow(name, n):
        req = reqs[name]
        have = -(-req.kv_allocated_len // ps) * ps
        need = -(-n // ps) * ps - have
        if need:
            w.pool.write((req.req_pool_idx, slice(have, have + need)), w.alloc.alloc(need))
        req.kv_committed_len = req.kv_allocated_len = n
        req.fill_ids = list(req.origin_input_ids[:n])

    def track(name, last, idx, prev):
        req = reqs[name]
        req.mamba_last_track_seqlen, req.mamba_prev_track_seqlen = last, prev
        req.mamba_last_track_idx = idx
        req.mamba_next_track_idx = w.pool.get_mamba_ping_pong_other_idx(idx)

    def finish(name):
        S.release_kv_cache(reqs.pop(name), c)

    a, b, cc, d = list(range(1, 13)), list(range(200, 224)), list(range(300, 312)), list(range(400, 411))
    e = list(range(1, 9)) + list(range(500, 508))
    keys = []

    def view():
        full, states = c.total_size()
        return (full, states, w.alloc.available_size(), w.pool.mamba_pool.available_size(),
                [matched(c, k) for k in keys])

    keys.append(a)
    start("A", a, 12), track("A", 8, 0, 4), finish("A")
    assert view() == (8, 1, 248, 59, [8])
    keys.append(b)
    start("B", b, 16), track("B", 12, 0, None), c.cache_unfinished_req(reqs["B"])
    assert view() == (20, 2, 232, 55, [8, 12])
    keys.append(b)
    grow("B", 24), track("B", 20, 1, None), finish("B")
    assert view() == (28, 3, 228, 57, [8, 20, 20])
    keys.append(cc)
    start("C", cc, 12), track("C", 16, 1, 8), finish("C")
    assert view() == (36, 4, 220, 56, [8, 20, 20, 8])
    keys.append(d)
    start("D", d, 11), finish("D")
    assert view() == (36, 4, 220, 56, [8, 20, 20, 8, 0])
    keys.append(e)
    start("E", e, 16), track("E", 16, 1, 4), finish("E")
    assert view() == (44, 5, 212, 55, [8, 20, 20, 8, 0, 16])
    assert c.evict(S.EvictParams(num_tokens=0, mamba_num=1)).mamba_num_evicted == 1
    assert view() == (44, 4, 212, 56, [8, 20, 20, 8, 0, 16])
    # SGLang evicts B's 8-token leaf and keeps its stateless parent [0, 12) as a leaf
    # (36 tokens left); kvcache's tree deletes that childless stateless node with it.
    c.evict(S.EvictParams(num_tokens=8))
    assert view() == (24, 3, 232, 57, [8, 0, 0, 8, 0, 16])
    w.conserve()


def _branching_world(chunk, ps=4, size=512, states=20, rows=6):
    """World with the cache built with mamba_cache_chunk_size=chunk (None: SGLang's
    default max(64, page))."""
    w = World(ps=ps, size=size, states=states, rows=rows, ctx_len=512)
    w.cache = S.MambaRadixCache(S.CacheInitParams(w.pool, w.alloc, ps, enable_mamba_extra_buffer=True,
                                                  mamba_cache_chunk_size=chunk))
    return w


def _finish_with_checkpoint(w, tokens, seqlen):
    """A request without a match, KV for all its tokens, one checkpoint, finished."""
    ps = w.ps
    req = S.Req(origin_input_ids=list(tokens))
    w.pool.alloc([req])
    req.last_node = w.cache.root_node
    w.cache.inc_lock_ref(req.last_node)
    n = len(tokens)
    w.pool.write((req.req_pool_idx, slice(0, -(-n // ps) * ps)), w.alloc.alloc(-(-n // ps) * ps))
    req.kv_committed_len = req.kv_allocated_len = n
    req.fill_ids = list(tokens)
    req.mamba_last_track_seqlen, req.mamba_prev_track_seqlen, req.mamba_last_track_idx = seqlen, None, 0
    req.mamba_next_track_idx = w.pool.get_mamba_ping_pong_other_idx(0)
    S.release_kv_cache(req, w.cache)


def _match(c, tokens):
    r = c.match_prefix(S.MatchPrefixParams(key=S.RadixKey(list(tokens))))
    return T.numel(r.device_indices), r.mamba_branching_seqlen


def test_branching_seqlen_as_sglang_0_5_23():
    """Sequence 2 of bench/python/mamba_extra_vs_sglang.py (mamba_cache_chunk_size 8, page 4:
    grid 8): the (match, mamba_branching_seqlen) pairs SGLang 0.5.23's UnifiedRadixCache
    gave. The branching point is the full-attention hit floored to the grid when it lies
    past the Mamba hit (MambaComponent.finalize_match_result_in_tree_core)."""
    w = _branching_world(8)
    c = w.cache
    a = list(range(1, 17))
    b = list(range(1, 13)) + list(range(600, 612))
    cc = list(range(1, 13)) + list(range(700, 712))
    d = list(range(1, 17)) + list(range(800, 808))
    _finish_with_checkpoint(w, a, 16)
    assert _match(c, a) == (16, None)
    _finish_with_checkpoint(w, b, 24)  # splits A's node at 12: the upper part has no state
    assert c.total_size() == (28, 2)
    assert [_match(c, k) for k in (a, b, cc, d)] == [(16, None), (24, None), (0, 8), (16, None)]
    c.evict(S.EvictParams(num_tokens=0, mamba_num=1))  # B's state: D's match refreshed A's
    assert c.total_size() == (16, 1)
    assert [_match(c, k) for k in (a, b, cc, d)] == [(16, None), (0, 8), (0, 8), (16, None)]
    assert w.alloc.available_size() == 512 - 16
    assert w.pool.mamba_pool.available_size() == 20 - 1
    c.sanity_check()


def test_branching_seqlen_default_grid_is_max_of_64_and_page():
    """Without mamba_cache_chunk_size the grid is SGLang's default max(FLA's 64, page): at page
    4 a 96-token stateless hit branches at 64; at page 128 the grid is the page."""
    w = _branching_world(None, size=1024)
    c = w.cache
    assert c.mamba_checkpoint_grid == 64
    a = list(range(1, 129))
    b = list(range(1, 97)) + list(range(900, 932))
    _finish_with_checkpoint(w, a, 128)
    _finish_with_checkpoint(w, b, 128)  # A's node splits at 96
    assert _match(c, list(range(1, 97)) + [5000] * 8) == (0, 64)
    assert _match(c, list(range(1, 64)) + [5000] * 8) == (0, None)  # a 60-token hit: below the grid
    assert _match(c, a) == (128, None)
    assert _branching_world(None, ps=128, size=1024).cache.mamba_checkpoint_grid == 128
    assert _branching_world(48, ps=32, size=1024).cache.mamba_checkpoint_grid == 96  # lcm
    with pytest.raises(kvcache.InvalidArgument):
        _branching_world(0)


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("pp", [1, 2])
def test_chunk_checkpoint_hands_over_the_track_slot(dev, pp):
    """SGLang 0.5.23's chunk checkpoint (donate_mamba_ping_pong_slot): the tree takes the
    checkpoint's track slot itself and the request's mamba_ping_pong_track_buffer gets a
    fresh slot at that index; no state is copied, the pool loses one slot (as with a copy).
    A second checkpoint ending at a node that has a state already gives the slot back."""
    w = World(dev, pp=pp)
    c = w.cache
    prompt = list(range(2000, 2070))
    r = S.Req(origin_input_ids=list(prompt), fill_ids=prompt[:32])
    w.admit(r)
    b = w.batch([r])
    b.prepare_for_extend()
    w.track(r, 32)
    keep = w.pool.get_mamba_ping_pong_keep_idx(r)
    before = L(r.mamba_ping_pong_track_buffer)
    free = w.pool.mamba_pool.available_size()
    S.maybe_cache_unfinished_req(r, c, chunked=True)
    after = L(r.mamba_ping_pong_track_buffer)
    assert [k for k in range(pp) if after[k] != before[k]] == [keep]
    assert after[keep] not in before and after[keep] != int(T.tolist(T.host_i64(r.mamba_pool_idx))[0])
    assert w.pool.mamba_pool.available_size() == free - 1
    assert c.total_size() == (32, 1)
    c.match_prefix(S.MatchPrefixParams(key=S.RadixKey(prompt[:32])))
    assert c._ms.value == before[keep]      # the matched node's state: the former track slot
    assert w.content(before[keep]) == 32.0  # the checkpoint, not a copy of it
    w.conserve()
    # A request sharing the chunk sees the checkpoint (copied into its own slot on match).
    q = S.Req(origin_input_ids=prompt[:32] + [7])
    assert w.admit(q) == 32 and w.content(q.mamba_pool_idx) == 32.0
    w.release(q, is_insert=False)
    # The next chunk's checkpoint hands over the (fresh) slot at the new keep index.
    r.fill_ids = prompt[:64]
    b.prepare_for_extend()
    w.track(r, 64)
    keep2 = w.pool.get_mamba_ping_pong_keep_idx(r)
    mid = L(r.mamba_ping_pong_track_buffer)
    S.maybe_cache_unfinished_req(r, c, chunked=True)
    assert c.total_size() == (64, 2)
    c.match_prefix(S.MatchPrefixParams(key=S.RadixKey(prompt[:64])))
    assert c._ms.value == mid[keep2] and L(r.mamba_ping_pong_track_buffer)[keep2] not in mid
    w.conserve()
    w.release(r, is_insert=False)
    w.conserve()

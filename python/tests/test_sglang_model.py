"""Randomized differential test: kvcache.sglang's scheduler functions against a plain-Python
model of SGLang's behaviour written from sglang-spec.md (req rows FIFO, token slots FIFO,
pages LIFO sorted-unique per free, the alloc_extend / alloc_decode kernel semantics of 6.8
/ 6.9, ChunkCache release). Every step's out_cache_loc, rows and table rows must agree."""
import random

import pytest

np = pytest.importorskip("numpy")

import kvcache.sglang as S  # noqa: E402
from kvcache.sglang import _ops as T  # noqa: E402


class Model:
    """SGLang's pools as the spec describes them (need_sort off)."""

    def __init__(self, rows, size, ps):
        self.ps = ps
        self.free_rows = list(range(1, rows + 1))
        self.free = list(range(1, size // ps + 1)) if ps > 1 else list(range(1, size + 1))
        self.table = {}

    def alloc_rows(self, n):
        if n > len(self.free_rows):
            return None
        got, self.free_rows = self.free_rows[:n], self.free_rows[n:]
        return got

    def extend(self, items):
        """items: (row, prefix, seq); returns the new slots or None (nothing changes)."""
        ps = self.ps
        if ps == 1:
            n = sum(s - p for _, p, s in items)
            if n > len(self.free):
                return None
            out, self.free = self.free[:n], self.free[n:]
            o = 0
            for row, p, s in items:
                self.table[row][p:s] = out[o:o + s - p]
                o += s - p
            return out
        need = sum(-(-s // ps) - -(-p // ps) for _, p, s in items)
        if need > len(self.free):
            return None
        out, start = [], 0
        for row, p, s in items:
            last = self.table[row][p - 1] if p > 0 else -1
            mine = []
            a = min(s, -(-p // ps) * ps) - p
            mine += [last + 1 + k for k in range(a)]
            n_i = -(-s // ps) - -(-p // ps)
            pages = self.free[start:start + n_i]
            for pg in pages:
                mine += [pg * ps + k for k in range(ps)]
            mine = mine[:s - p]
            self.table[row][p:s] = mine
            out += mine
            start += n_i
        self.free = self.free[need:]
        return out

    def decode(self, items):
        """items: (row, old_len)."""
        ps = self.ps
        if ps == 1:
            return self.extend([(r, n, n + 1) for r, n in items])
        need = sum(1 for _, n in items if n % ps == 0)
        if need > len(self.free):
            return None
        out, k = [], 0
        for row, n in items:
            if n % ps == 0:
                slot = self.free[k] * ps
                k += 1
            else:
                slot = self.table[row][n - 1] + 1
            self.table[row][n] = slot
            out.append(slot)
        self.free = self.free[need:]
        return out

    def release(self, row, n):
        slots = self.table[row][:n]
        if self.ps == 1:
            self.free += slots
        else:
            self.free = sorted(set(s // self.ps for s in slots)) + self.free
        self.free_rows.append(row)


@pytest.mark.parametrize("ps,seed", [(1, 1), (1, 2), (4, 3), (4, 4), (16, 5), (8, 6)])
def test_random_schedule_matches_the_model(ps, seed):
    rng = random.Random(seed)
    rows, size, width = 6, 20 * ps if ps > 1 else 160, 96
    pool = S.ReqToTokenPool(rows, width, "cpu")
    alloc = (S.TokenToKVPoolAllocator(size, "float16", "cpu", None, False) if ps == 1 else
             S.PagedTokenToKVPoolAllocator(size, ps, "float16", "cpu", None, False))
    cache = S.ChunkCache(pool, alloc, ps)
    model = Model(rows, size, ps)
    running = []
    checked = ooms = 0
    for step in range(300):
        op = rng.random()
        if op < 0.35 and len(running) < rows:
            new = [S.Req(fill_ids=list(range(rng.randint(1, 40))))
                   for _ in range(rng.randint(1, min(3, rows - len(running))))]
            batch = S.ScheduleBatch(new, pool, cache)
            got_rows = model.alloc_rows(len(new))
            for r in got_rows or []:
                model.table[r] = [0] * width
            want = model.extend([(r, 0, len(q.fill_ids)) for r, q in zip(got_rows, new)]) \
                if got_rows else None
            if want is None:
                ooms += 1
                with pytest.raises(RuntimeError):
                    batch.prepare_for_extend()
                for q in new:  # SGLang leaves the rows taken: give them back
                    if q.req_pool_idx is not None:
                        pool.free(q)
                if got_rows:
                    model.free_rows += got_rows
                continue
            out = batch.prepare_for_extend()
            assert [q.req_pool_idx for q in new] == got_rows
            assert [int(v) for v in T.tolist(out)] == want
            running += new
        elif op < 0.8 and running:
            for q in [q for q in running if len(q.fill_ids) >= width - 1]:  # finished
                running.remove(q)
                model.release(q.req_pool_idx, q.kv_committed_len)
                S.release_kv_cache(q, cache)
            if not running:
                continue
            batch = S.ScheduleBatch(list(running), pool, cache)
            batch.seq_lens_cpu = T.host_array([len(q.fill_ids) for q in running])
            batch.req_pool_indices = T.host_array([q.req_pool_idx for q in running])
            want = model.decode([(q.req_pool_idx, len(q.fill_ids)) for q in running])
            if want is None:
                ooms += 1
                with pytest.raises(RuntimeError):
                    batch.prepare_for_decode()
                continue
            out = batch.prepare_for_decode()
            assert [int(v) for v in T.tolist(out)] == want
        elif running:
            q = running.pop(rng.randrange(len(running)))
            model.release(q.req_pool_idx, q.kv_committed_len)
            S.release_kv_cache(q, cache)
        for q in running:
            n = len(q.fill_ids)
            assert [int(v) for v in T.tolist(pool.req_to_token[q.req_pool_idx, :n])] == \
                model.table[q.req_pool_idx][:n]
            checked += 1
    assert checked > 100 and ooms > 0   # both the slot arithmetic and the shortages
    assert alloc.available_size() == (len(model.free) * ps)

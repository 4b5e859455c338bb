"""The ctypes scaffolding that kvcache.radix, kvcache.swa_radix and kvcache.mamba_radix
share: the structs of include/kvcache.h's radix section that every tree takes or returns
(kvc_radix_req, kvc_radix_cache_config, kvc_radix_match, kvc_radix_stats), prototype
declaration, the conversions of token and slot lists into C arrays, the fill of a
kvc_radix_cache_config (alone, or the FULL part of a hybrid tree's config) and the
dependency protocol of kvcache._Handle. It uses only the loaded library
(``kvcache._ffi.lib``) and declares no tree's functions: each module declares its own."""
import array
import ctypes
from ctypes import CFUNCTYPE, POINTER, Structure, c_int, c_int32, c_int64, c_size_t, c_uint32, c_uint64, c_void_p

from . import _ffi

lib = _ffi.lib

# kvc_radix_policy: the FULL eviction order.
POLICIES = {"lru": 0, "lfu": 1, "fifo": 2, "mru": 3, "filo": 4, "priority": 5, "slru": 6}


class RadixReq(Structure):
    """kvc_radix_req, field for field."""
    _fields_ = [("tokens", POINTER(c_int32)), ("num_tokens", c_int64), ("prompt_len", c_int64),
                ("ns", c_uint64), ("priority", c_int32), ("reserved_i32_", c_int32),
                ("inserted_len", c_int64), ("prefix_buf", POINTER(c_int64)),
                ("swa_lock", c_uint64), ("mamba_branching_len", c_int64)]


REQ_OF = CFUNCTYPE(c_void_p, c_void_p, c_void_p)
FREE_FN = CFUNCTYPE(c_int, c_void_p, POINTER(c_int64), c_size_t)


class Config(Structure):
    """kvc_radix_cache_config, field for field."""
    _fields_ = [("struct_size", c_size_t), ("version", c_uint32), ("page_size", c_int32),
                ("policy", c_int), ("slru_threshold", c_int32), ("num_slots", c_int64),
                ("req_of", REQ_OF), ("req_user", c_void_p), ("free_slots", FREE_FN),
                ("free_user", c_void_p), ("on_event", c_void_p), ("event_user", c_void_p),
                ("block_hash", c_void_p), ("hash_user", c_void_p), ("reserved_", c_uint64 * 8)]


class Match(Structure):
    """kvc_radix_match."""
    _fields_ = [("len", c_int64), ("slots", POINTER(c_int64)), ("node", c_void_p),
                ("copied", c_int32), ("reserved_i32_", c_int32)]


class Stats(Structure):
    """kvc_radix_stats."""
    _fields_ = [("nodes", c_int64), ("leaves", c_int64), ("cached_tokens", c_int64),
                ("bytes", c_int64), ("reserved_", c_int64 * 4)]


def fn(name, restype, *argtypes):
    """Declares the library's function `name` and returns it."""
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


VERSION = fn("kvc_version_number", ctypes.c_uint)()


def fill_config(cfg, page_size, policy, slru_threshold, num_slots, req_of):
    """Fills a kvc_radix_cache_config (Config) for a tree over num_slots KV slots; req_of:
    the REQ_OF callback that finds a request's kvc_radix_req. ValueError for an unknown
    policy (nothing is filled then)."""
    if policy not in POLICIES:
        raise ValueError("policy must be one of %s" % ", ".join(POLICIES))
    cfg.struct_size = ctypes.sizeof(Config)
    cfg.version = VERSION
    cfg.page_size = page_size
    cfg.policy = POLICIES[policy]
    cfg.slru_threshold = slru_threshold
    cfg.num_slots = num_slots
    cfg.req_of = req_of


def i32(seq):
    """(ctypes int32 array, length) of a token sequence (an array('i') is copied in one go)."""
    if isinstance(seq, array.array) and seq.typecode == "i":
        n = len(seq)
        out = (c_int32 * max(n, 1))()
        if n:
            ctypes.memmove(out, seq.buffer_info()[0], 4 * n)
        return out, n
    seq = list(seq)
    return (c_int32 * max(len(seq), 1))(*seq), len(seq)


def i64(seq):
    """(ctypes int64 array, length) of a slot sequence."""
    seq = list(seq)
    return (c_int64 * max(len(seq), 1))(*seq), len(seq)


def slots(m):
    """The slots of a filled Match as a list."""
    return [m.slots[i] for i in range(m.len)]


def handle(x):
    """The C handle of a binding object (a Flow), None for None."""
    return getattr(x, "handle", None) if x is not None else None


def hold(*deps):
    """Counts the tree as a user of the objects its C side borrows (the context, pools), so
    that closing them, or the garbage collector finalizing a cycle in any order, destroys
    them only after the tree: kvcache._Handle's protocol."""
    from . import _Handle
    with _Handle._lock:
        for d in deps:
            d._users += 1
    return list(deps)


def release(tree):
    """Drops the counts hold() took for tree (once)."""
    deps, tree._deps = getattr(tree, "_deps", []), []
    for d in deps:
        d._users -= 1
        d._maybe_destroy()

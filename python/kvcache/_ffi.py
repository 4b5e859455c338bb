"""ctypes declarations for libkvcache (include/kvcache.h). Internal module.

Every struct here mirrors the C struct field for field; python/tests/test_abi.py checks
sizes and offsets against the header with a C compiler when one is available.
"""
import ctypes
import ctypes.util
import os
from ctypes import (POINTER, Structure, c_char, c_char_p, c_int, c_int32, c_int64,
                    c_size_t, c_uint, c_uint8, c_uint32, c_uint64, c_void_p)

__all__ = ["lib", "lib_path", "find_library", "fast"]

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(os.path.dirname(_HERE))


def _candidates():
    # 1. bundled: the library the wheel ships inside the package (pip install .)
    for name in ("libkvcache.so", "libkvcache.dylib"):
        yield os.path.join(_HERE, name), "bundled"
    # 2. KVCACHE_LIB: a library chosen by path (source checkouts, an ASan build)
    env = os.environ.get("KVCACHE_LIB")
    if env:
        yield env, "KVCACHE_LIB"
        return  # when set, it is the answer: a wrong path must not load something else
    # 3. a source checkout's build directories, then the system's linker path
    for build in ("build", "build-rel", "build-perf", "build-python", "build-gpu"):
        yield os.path.join(_REPO, build, "libkvcache.so"), "checkout"
    found = ctypes.util.find_library("kvcache")
    if found:
        yield found, "system"


def find_library():
    """Path of the libkvcache shared library this package loads. Search order:

    1. bundled: ``libkvcache.so`` inside the package directory (what ``pip install .``
       and the wheel ship);
    2. ``KVCACHE_LIB``: an explicit path (the only candidate from here on when set);
    3. the build directories of a source checkout (build, build-rel, build-perf,
       build-python, build-gpu next to python/), then the system linker path
       (``ctypes.util.find_library("kvcache")``, e.g. after ``cmake --install``).
    """
    tried = []
    for path, _origin in _candidates():
        tried.append(path)
        if os.path.sep not in path or os.path.exists(path):
            return path
    raise OSError("libkvcache not found (tried %s); `pip install .` bundles it, or build "
                  "it with cmake and set KVCACHE_LIB" % ", ".join(tried))


lib_path = find_library()
lib = ctypes.CDLL(lib_path)


def _load_fast():
    """The optional _kvcfast extension (cmake -DKVC_BUILD_PYTHON_EXT=ON) for this
    interpreter, from the package directory or next to the loaded library; None when
    absent or when KVCACHE_NO_FAST=1. Bound to this very library's functions."""
    if os.environ.get("KVCACHE_NO_FAST") == "1":
        return None
    import importlib.machinery
    import importlib.util
    dirs = [_HERE]
    if os.path.sep in lib_path:
        dirs.append(os.path.dirname(os.path.realpath(lib_path)))
    for d in dirs:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(d, "_kvcfast" + suffix)
            if not os.path.exists(path):
                continue
            spec = importlib.util.spec_from_file_location("kvcache._kvcfast", path)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            addr = [ctypes.cast(getattr(lib, n), c_void_p).value for n in
                    ("kvc_flow_alloc_for_decode", "kvc_flow_alloc_for_extend",
                     "kvc_flow_release")]
            mod.bind(*addr)
            mod.path = path
            return mod
    return None

# --- Structs (mirrors of include/kvcache.h) -------------------------------------------------


class HostAllocator(Structure):
    _fields_ = [("alloc", c_void_p), ("free", c_void_p), ("opaque", c_void_p)]


class DeviceAllocator(Structure):
    _fields_ = [("alloc", c_void_p), ("free", c_void_p), ("opaque", c_void_p)]


class ContextConfig(Structure):
    _fields_ = [("struct_size", c_size_t), ("version", c_uint32), ("backend", c_int),
                ("device", c_int), ("flags", c_uint32), ("cache_dir", c_char_p),
                ("host_allocator", HostAllocator), ("device_allocator", DeviceAllocator),
                ("reserved_", c_uint64 * 8)]


class ExtendArgs(Structure):
    """kvc_extend_args (kvc_allocator_alloc_extend_ex)."""
    _fields_ = [("batch_size", c_size_t), ("prefix_lens", c_void_p), ("seq_lens", c_void_p),
                ("last_locs", c_void_p), ("req_pool", c_void_p), ("req_rows", c_void_p),
                ("prefix_slots", c_void_p), ("out_host", c_void_p), ("out_device", c_void_p),
                ("rows_device", c_void_p), ("stream", c_void_p)]


class DeviceInfo(Structure):
    _fields_ = [("name", c_char * 96), ("compute_major", c_int), ("compute_minor", c_int),
                ("multiprocessors", c_int), ("total_memory", c_size_t), ("l2_bytes", c_size_t),
                ("driver_version", c_int), ("nvrtc_version", c_int)]


class ReqToTokenPoolConfig(Structure):
    _fields_ = [("struct_size", c_size_t), ("version", c_uint32), ("size", c_int32),
                ("max_context_len", c_int32), ("reserved_", c_uint64 * 4)]


class AllocatorConfig(Structure):
    _fields_ = [("struct_size", c_size_t), ("version", c_uint32), ("kind", c_int),
                ("size", c_int64), ("page_size", c_int32), ("flags", c_uint32),
                ("reserved_", c_uint64 * 4)]


class AllocatorStats(Structure):
    _fields_ = [("num_pages", c_int64), ("free_pages", c_int64), ("deferred_pages", c_int64),
                ("held_pages", c_int64), ("group_pending", c_int64), ("merges", c_uint64)]


class AllocatorState(Structure):
    _fields_ = [("opaque_", c_uint64 * 4)]


class KVPoolConfig(Structure):
    _fields_ = [("struct_size", c_size_t), ("version", c_uint32), ("kind", c_int),
                ("size", c_int64), ("page_size", c_int32), ("dtype", c_int),
                ("layer_num", c_int32), ("start_layer", c_int32), ("head_num", c_int32),
                ("head_dim", c_int32), ("v_head_dim", c_int32), ("kv_lora_rank", c_int32),
                ("qk_rope_head_dim", c_int32), ("index_head_dim", c_int32),
                ("index_buf_size", c_int64), ("flags", c_uint32), ("pad_", c_int32),
                ("reserved_", c_uint64 * 8)]


class BufferDesc(Structure):
    _fields_ = [("struct_size", c_size_t), ("version", c_uint32), ("region", c_int),
                ("layer_id", c_int32), ("dtype", c_int), ("ndim", c_int32), ("device", c_int32),
                ("data", c_void_p), ("shape", c_int64 * 4), ("strides", c_int64 * 4),
                ("bytes_per_token", c_int64), ("bytes_per_page", c_int64),
                ("total_bytes", c_int64), ("reserved_", c_uint64 * 4)]


class PrefixCache(Structure):
    """kvc_prefix_cache: a struct of callbacks, passed through by value (never called from
    Python)."""
    _fields_ = [("self", c_void_p), ("is_chunk_cache", c_void_p), ("supports_mamba", c_void_p),
                ("evict", c_void_p), ("evictable_size", c_void_p), ("protected_size", c_void_p),
                ("cached_size", c_void_p), ("cache_finished_req", c_void_p),
                ("cache_unfinished_req", c_void_p), ("inc_lock_ref", c_void_p),
                ("dec_lock_ref", c_void_p)]


class FlowConfig(Structure):
    _fields_ = [("struct_size", c_size_t), ("version", c_uint32), ("page_size", c_int32),
                ("req_pool", c_void_p), ("allocator", c_void_p), ("swa_allocator", c_void_p),
                ("hybrid_req_pool", c_void_p), ("cache", PrefixCache),
                ("sliding_window", c_int32), ("swa_drop_page_margin", c_int32),
                ("spec_num_steps", c_int32), ("spec_topk", c_int32),
                ("spec_num_draft_tokens", c_int32), ("spec_keeps_draft_kv", c_int32),
                ("reserved_", c_uint64 * 6)]


class DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(Structure):
    _fields_ = [("data", c_void_p), ("device", DLDevice), ("ndim", c_int32),
                ("dtype", DLDataType), ("shape", POINTER(c_int64)),
                ("strides", POINTER(c_int64)), ("byte_offset", c_uint64)]


class DLManagedTensor(Structure):
    pass


DLDeleter = ctypes.CFUNCTYPE(None, c_void_p)
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c_void_p),
                            ("deleter", c_void_p)]

# --- Prototypes ---------------------------------------------------------------------------

_st = c_int  # kvc_status
_P = c_void_p
# Vector arguments are plain addresses: the package passes ints it has checked (_buf.py),
# which a POINTER argtype would refuse, and ctypes arrays, which c_void_p takes as well.
_I64P = c_void_p
_I32P = c_void_p


def _fn(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


_fn("kvc_version_number", c_uint)
_fn("kvc_version_string", c_char_p)
_fn("kvc_status_string", c_char_p, c_int)
_fn("kvc_status_name", c_char_p, c_int)
_fn("kvc_dtype_size", c_size_t, c_int)
_fn("kvc_dtype_name", c_char_p, c_int)
# context
_fn("kvc_context_config_default", None, POINTER(ContextConfig))
_fn("kvc_context_create", _st, POINTER(ContextConfig), POINTER(c_void_p))
_fn("kvc_context_destroy", None, _P)
_fn("kvc_context_backend", c_int, _P)
_fn("kvc_context_device", c_int, _P)
_fn("kvc_context_check_mode", c_int, _P)
_fn("kvc_last_error", c_char_p, _P)
_fn("kvc_context_device_info", _st, _P, POINTER(DeviceInfo))
_fn("kvc_context_precompile", _st, _P)
# memory
_fn("kvc_memory_alloc", _st, _P, c_size_t, POINTER(c_void_p))
_fn("kvc_memory_free", None, _P, _P)
_fn("kvc_host_pinned_alloc", _st, _P, c_size_t, POINTER(c_void_p))
_fn("kvc_host_pinned_free", None, _P, _P)
_fn("kvc_memcpy_h2d", _st, _P, _P, _P, c_size_t, _P)
_fn("kvc_memcpy_d2h", _st, _P, _P, _P, c_size_t, _P)
_fn("kvc_memcpy_d2d", _st, _P, _P, _P, c_size_t, _P)
_fn("kvc_memset_d8", _st, _P, _P, c_uint8, c_size_t, _P)
_fn("kvc_stream_synchronize", _st, _P, _P)
# req-to-token pool
_fn("kvc_req_to_token_pool_create", _st, _P, POINTER(ReqToTokenPoolConfig), POINTER(c_void_p))
_fn("kvc_req_to_token_pool_destroy", None, _P)
_fn("kvc_req_to_token_pool_alloc", _st, _P, c_size_t, _I32P)
_fn("kvc_req_to_token_pool_free", _st, _P, c_int32)
_fn("kvc_req_to_token_pool_clear", _st, _P)
_fn("kvc_req_to_token_pool_available", c_int32, _P)
_fn("kvc_req_to_token_pool_is_held", c_int, _P, c_int32)
_fn("kvc_req_to_token_pool_table", _P, _P)
_fn("kvc_req_to_token_pool_size", c_int32, _P)
_fn("kvc_req_to_token_pool_max_context_len", c_int32, _P)
_fn("kvc_req_to_token_pool_row", POINTER(c_int32), _P, c_int32)
_fn("kvc_req_to_token_pool_write", _st, _P, c_int32, c_int32, _I64P, c_size_t, _P)
# allocators
_fn("kvc_allocator_create", _st, _P, POINTER(AllocatorConfig), POINTER(c_void_p))
_fn("kvc_allocator_destroy", None, _P)
_fn("kvc_allocator_available_size", c_int64, _P)
_fn("kvc_allocator_size", c_int64, _P)
_fn("kvc_allocator_page_size", c_int32, _P)
_fn("kvc_allocator_get_stats", _st, _P, POINTER(AllocatorStats))
_fn("kvc_allocator_alloc", _st, _P, c_int64, _I64P)
_fn("kvc_allocator_alloc_extend", _st, _P, c_size_t, _I64P, _I64P, _I64P, _P, _I32P,
    _P, _I64P, _P, _P)
_fn("kvc_allocator_alloc_extend_ex", _st, _P, POINTER(ExtendArgs))
_fn("kvc_allocator_alloc_decode", _st, _P, c_size_t, _I64P, _I64P, _P, _I32P, _I64P, _P, _P)
_fn("kvc_allocator_free", _st, _P, _I64P, c_size_t)
_fn("kvc_allocator_check_free", _st, _P, POINTER(_I64P), POINTER(c_size_t), c_size_t)
_fn("kvc_allocator_free_segment", _st, _P, _I64P, c_size_t, c_int64)
_fn("kvc_allocator_free_group_begin", _st, _P)
_fn("kvc_allocator_free_group_end", _st, _P)
_fn("kvc_allocator_merge_and_sort_free", _st, _P)
_fn("kvc_allocator_backup_state", _st, _P, POINTER(AllocatorState))
_fn("kvc_allocator_restore_state", _st, _P, POINTER(AllocatorState))
_fn("kvc_allocator_clear", _st, _P)
_fn("kvc_allocator_check", _st, _P)
# decode channel (graph path of alloc_decode)
_fn("kvc_decode_channel_create", _st, _P, _P, c_size_t, ctypes.c_uint, _P, POINTER(c_void_p))
_fn("kvc_decode_channel_destroy", None, _P)
_fn("kvc_decode_channel_enqueue", _st, _P, _P)
_fn("kvc_decode_channel_alloc", _st, _P, c_size_t, _I64P, _I64P, _I32P, _I64P)
_fn("kvc_decode_channel_check", _st, _P, POINTER(ctypes.c_uint64), POINTER(ctypes.c_uint64))
# KV pools
_fn("kvc_kv_pool_create", _st, _P, POINTER(KVPoolConfig), POINTER(c_void_p))
_fn("kvc_kv_pool_destroy", None, _P)
_fn("kvc_kv_pool_clear", _st, _P, _P)
_fn("kvc_kv_pool_size_bytes", _st, _P, POINTER(c_size_t), POINTER(c_size_t))
_fn("kvc_kv_pool_set_kv", _st, _P, c_int32, _P, c_int, c_size_t, _P, _P, c_int, c_int64, c_int64,
    _P, ctypes.c_float, _P, ctypes.c_float, _P)
_fn("kvc_kv_pool_move", _st, _P, _P, _P, c_int, c_size_t, _P)
_fn("kvc_kv_pool_gather_kv", _st, _P, c_int32, _P, c_int, c_size_t, _P, _P, c_int, _P)
_fn("kvc_kv_pool_set_mla_kv", _st, _P, c_int32, _P, c_int, c_size_t, _P, _P, c_int, c_int64,
    c_int64, _P)
_fn("kvc_kv_pool_get_mla_kv", _st, _P, c_int32, _P, c_int, c_size_t, _P, _P, c_int, _P)
_fn("kvc_kv_pool_num_buffers", c_int32, _P)
_fn("kvc_kv_pool_describe", _st, _P, c_int32, POINTER(BufferDesc))
_fn("kvc_kv_pool_buffer", _st, _P, c_int, c_int32, POINTER(BufferDesc))
_fn("kvc_kv_pool_export_dlpack", _st, _P, c_int, c_int32, c_int, POINTER(c_void_p))
_fn("kvc_kv_pool_host_copy_bytes", _st, _P, c_size_t, POINTER(c_size_t))
_fn("kvc_kv_pool_copy_to_host", _st, _P, _P, c_int, c_size_t, _P, _P)
_fn("kvc_kv_pool_copy_from_host", _st, _P, _P, c_int, c_size_t, _P, _P)
_fn("kvc_flow_free_slots", _st, _P, _P, c_size_t)
_fn("kvc_dlpack_capsule_destructor", None, _P)
_fn("kvc_dlpack_relay_deleter", None, _P)
_fn("kvc_dlpack_relay_deleter_versioned", None, _P)
# flows and sessions
_fn("kvc_chunk_cache", PrefixCache)
_fn("kvc_flow_create", _st, _P, POINTER(FlowConfig), POINTER(c_void_p))
_fn("kvc_flow_destroy", None, _P)
_fn("kvc_flow_alloc_for_extend", _st, _P, _P, c_size_t, _P, _P)
_fn("kvc_flow_alloc_for_decode", _st, _P, _P, c_size_t, c_int32, _P, _P)
_fn("kvc_flow_set_decode_channel", _st, _P, _P)
_fn("kvc_flow_release", _st, _P, _P, c_size_t, c_int, _P)
_fn("kvc_flow_cache_unfinished", _st, _P, _P)
_fn("kvc_flow_evict", _st, _P, c_int64)
_fn("kvc_flow_available", _st, _P, _I64P, _I64P, _I64P, _I64P)
_fn("kvc_flow_row_slots", _st, _P, c_int32, c_int64, c_int64, _I64P)
_fn("kvc_flow_check", _st, _P, _P, c_size_t)
_fn("kvc_session_cache_create", _st, _P, POINTER(PrefixCache), POINTER(c_void_p))
_fn("kvc_session_cache_destroy", None, _P)
_fn("kvc_session_cache_as_prefix_cache", PrefixCache, _P)
_fn("kvc_session_cache_match", _st, _P, _P, c_int64, POINTER(c_int))
_fn("kvc_session_cache_release", _st, _P, _P, c_uint64)
_fn("kvc_session_cache_held", _st, _P, c_int64, _I64P, _I64P, _I64P)
_fn("kvc_session_cache_reset", None, _P)

fast = _load_fast()

"""The ctypes structs match include/kvcache.h: sizes and a few offsets, checked by
compiling a C program against the header (skipped without a C compiler)."""
import ctypes
import os
import shutil
import subprocess

import pytest

import kvcache as kvc
from kvcache import _dlpack, _ffi, hybrid

HEADER_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "include")
STRUCTS = {
    "kvc_context_config": _ffi.ContextConfig, "kvc_device_info": _ffi.DeviceInfo,
    "kvc_req_to_token_pool_config": _ffi.ReqToTokenPoolConfig,
    "kvc_allocator_config": _ffi.AllocatorConfig, "kvc_allocator_stats": _ffi.AllocatorStats,
    "kvc_allocator_state": _ffi.AllocatorState, "kvc_kv_pool_config": _ffi.KVPoolConfig,
    "kvc_buffer_desc": _ffi.BufferDesc, "kvc_prefix_cache": _ffi.PrefixCache,
    "kvc_flow_config": _ffi.FlowConfig, "kvc_req_state": kvc.ReqState,
    "kvc_mamba_shape": hybrid.MambaShape, "kvc_mamba_pool_config": hybrid.MambaPoolConfig,
    "kvc_hybrid_req_pool_config": hybrid.HybridReqPoolConfig,
    "kvc_swa_allocator_config": hybrid.SwaAllocatorConfig,
    "kvc_swa_kv_pool_config": hybrid.SwaKVPoolConfig,
    "kvc_hybrid_kv_pool_config": hybrid.HybridKVPoolConfig,
    "kvc_dlpack_relay": _dlpack.Relay, "kvc_extend_args": _ffi.ExtendArgs,
}
OFFSETS = [("kvc_req_state", f) for f, _ in kvc.ReqState._fields_ if not f.startswith("_")] + \
    [("kvc_flow_config", "cache"), ("kvc_flow_config", "sliding_window"),
     ("kvc_kv_pool_config", "index_buf_size"), ("kvc_buffer_desc", "data"),
     ("kvc_buffer_desc", "total_bytes"), ("kvc_context_config", "device_allocator"),
     ("kvc_mamba_pool_config", "temporal_shape"), ("kvc_mamba_pool_config", "flags"),
     ("kvc_swa_kv_pool_config", "full_layer_ids"),
     ("kvc_swa_kv_pool_config", "translate_capacity"), ("kvc_swa_allocator_config", "req_pool"),
     ("kvc_hybrid_req_pool_config", "mamba_pool"), ("kvc_dlpack_relay", "done"),
     ("kvc_extend_args", "rows_device"), ("kvc_extend_args", "stream")]


@pytest.mark.skipif(not shutil.which("cc"), reason="no C compiler")
def test_struct_layouts_match_header(tmp_path):
    src = ["#include <stdio.h>", "#include <stddef.h>", '#include "kvcache.h"', "int main(void){"]
    for name in STRUCTS:
        src.append('printf("%s %%zu\\n", sizeof(%s));' % (name, name))
    for s, f in OFFSETS:
        src.append('printf("%s.%s %%zu\\n", offsetof(%s, %s));' % (s, f, s, f))
    src.append("return 0;}")
    (tmp_path / "abi.c").write_text("\n".join(src))
    exe = tmp_path / "abi"
    subprocess.run(["cc", "-std=c11", "-I", HEADER_DIR, str(tmp_path / "abi.c"), "-o", str(exe)],
                   check=True)
    got = dict(line.split() for line in subprocess.run([str(exe)], check=True,
                                                       capture_output=True, text=True).stdout.splitlines())
    for name, cls in STRUCTS.items():
        assert int(got[name]) == ctypes.sizeof(cls), name
    for s, f in OFFSETS:
        assert int(got["%s.%s" % (s, f)]) == getattr(STRUCTS[s], f).offset, (s, f)

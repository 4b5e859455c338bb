"""bench_sglang_adapter.py's radix_match rows only (list and i32 keys, ps 1 and 16), from the
tree given as argv[1]; the library from KVCACHE_LIB."""
import argparse, importlib.util, sys, os
tree = sys.argv[1]
sys.argv = [sys.argv[0]]
spec = importlib.util.spec_from_file_location("bsa", os.path.join(tree, "bench/python/bench_sglang_adapter.py"))
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
b = m.Bench(argparse.Namespace(backend="host", rounds=40, csv=None))
for ps in (1, 16):
    for kind in ("list", "i32"):
        b.radix_match(1024, ps, key_kind=kind, reps=2000)

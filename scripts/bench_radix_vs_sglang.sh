#!/usr/bin/env bash
# Same-run comparison of the radix cache against SGLang 0.5.23's own RadixCache on the
# shapes of bench_radix's part 1 (host only; no GPU). SGLang is not a dependency of
# kvcache: this script sets up a throw-away virtual environment with torch and SGLang's
# wheel unpacked (not installed: only its mem_cache and what that imports are used).
# Env: SGL_VENV (default /tmp/kvc-sglang-venv), SGL_SRC (default /tmp/kvc-sglang-src),
#      QUICK=1 for the short run, BUILD_DIR (default build).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${SGL_VENV:-/tmp/kvc-sglang-venv}
src=${SGL_SRC:-/tmp/kvc-sglang-src}
build=${BUILD_DIR:-build}
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  # What sglang.srt.mem_cache.radix_cache imports, directly or through sglang.srt.utils.
  "$venv/bin/pip" install -q torch numpy orjson psutil pybase64 requests packaging pillow \
    starlette msgspec pydantic pyzmq tqdm ipython aiohttp transformers torchvision dill \
    apache-tvm-ffi sentencepiece compressed-tensors gguf
fi
if [ ! -d "$src/sglang" ]; then
  mkdir -p "$src"
  "$venv/bin/pip" download -q --no-deps -d "$src" sglang==0.5.23
  (cd "$src" && python3 -m zipfile -e sglang-0.5.23-*.whl .)
fi
cmake -S . -B "$build" -DKVC_BUILD_BENCH=ON >/dev/null
cmake --build "$build" -j "$(nproc)" --target kvc_bench_radix >/dev/null
mkdir -p bench/csv/radix
q=()
[ "${QUICK:-0}" = 1 ] && q=(--quick)
echo "== kvcache (bench_radix part 1 and trace replays)"
"$build/bench/kvc_bench_radix" "${q[@]}" --csv bench/csv/radix/vs-sglang-kvcache.csv
echo "== SGLang 0.5.23 RadixCache, same shapes, same machine, right after"
PYTHONPATH="$src" PYTHONWARNINGS=ignore "$venv/bin/python" bench/sglang_radix_ref.py "${q[@]}" \
  --csv bench/csv/radix/vs-sglang-sglang.csv

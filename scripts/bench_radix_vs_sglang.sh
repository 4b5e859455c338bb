#!/usr/bin/env bash
# Same-run comparison of the radix cache against SGLang 0.5.23's own RadixCache on the
# shapes of bench_radix's part 1, then on its trace replays (kvc_bench_radix dumps the
# requests, SGLang replays the same ones; host only; no GPU). SGLang is not a dependency of
# kvcache: this script sets up a throw-away virtual environment with torch and SGLang's
# wheel unpacked (not installed: only its mem_cache and what that imports are used).
# Env: SGL_VENV (default /tmp/kvc-sglang-venv), SGL_SRC (default /tmp/kvc-sglang-src),
#      QUICK=1 for the short run, BUILD_DIR (default build), TRACE_ROUNDS (default 3).
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

# The trace replays on both sides: kvcache dumps its requests (an untimed run), then
# kvcache and SGLang replay them alternately, TRACE_ROUNDS times (default 3).
out=bench/csv/radix/vs-sglang-traces
mkdir -p "$out"
traces=$(mktemp -d)
trap 'rm -rf "$traces"' EXIT
KVB_ONLY=trace KVB_TRACE_DUMP="$traces" "$build/bench/kvc_bench_radix" "${q[@]}" >/dev/null
for i in $(seq 1 "${TRACE_ROUNDS:-3}"); do
  echo "== trace replays, round $i: kvcache"
  cat /proc/loadavg >"$out/kvcache-$i.load"
  KVB_ONLY=trace "$build/bench/kvc_bench_radix" "${q[@]}" --csv "$out/kvcache-$i.csv" | tee "$out/kvcache-$i.txt"
  echo "== trace replays, round $i: SGLang 0.5.23 RadixCache, the same requests"
  cat /proc/loadavg >"$out/sglang-$i.load"
  PYTHONPATH="$src" PYTHONWARNINGS=ignore "$venv/bin/python" bench/sglang_radix_ref.py --traces "$traces" \
    --csv "$out/sglang-$i.csv" | tee "$out/sglang-$i.txt"
done
python3 bench/radix_vs_sglang_traces.py "$out"

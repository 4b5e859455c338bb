#!/usr/bin/env bash
# Builds the API reference with Doxygen (docs/Doxyfile over include/kvcache.h and docs/*.md)
# into build-docs/html. Any warning fails the build (WARN_AS_ERROR=YES). Installs doxygen
# from Debian's packages when missing (needs root and apt-get).
#   scripts/docs.sh          env: KVC_DOCS_OUT (default build-docs)
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v doxygen >/dev/null; then # as test.sh does for cmocka
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq doxygen >/dev/null
  else
    echo "doxygen is missing: install doxygen (apt-get install doxygen)" >&2
    exit 1
  fi
fi
export KVC_DOCS_OUT=${KVC_DOCS_OUT:-build-docs}
mkdir -p "$KVC_DOCS_OUT"
doxygen docs/Doxyfile
echo "docs: $KVC_DOCS_OUT/html/index.html (doxygen $(doxygen --version), no warnings)"

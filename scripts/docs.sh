#!/usr/bin/env bash
# Builds the API reference with Doxygen (docs/Doxyfile over include/kvcache.h and docs/*.md)
# into build-docs/html. Any warning fails the build (WARN_AS_ERROR=YES).
#   scripts/docs.sh          env: KVC_DOCS_OUT (default build-docs)
set -euo pipefail
cd "$(dirname "$0")/.."
command -v doxygen >/dev/null || { echo "doxygen is missing: apt-get install doxygen" >&2; exit 1; }
export KVC_DOCS_OUT=${KVC_DOCS_OUT:-build-docs}
mkdir -p "$KVC_DOCS_OUT"
doxygen docs/Doxyfile
echo "docs: $KVC_DOCS_OUT/html/index.html (doxygen $(doxygen --version), no warnings)"

#!/usr/bin/env bash
# Fails when README.md, CONTRIBUTING.md or docs/*.md names a repository path that git
# does not track, so the docs cannot drift from the tree after files move (they did: a
# host.c and a src/pool/ lived on in the docs after the code had left them).
# Checked: words starting with src/ kernels/ tests/ include/ scripts/ docs/ bench/
# examples/ python/ (not preceded by another path part, so build/examples/x is skipped;
# a trailing "..." marks a path of another project and is skipped). A path ending in /
# must be a folder with tracked files; a path with * must match a tracked file.
#   scripts/check_doc_paths.sh        (run from anywhere; scripts/lint.sh runs it)
set -euo pipefail
cd "$(dirname "$0")/.."

# Paths the docs describe that other branches are adding at the same time. They are
# reported, not failed; once they are tracked the line below says so and they can go.
pending=""

tracked=$(git ls-files)
mapfile -t docs < <(git ls-files README.md CONTRIBUTING.md 'docs/*.md')
found=$(grep -noE '(^|[^A-Za-z0-9_./-])(src|kernels|tests|include|scripts|docs|bench|examples|python)/[A-Za-z0-9_./*-]*' \
  "${docs[@]}" || true)
missing=()
waiting=()
while IFS= read -r hit; do
  [ -n "$hit" ] || continue
  where=${hit%:*}                       # file:line
  path=${hit##*:}
  path=${path#"${path%%[a-z]*}"}         # drop the one leading non-path character
  case "$path" in *...) continue ;; esac
  path=${path%.}                         # end of a sentence
  [ -n "$path" ] || continue
  ok=0
  case "$path" in
    *'*'*)
      # a glob: some tracked file must match it
      while IFS= read -r t; do
        # shellcheck disable=SC2053 # the doc's pattern is meant as a glob
        if [[ $t == $path ]]; then ok=1; break; fi
      done <<<"$tracked"
      ;;
    */)
      case $'\n'"$tracked" in *$'\n'"$path"*) ok=1 ;; esac
      ;;
    *)
      case $'\n'"$tracked"$'\n' in *$'\n'"$path"$'\n'* | *$'\n'"$path"/*) ok=1 ;; esac
      ;;
  esac
  if [ "$ok" = 0 ]; then
    case " $pending " in
      *" $path "*) waiting+=("$where: $path") ;;
      *) missing+=("$where: $path") ;;
    esac
  fi
done <<<"$found"

for p in $pending; do
  case $'\n'"$tracked"$'\n' in
    *$'\n'"$p"$'\n'*) echo "doc paths: $p is tracked now: remove it from the pending list in $0" ;;
  esac
done
if [ ${#waiting[@]} -gt 0 ]; then
  printf 'doc paths: pending (added by another branch): %s\n' "${waiting[@]}"
fi
if [ ${#missing[@]} -gt 0 ]; then
  printf '%s\n' "${missing[@]}"
  echo "doc paths: ${#missing[@]} path(s) in README.md, CONTRIBUTING.md or docs/*.md that git does not track" >&2
  exit 1
fi
if [ ${#waiting[@]} -gt 0 ]; then
  echo "doc paths: every other path in README.md, CONTRIBUTING.md and docs/*.md is tracked"
else
  echo "doc paths: every path in README.md, CONTRIBUTING.md and docs/*.md is tracked"
fi

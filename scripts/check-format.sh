#!/usr/bin/env bash
# Checks C sources against .clang-format.
#   scripts/check-format.sh              every tracked .c and .h file (ctest
#                                        `format` runs this; CI too)
#   scripts/check-format.sh BASE [TIP]   only the lines changed since BASE
#                                        (the working tree, or up to TIP)
# Exit 0: clean; 1: what differs is printed (fix it with `clang-format -i
# FILE`, or `git clang-format BASE`); 77: clang-format is not installed.
# Tables that read best as aligned rows sit between
# "/* clang-format off */" and "/* clang-format on */".
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -eq 0 ]; then
  command -v clang-format >/dev/null || { echo "skip: clang-format not installed (clang-format package)"; exit 77; }
  git rev-parse --git-dir >/dev/null 2>&1 || { echo "skip: not a git checkout (the files to check are git's)"; exit 77; }
  bad=()
  while IFS= read -r f; do
    clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
  done < <(git ls-files '*.c' '*.h')
  if [ ${#bad[@]} -eq 0 ]; then
    echo "check-format: every tracked C file is formatted ($(clang-format --version | sed 's/.*version //'))"
    exit 0
  fi
  for f in "${bad[@]}"; do clang-format --dry-run "$f" 2>&1 | head -n 20; done
  echo "check-format: ${#bad[@]} file(s) differ from .clang-format's layout: ${bad[*]}"
  exit 1
fi
base=$1
command -v git-clang-format >/dev/null || { echo "skip: git-clang-format not installed (clang-format package)"; exit 77; }
args=(--diff --extensions c,h "$base")
[ $# -ge 2 ] && args+=("$2")
out=$(git clang-format "${args[@]}" 2>&1) || true
case $out in
  "" | "no modified files to format" | "clang-format did not modify any files")
    echo "check-format: the lines changed since $base are formatted"
    exit 0 ;;
esac
printf '%s\n' "$out"
echo "check-format: the lines above, changed since $base, differ from .clang-format's layout"
exit 1

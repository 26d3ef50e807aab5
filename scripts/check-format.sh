#!/usr/bin/env bash
# Checks that the C lines a commit range changed are formatted as
# .clang-format says; the lines it did not touch are left alone (the tree
# predates .clang-format and has not been reformatted).
#   scripts/check-format.sh [BASE [TIP]]   default: main HEAD
#   scripts/check-format.sh main           the working tree against main
# Exit 0: clean; 1: the diff to apply is printed (apply it with
# `git clang-format BASE`); 77: git-clang-format is not installed.
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:-main}
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

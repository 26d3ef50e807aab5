#!/usr/bin/env bash
# Lists the C functions longer than a limit, longest first, as
#   LINES  FILE:LINE  NAME
# counting from the line where the definition starts to its closing brace.
#   scripts/long-functions.sh [LIMIT [PATH...]]   default: 80 src
# Exit 0 when none is longer than LIMIT, 1 otherwise. Needs only awk: it
# reads the layout .clang-format gives (a definition starts at column 0 and
# ends with a "}" alone at column 0), not C; a brace inside a string or a
# comment at column 0 would confuse it.
set -euo pipefail
cd "$(dirname "$0")/.."
limit=${1:-80}
[ $# -gt 0 ] && shift
paths=("${@:-src}")
find "${paths[@]}" -name '*.c' -print0 | sort -z | xargs -0 awk -v limit="$limit" '
  FNR == 1 { head = 0; in_body = 0 }
  # The last line at column 0 that can open a definition: its first line.
  !in_body && /^[A-Za-z_]/ && !/;[[:space:]]*$/ { head = FNR; text = $0 }
  !in_body && head && /\)[^;]*\{[[:space:]]*$/ { in_body = 1; next }
  in_body && /^}[[:space:]]*$/ {
    in_body = 0
    n = FNR - head + 1
    name = text
    sub(/\(.*/, "", name)
    sub(/.*[ *]/, "", name)
    if (n > limit) printf "%5d  %s:%d  %s\n", n, FILENAME, head, name
    head = 0
  }
' | sort -rn > "${TMPDIR:-/tmp}/long-functions.$$" || true
out="${TMPDIR:-/tmp}/long-functions.$$"
cat "$out"
count=$(wc -l < "$out")
rm -f "$out"
echo "long-functions: $count function(s) over $limit lines in ${paths[*]}"
[ "$count" -eq 0 ]

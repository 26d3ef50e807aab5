#!/usr/bin/env bash
# The README's C program (its first ```c block) is examples/allreduce.c,
# byte for byte, so the program a reader copies is the one CI builds and runs.
#   check_readme_example.sh README.md examples/allreduce.c
set -euo pipefail
readme=$1 example=$2
snippet=$(awk '/^```c$/ {inside = 1; next} inside && /^```$/ {exit} inside {print}' "$readme")
if [ -z "$snippet" ]; then echo "no \`\`\`c block in $readme"; exit 1; fi
if ! diff -u <(printf '%s\n' "$snippet") "$example"; then
  echo "the README's program differs from $example (diff above: - README, + example)"
  exit 1
fi
echo "README program = $example ($(wc -l <"$example") lines)"

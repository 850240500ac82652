#!/bin/sh
# SPDX-License-Identifier: MIT
# Whole-process wall time and peak RSS of the commands a user runs first (the speed targets of docs/performance.md),
# median of N runs each, as /usr/bin/time -v reports them. Results go in docs/performance.md.
#
#   bench/cli_wall.sh [BINARY [N [what...]]]    BINARY default build/moesim, N default 5
#   what: simulate steps1 distinct sweep (default: all four)
#
# For an A/B comparison run two binaries back to back in one session: the machine is shared, so
# only numbers taken together compare.
set -eu
bin=${1:-build/moesim}
n=${2:-5}
shift 2 2>/dev/null || shift $#
what=${*:-simulate steps1 distinct sweep}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

measure() {
  name=$1
  shift
  : >"$tmp/wall"
  : >"$tmp/rss"
  i=0
  while [ "$i" -lt "$n" ]; do
    /usr/bin/time -v "$@" >/dev/null 2>"$tmp/time" </dev/null
    # "Elapsed (wall clock) time (h:mm:ss or m:ss): 0:04.81"
    awk -F': ' '/Elapsed \(wall clock\)/ { k = split($2, p, ":"); s = 0; for (j = 1; j <= k; ++j) s = s * 60 + p[j]; print s }' \
      "$tmp/time" >>"$tmp/wall"
    awk -F': ' '/Maximum resident set size/ { print $2 }' "$tmp/time" >>"$tmp/rss"
    i=$((i + 1))
  done
  printf '%-10s wall %6.2f s (runs: %s)  max RSS %7d KB\n' "$name" "$(median <"$tmp/wall")" \
    "$(tr '\n' ' ' <"$tmp/wall" | sed 's/ $//')" "$(median <"$tmp/rss")"
}

for w in $what; do
  case $w in
    simulate) measure simulate "$bin" simulate ;;
    steps1) measure steps1 "$bin" simulate --steps 1 ;;
    distinct) measure distinct "$bin" simulate --distinct-ranks ;;
    sweep) measure sweep "$bin" sweep scenarios/k3-sweep.json --threads 2 --csv "$tmp/sweep.csv" ;;
    *) echo "cli_wall.sh: unknown '$w' (simulate steps1 distinct sweep)" >&2; exit 2 ;;
  esac
done

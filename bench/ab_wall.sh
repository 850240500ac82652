#!/bin/sh
# SPDX-License-Identifier: MIT
# A/B whole-process wall time of two binaries on a shared, noisy machine: N rounds, each running
# every command once with the base binary and once with the new one, the order alternating from
# round to round (base first in odd rounds), so that both see the same load. Prints per command
# the median wall time of each binary, its median maximum RSS and the paired ratios new / base.
#
#   bench/ab_wall.sh BASE NEW [N [what...]]    N default 5; what: simulate steps1 distinct sweep
#                                              valid (default: simulate steps1 distinct)
# Run from the project root. Results go in docs/performance.md with the date and the load.
set -eu
base=$1
new=$2
n=${3:-5}
shift 2
[ $# -gt 0 ] && shift
what=${*:-simulate steps1 distinct}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

median() { sort -n | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# one BIN TAG WHAT: runs WHAT once with BIN under /usr/bin/time, appends wall and RSS to TAG's files.
one() {
  bin=$1 tag=$2 w=$3
  case $w in
    simulate) set -- simulate ;;
    steps1) set -- simulate --steps 1 ;;
    distinct) set -- simulate --distinct-ranks ;;
    sweep) set -- sweep scenarios/k3-sweep.json --threads 2 --csv "$tmp/sweep.csv" ;;
    valid) set -- sweep scenarios/k3-sweep-valid.json --threads 2 --csv "$tmp/valid.csv" ;;
    *) echo "ab_wall.sh: unknown '$w' (simulate steps1 distinct sweep valid)" >&2; exit 2 ;;
  esac
  /usr/bin/time -v "$bin" "$@" >/dev/null 2>"$tmp/time" </dev/null
  awk -F': ' '/Elapsed \(wall clock\)/ { k = split($2, p, ":"); s = 0; for (j = 1; j <= k; ++j) s = s * 60 + p[j]; print s }' \
    "$tmp/time" >>"$tmp/$w.$tag.wall"
  awk -F': ' '/Maximum resident set size/ { print $2 }' "$tmp/time" >>"$tmp/$w.$tag.rss"
}

i=1
while [ "$i" -le "$n" ]; do
  for w in $what; do
    if [ $((i % 2)) -eq 1 ]; then
      one "$base" base "$w"
      one "$new" new "$w"
    else
      one "$new" new "$w"
      one "$base" base "$w"
    fi
  done
  i=$((i + 1))
done
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg) at the end, $n rounds"
for w in $what; do
  ratios=$(paste "$tmp/$w.new.wall" "$tmp/$w.base.wall" | awk '{ printf "%.2f ", $1 / $2 }')
  printf '%-9s base %7.2f s %7d KB   new %7.2f s %7d KB   new/base %.2f   (paired: %s)\n' "$w" \
    "$(median <"$tmp/$w.base.wall")" "$(median <"$tmp/$w.base.rss")" \
    "$(median <"$tmp/$w.new.wall")" "$(median <"$tmp/$w.new.rss")" \
    "$(echo "$(median <"$tmp/$w.new.wall") $(median <"$tmp/$w.base.wall")" | awk '{ print $1 / $2 }')" "$ratios"
done

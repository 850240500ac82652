#!/bin/sh
# SPDX-License-Identifier: MIT
# Instructions executed by one command (valgrind's callgrind), repeatable on a loaded machine where
# wall time is not; and, with a third argument, the functions at the top of the inclusive profile.
#
#   bench/callgrind.sh BINARY OUTFILE [top] -- ARGS...   e.g. build/moesim cg.out top -- simulate --steps 1
set -eu
bin=$1
out=$2
shift 2
top=no
[ "$1" = top ] && { top=yes; shift; }
[ "$1" = -- ] && shift
valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" "$@" >/dev/null 2>"$out.log"
grep -E 'Collected|refs' "$out.log" | tail -1
if [ "$top" = yes ]; then
  callgrind_annotate --inclusive=yes "$out" 2>/dev/null | sed -n '1,60p' | grep -E '^ *[0-9,]+ \(' | head -30
fi

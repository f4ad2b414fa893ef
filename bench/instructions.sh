#!/usr/bin/env bash
# Instructions per call of the dispatch paths, counted by callgrind
# (bench/instructions.cc says what each case runs).
#
#   bench/instructions.sh [path/to/instructions]   # default build/bin/instructions
#
# Prints one line per case: instructions per call, and for the DTensor
# cases the overhead over the same local kernels run by hand on the 4
# shards. Counts repeat exactly for the same binary and environment; one
# thread (DTENSOR_NUM_THREADS=1) keeps the pool out of the count.
set -euo pipefail
bin=${1:-build/bin/instructions}
[[ -x $bin ]] || { echo "instructions.sh: no program at $bin (build the 'instructions' target)" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "instructions.sh: valgrind is not installed" >&2; exit 2; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
DTENSOR_NUM_THREADS=1 valgrind --tool=callgrind --callgrind-out-file="$dir/out.%p" \
  "$bin" >/dev/null 2>"$dir/log" || { cat "$dir/log" >&2; exit 1; }
repeat=1000
# Each dump: "desc: Trigger: Client Request: NAME" ... "totals: IR"
for f in "$dir"/out.*.*; do
  name=$(sed -n 's/^desc: Trigger: Client Request: //p' "$f")
  total=$(sed -n 's/^totals: //p' "$f" | awk '{print $1}')
  [[ -n $name && -n $total ]] && echo "$name $((total / repeat))"
done | sort -k1,1 >"$dir/table"
awk '
  { n[$1] = $2; order[NR] = $1 }
  END {
    printf "%-32s %12s %12s\n", "case", "instr/call", "overhead";
    for (i = 1; i <= NR; ++i) {
      c = order[i]; over = "";
      if (c ~ /^dtensor\./) {
        split(c, part, "."); base = "local." part[2];
        if (part[2] == "add" && part[3] == "cache_miss") base = "local.add";
        if (base in n) over = n[c] - n[base];
      }
      printf "%-32s %12d %12s\n", c, n[c], over;
    }
  }' "$dir/table"

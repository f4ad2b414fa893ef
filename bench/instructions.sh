#!/usr/bin/env bash
# Instructions per call of the dispatch paths and of a short training step,
# counted by callgrind (bench/instructions.cc says what each case runs), and
# CI's gate on them (docs/testing.md, "The instruction-count gate").
#
#   bench/instructions.sh                     one line per case: instructions per call, and for
#                                             the DTensor cases the overhead over the same local
#                                             kernels run by hand on the 4 shards
#   bench/instructions.sh --counts            the bare table: "NAME INSTRUCTIONS_PER_CALL"
#   bench/instructions.sh --check             count, compare with the baseline: case, baseline,
#                                             now, change; exit 1 when a case grew more than 3%,
#                                             or is missing from either side
#   bench/instructions.sh --update "REASON"   count, rewrite the baseline with REASON in its
#                                             `# reason:` line, and its table in the doc
#   bench/instructions.sh --markdown [--write]  the doc's table from the baseline (--write: into
#                                             the doc's marked block)
#
# Options: --bin PROGRAM (default build/bin/instructions), --baseline FILE
# (bench/instructions.baseline), --doc FILE (docs/PERFORMANCE.md); the
# defaults beside this script.
#
# Counts repeat exactly for the same binary and toolchain on any machine:
# the program runs with an empty environment but for what pins the paths
# that vary (docs/PERFORMANCE.md, "Instruction counts, gated in CI", has
# what each pin moved). Under valgrind the CPU is a canned one (valgrind
# 3.19 reports an Intel Haswell, AVX2 without AVX-512, on any AVX2 host,
# AMD or Intel); the pins keep the counts from depending even on that:
#  - DTENSOR_NUM_THREADS=1: the pool's hand-offs stay out of the count;
#  - OPENBLAS_NUM_THREADS=1, OMP_NUM_THREADS=1: OpenBLAS and oneDNN's
#    OpenMP size their pools from the cores at start-up (the 8x8 products
#    moved 5% between one core and two);
#  - DTENSOR_SIMD=baseline: dtensor's kernels run their SSE2 copies;
#  - DNNL_MAX_CPU_ISA=SSE41: oneDNN (the float32 products) generates its
#    SSE4.1 kernels, whatever ISA the (canned) CPU offers;
#  - OPENBLAS_CORETYPE=Prescott: OpenBLAS likewise (float64 products);
#  - DTENSOR_CACHE_BYTES=1G: the allocator's cache limit, by default a
#    quarter of the machine's memory;
#  - nothing else: no DTENSOR_VERIFY or DTENSOR_DEBUG of the caller's
#    shell, which would change the paths.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
bin=build/bin/instructions
baseline=$here/instructions.baseline
doc=$root/docs/PERFORMANCE.md
mode=table reason="" write=""
while (($#)); do
  case $1 in
    --counts | --check) mode=${1#--} ;;
    --update) mode=update reason=${2-}; shift ;;
    --markdown) mode=markdown ;;
    --write) write=--write ;;
    --bin) bin=$2; shift ;;
    --baseline) baseline=$2; shift ;;
    --doc) doc=$2; shift ;;
    -h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "instructions.sh: unknown argument '$1' (--help lists them)" >&2; exit 2 ;;
  esac
  shift
done
gate() { python3 "$here/instructions_gate.py" "$@"; }

if [[ $mode == markdown ]]; then
  if [[ -n $write ]]; then gate doc "$baseline" "$doc" --write; else gate markdown "$baseline"; fi
  exit
fi
if [[ $mode == update && -z ${reason//[[:space:]]/} ]]; then
  echo "instructions.sh: --update needs a reason: --update \"why the counts changed\"" >&2
  exit 2
fi
[[ -x $bin ]] || { echo "instructions.sh: no program at $bin (build the 'instructions' target)" >&2; exit 2; }
valgrind=$(command -v valgrind) ||
  { echo "instructions.sh: valgrind is not installed (make deps installs it)" >&2; exit 2; }

# The program runs as ./instructions in a folder whose name has the same
# length on every run: the path and the working directory are copied onto
# the initial stack, and the training step's count moved by up to 2,200
# (0.03%) with their lengths (stack alignment).
dir=$(mktemp -d /tmp/dtensor-instructions.XXXXXXXX)
trap 'rm -rf "$dir"' EXIT
cp "$bin" "$dir/instructions"
(cd "$dir" && env -i PATH=/usr/bin:/bin DTENSOR_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
  OMP_NUM_THREADS=1 DTENSOR_SIMD=baseline DNNL_MAX_CPU_ISA=SSE41 OPENBLAS_CORETYPE=Prescott \
  DTENSOR_CACHE_BYTES=1G \
  "$valgrind" --tool=callgrind --callgrind-out-file="$dir/out.%p" ./instructions \
  >/dev/null 2>"$dir/log") || { cat "$dir/log" >&2; exit 1; }
# Each dump: "desc: Trigger: Client Request: NAME REPEAT" ... "totals: IR"
for f in "$dir"/out.*.*; do
  request=$(sed -n 's/^desc: Trigger: Client Request: //p' "$f")
  total=$(sed -n 's/^totals: //p' "$f" | awk '{print $1}')
  if [[ $request == *" "* && -n $total ]]; then
    echo "${request% *} $((total / ${request##* }))"
  fi
done | sort -k1,1 >"$dir/now"
[[ -s $dir/now ]] || { echo "instructions.sh: callgrind wrote no dumps" >&2; exit 1; }
# What the counts depend on besides the sources: the compiler that built
# the program, the C library, valgrind (its canned CPU), and the libraries
# whose code runs inside the cases.
libs=$(ldd "$bin" | awk '/(dnnl|openblas|stdc\+\+)/ && $3 ~ /^\// {print $3}' |
       xargs -r readlink -f | xargs -r -n1 basename | sort | tr '\n' ' ')
counted_with="$(readelf -p .comment "$bin" | sed -n 's/.*\(GCC: .*\)/\1/p' | sort -u | head -1);\
 $(getconf GNU_LIBC_VERSION); $("$valgrind" --version); ${libs% }"

case $mode in
  counts) cat "$dir/now" ;;
  check) gate compare "$baseline" "$dir/now" --counted-with "$counted_with" ;;
  update)
    gate write "$baseline" "$dir/now" --reason "$reason" --counted-with "$counted_with" --doc "$doc"
    echo "instructions.sh: wrote $baseline and its table in $doc;" \
      "commit both, the reason in the message" ;;
  table)
    awk '
      { n[$1] = $2; order[NR] = $1 }
      END {
        printf "%-32s %12s %12s\n", "case", "instr/call", "overhead";
        for (i = 1; i <= NR; ++i) {
          c = order[i]; over = "";
          if (c ~ /^dtensor\./) {
            split(c, part, "."); base = "local." part[2];
            if (base in n) over = n[c] - n[base];
          }
          printf "%-32s %12d %12s\n", c, n[c], over;
        }
      }' "$dir/now" ;;
esac

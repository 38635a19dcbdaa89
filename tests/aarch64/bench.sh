#!/bin/sh
# The aarch64 probe-cost bench, in the guest (`tests/aarch64/run.sh bench`
# puts it in place of guest.sh): ns per call of a 2-instruction function
# (a64.c's `work`) untraced and under each kind of probe, the median of 3
# runs of N calls each, and each as a ratio to the untraced call. Under
# TCG the absolute times mean little; the ratios compare with x86_64's.
cd "$(dirname "$0")"
N=${N:-2000000}
T=${T:-./telco-stap}
# ns/call of one run of CMD...
per() { "$@" 2>/dev/null | sed -n 's/^bench \([0-9.]*\) ns.*/\1/p'; }
median() { for i in 1 2 3; do per "$@"; done | sort -n | sed -n 2p; }
base=$(median ./a64 bench $N)
echo "BENCH | probe | ns/call | ratio to the untraced call |"
echo "BENCH |---|---|---|"
row() {
    name=$1; shift
    v=$(median "$@")
    echo "$v $base" | awk -v n="$name" '{ printf "BENCH | %s | %.1f | %.1f |\n", n, $1, $1 / $2 }'
}
echo "$base" | awk '{ printf "BENCH | none (untraced) | %.1f | 1.0 |\n", $1 }'
row "entry, counter (n++)" $T -e 'global n probe process.function("work") { n++ }' -c "./a64 bench $N"
row "return, counter" $T -e 'global n probe process.function("work").return { n++ }' -c "./a64 bench $N"
row "return with @entry" $T -e 'global n probe process.function("work").return { n += $return - @entry($arg1) }' -c "./a64 bench $N"
row "duration into @hist_log" $T -e 'global h probe process.function("work").return { h <<< gettimeofday_ns() - @entry(gettimeofday_ns()) }
probe end { print(@hist_log(h)) }' -c "./a64 bench $N"
row "--chrome span" $T --chrome /tmp/bench.json -e 'probe process.function("work") {}' -c "./a64 bench $N"
rm -f /tmp/bench.json

# .itrace: one call of shapes' spin(N) (5 instructions an iteration),
# timed by the program, untraced, by the block tracer (the default) and
# single-stepped (--itrace-step, on a call 100 times shorter).
I=${I:-200000}
ms() { "$@" 2>/dev/null | sed -n 's/^call \([0-9.]*\) ms.*/\1/p'; }
mmedian() { for i in 1 2 3; do ms "$@"; done | sort -n | sed -n 2p; }
echo "BENCH"
echo "BENCH | one call of spin(N) | N | ms | instructions per second | slowdown |"
echo "BENCH |---|---|---|---|---|"
u=$(mmedian ./shapes timed $I)
echo "$u" | awk -v n=$I '{ printf "BENCH | untraced | %d | %.1f | — | 1 |\n", n, $1 }'
b=$(mmedian $T --itrc /tmp/bench.itrc -e 'probe process.function("spin").itrace {}' -c "./shapes timed $I")
echo "$b $u" | awk -v n=$I '{ printf "BENCH | block tracer (in the target) | %d | %.1f | %.2f M | %.0f× |\n", n, $1, 5 * n / $1 / 1e3, $1 / $2 }'
s=$(ms $T --itrace-step --itrc /tmp/bench.itrc -e 'probe process.function("spin").itrace {}' -c "./shapes timed $((I / 100))")
echo "$s $u" | awk -v n=$((I / 100)) '{ printf "BENCH | single-stepper (--itrace-step) | %d | %.1f | %.3f M | — |\n", n, $1, 5 * n / $1 / 1e3 }'
rm -f /tmp/bench.itrc*
echo "GUEST: bench done"

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
echo "GUEST: bench done"

#!/bin/sh
# Runs inside the aarch64 guest (tests/aarch64/run.sh boots it), in the
# shared folder with telco-stap and the target programs built for aarch64.
# One line per test ("ok NAME" or "FAIL NAME" with what differed), then
# "GUEST: N passed, M failed".
cd "$(dirname "$0")"
pass=0; fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() {
    fail=$((fail + 1)); echo "FAIL $1"
    echo "  wanted: $(printf '%s' "$2" | tr '\n' '|')"
    echo "  got:    $(printf '%s' "$3" | tr '\n' '|')"
    sed 's/^/  stderr: /' err.txt | head -20
}
# check NAME WANT CMD...: CMD's standard output must be WANT, its exit 0.
# (busybox sh has no locals: its variables are check's own.)
check() {
    c_name=$1; c_want=$2; shift 2
    c_got=$(timeout 300 "$@" 2>err.txt); c_rc=$?
    if [ $c_rc -eq 0 ] && [ "$c_got" = "$c_want" ]; then ok "$c_name"; else bad "$c_name (exit $c_rc)" "$c_want" "$c_got"; fi
}
T=./telco-stap
# until_line PREFIX: read the tracer's stderr (fd 3, a FIFO) up to a line
# that starts with PREFIX, then drain the rest in the background ($drain: a
# tracer whose stderr has no reader would die of SIGPIPE) and close fd 3.
until_line() {
    while read -r line <&3; do
        case "$line" in "$1"*) break ;; esac
    done
    cat <&3 > /dev/null &
    drain=$!
    exec 3<&-
}
echo "== guest: $(uname -srm), $(nproc) cpu(s)"

# The throwpac and far tests check pointer authentication only where the
# CPU has it (qemu's `-cpu max` does: run.sh).
if grep -q ' paca' /proc/cpuinfo; then ok "pointer authentication in the guest CPU"
else bad "pointer authentication in the guest CPU" "paca in /proc/cpuinfo" "$(grep -m1 Features /proc/cpuinfo)"; fi

# Passes 1-4 in the guest: the script compiled to aarch64 code.
if $T --last-pass 4 -e 'global n probe process("./a64").function("work") { n++ }' > p4.txt 2>err.txt \
    && grep -q 'work' p4.txt; then ok "passes 1-4"; else bad "passes 1-4" "a listing" "$(head -3 p4.txt)"; fi

# The tracer's own probes: Cranelift's aarch64 code in the sandbox.
check "begin and end" "42
done" $T -e 'probe begin { printf("%d\n", 6 * 7); exit() } probe end { println("done") }'

# Entry probes counted exactly in 8 threads.
want=$(./a64 threads 20000)
check "8 threads count exactly" "$want
160000" $T -e 'global n probe process.function("work") { n++ } probe end { println(n) }' -c "./a64 threads 20000"

# Return probes with @entry, in 8 threads.
check "return probes with @entry" "$want
160000 0" $T -e 'global good, wrong
probe process.function("work").return { if ($return == @entry($arg1) * 2 + 1) good++; else wrong++ }
probe end { println(good, " ", wrong) }' -c "./a64 threads 20000"

# Recursion: every call's return probe fires (the program counts its calls).
want=$(./a64 fib 15)
calls=${want##* }
check "recursion" "$want
$calls $calls" $T -e 'global e, r
probe process.function("fib") { e++ } probe process.function("fib").return { r++ }
probe end { println(e, " ", r) }' -c "./a64 fib 15"

# Arguments in registers and on the stack, a global read by the first
# instruction (adrp), function probes on a BTI/PAC-built program.
for prog in a64 a64bti; do
    want=$(./$prog mixed 100)
    check "arguments and adrp ($prog)" "$want
100 100 100" $T -e 'global w, gl, nn
probe process.function("work") { if ($arg1 >= 0) w++ }
probe process.function("global_first").return { if ($return == 8) gl++ }
probe process.function("nine") { if ($arg2 == 1 && $arg8 == 7 && $arg9 == 8) nn++ }
probe end { println(w, " ", gl, " ", nn) }' -c "./$prog mixed 100"
done

# A library loaded later with dlopen gets its probes before its first call.
want=$(./host ./libplugin.so 500)
check "dlopen" "$want
500" $T -e 'global n probe process("./libplugin.so").function("plugin") { n++ } probe end { println(n) }' \
    -c "./host ./libplugin.so 500"

# --chrome: every call written (the host checks the file: run.sh).
rm -f calls.json
want=$(./a64 work 300)
check "--chrome writes" "$want" $T --chrome calls.json -e 'probe process.function("work") {}' -c "./a64 work 300"

# Durations into a statistic, done by the trampolines themselves for the
# idiom alone (`-vv` names the function), by the handlers with `+ 0`:
# every call counted, in the histogram too, in 8 threads and in recursion;
# calls of 200 us or more (a64.c's spin) measured within 5% of that:
# at least 190 us, and at most 5% above what the program measured as the
# shortest of them around the call. That catches a wrong tick conversion
# (a factor of 2, 1000, a frequency off by its prescaler) and allows for
# the emulated clock: on a loaded host the guest's CLOCK_MONOTONIC itself
# measured a spin(200) call around it as 199.76 us, and the probes' counter
# is calibrated against CLOCK_REALTIME.
# lat_check NAME FUNCTION ARGS CALLS EXTRA [LEAST]
lat_check() {
    l_out=$($T -vv -e "global lat probe process.function(\"$2\").return { lat <<< gettimeofday_ns() - @entry(gettimeofday_ns())$5 }
probe end { printf(\"%d %d %d\\n\", @count(lat), @min(lat), @max(lat)) print(@hist_log(lat)) }" \
        -c "./a64 $3" 2>err.txt); l_rc=$?
    l_got=$(printf '%s\n' "$l_out" | awk -F'|' -v least="${6:-0}" -v f="$2" '
        NR == 1 { n = split($0, p, " "); most = f == "spin" ? p[n] * 1.05 : 1e10 }
        NR == 2 { split($0, v, " "); c = v[1]; ok = v[2] >= least && v[2] < most && v[2] <= v[3] && v[3] < 1e10 }
        NF > 1 && !/count/ { k = split($2, a, " "); t += a[k] }
        END { print c, ok ? 1 : 0, t + 0 }')
    if grep -q "$2: calls timed by its trampolines" err.txt; then l_got="$l_got inline"; fi
    l_want="$4 1 $4"; [ -z "$5" ] && l_want="$l_want inline"
    if [ $l_rc -eq 0 ] && [ "$l_got" = "$l_want" ]; then ok "$1"; else
        echo "the program, then count min max: $(printf '%s\n' "$l_out" | sed -n 1,2p | tr '\n' ' ')" >> err.txt
        bad "$1 (exit $l_rc)" "$l_want" "$l_got"
    fi
}
lat_check "durations timed by the trampolines (threads)" work "threads 2000" 16000 ""
lat_check "durations timed by the handlers (threads)" work "threads 2000" 16000 " + 0"
lat_check "durations timed by the trampolines (recursion)" fib "fib 15" 1973 ""
lat_check "durations timed by the trampolines (200 us calls)" spin "spin 50" 50 "" 190000

# .itrace: every instruction of the call into an ITRC file in Frida's
# arm64 layout (read back on the host by tests/itrc_reader.py: run.sh).
rm -f fib.itrc*
want=$(./a64 fib 10)
check ".itrace writes" "$want" $T --itrc fib.itrc -e 'probe process.function("fib").itrace {}' -c "./a64 fib 10"
# ... by the block tracer, in the target: no warning (single-stepping
# would say so).
if grep -q WARNING err.txt; then bad ".itrace by the block tracer" "no warning" "$(cat err.txt)"; else
    ok ".itrace by the block tracer"; fi

# The block tracer against the single-stepper on the same calls (loops,
# recursion, a jump table reading global data, memset/strlen and a `svc`,
# indirect calls, a loop back to the entry, whose branch the probe
# retargets, Advanced SIMD arithmetic): the ITRC files are byte for byte
# the same (same blocks, records and values; the address space's
# randomisation off, so both runs see the same addresses), the program
# prints what it prints untraced, and the file reaches its end.
# itr NAME N [OPTIONS...]: trace one call of `shapes NAME N` into
# bt-NAME.itrc; $i_out its output, $i_rc its status, $i_end its dump's
# last line (err.txt its stderr).
itr() {
    i_name=$1; i_n=$2; shift 2
    rm -f "bt-$i_name.itrc"*
    i_out=$(timeout 300 $T "$@" --itrc "bt-$i_name.itrc" -e "probe process.function(\"$i_name\").itrace {}" \
        -c "./shapes $i_name $i_n" 2>err.txt); i_rc=$?
    i_end=$($T itrc-dump "bt-$i_name.itrc" 2>&1 | tail -1)
}
echo 0 > /proc/sys/kernel/randomize_va_space
for s in "loops 20" "fib 12" "table 40" "strings 30" "indirect 20" "entry_loop 5" "vectors 9"; do
    set -- $s
    want=$(./shapes $1 $2)
    itr $1 $2 --itrace-step
    mv "bt-$1.itrc" "bt-$1.step"
    itr $1 $2
    got="$i_rc $i_out $(cmp -s "bt-$1.itrc" "bt-$1.step" && echo same) ${i_end##*, }"
    if [ "$got" = "0 $want same end reached" ] && ! grep -q WARNING err.txt; then ok "block tracer = single-stepper ($1)"
    else bad "block tracer = single-stepper ($1)" "0 $want same end reached" "$got"; fi
    rm -f "bt-$1.itrc" "bt-$1.step"
done
# The C library at length (snprintf, qsort through a callback, malloc):
# the same blocks in the same order, record for record; only the values
# differ where the C library's per-process random stack canary flows.
want=$(./shapes libc 20)
itr libc 20 --itrace-step
$T itrc-dump bt-libc.itrc | awk '/^(exec|compile)/ { print $1, $2, $3 }' > bt-libc.step
itr libc 20
got="$i_rc $i_out ${i_end##*, } $($T itrc-dump bt-libc.itrc | awk '/^(exec|compile)/ { print $1, $2, $3 }' | cmp -s - bt-libc.step && echo same)"
if [ "$got" = "0 $want end reached same" ] && ! grep -q WARNING err.txt; then ok "block tracer = single-stepper (libc, blocks)"
else bad "block tracer = single-stepper (libc, blocks)" "0 $want end reached same" "$got"; fi
rm -f bt-libc.*
echo 2 > /proc/sys/kernel/randomize_va_space

# itr_check NAME N WANT: the call traced to its end, printing WANT, with no
# warning.
itr_check() {
    itr "$1" "$2"
    got="$i_rc $i_out ${i_end##*, }"
    if [ "$got" = "0 $3 end reached" ] && ! grep -q WARNING err.txt; then ok "$4"; else bad "$4" "0 $3 end reached" "$got"; fi
}
# A signal inside the traced call: its handler runs natively and returns
# into the code cache (the handler ran once: 190 + 1).
itr_check signalled 20 191 "block tracer: a signal inside the call"
# A fork inside the call (glibc's `clone` svc in the cache): the child
# leaves the cache at once and exits with its own result, the parent's
# trace goes on to the return.
itr_check forked 10 "$(./shapes forked 10)" "block tracer: a fork inside the call"
# Code that modifies itself: the dispatcher sees the changed page and
# translates it anew (a second itrace:compile of its address).
itr_check rewrite 3 121212 "block tracer: code that modifies itself"
n=$($T itrc-dump bt-rewrite.itrc | awk '/^compile/ { print $2 }' | sort | uniq -d | wc -l)
if [ "$n" -ge 1 ]; then ok "block tracer: the changed code compiled again"; else
    bad "block tracer: the changed code compiled again" "an address compiled twice" "$n"; fi
# Threads: eight threads call spin once each, eight files, each whole.
want=$(./shapes threads 1)
got=$(timeout 300 $T -v --itrc bt-th.itrc -e 'probe process.function("spin").itrace {}' -c "./shapes threads 1" 2>err.txt)
ends=0
for f in bt-th.itrc*; do case "$($T itrc-dump "$f" | tail -1)" in *"end reached") ends=$((ends + 1)) ;; esac; done
calls=$(sed -n 's/^itrace: \([0-9]*\) call(s).*/\1/p' err.txt)
if [ "$got $calls $ends" = "$want 8 8" ]; then ok "block tracer: 8 threads, a call each"; else
    bad "block tracer: 8 threads, a call each" "$want 8 8" "$got $calls $ends"; fi
# A long call: its records pass through the buffer's halves many times;
# the instructions grow by the loop's 5 per iteration exactly.
counts=""
for n in 100000 200000 300000; do
    itr spin $n -v
    counts="$counts $(sed -n 's/^itrace: 1 call(s), \([0-9]*\) instructions.*/\1/p' err.txt)${i_end##*, }"
done
if [ "$counts" = " 500007end reached 1000007end reached 1500007end reached" ]; then ok "block tracer: long calls whole"
else bad "block tracer: long calls whole" " 500007end reached 1000007end reached 1500007end reached" "$counts"; fi
rm -f bt-*

# Variables by name from DWARF: arguments in registers and on the stack.
want=$(./a64 mixed 100)
check "variables by name" "$want
900" $T -e 'global s probe process.function("nine") { s += $b + $j } probe end { println(s) }' -c "./a64 mixed 100"

# A statement probe inside a function, by source line.
want=$(./a64 fib 12)
calls=${want##* }
check "statement probe" "$want
$calls" $T -e 'global n probe process.statement("fib@a64.c:25") { n++ } probe end { println(n) }' -c "./a64 fib 12"

# Guru mode: a return value rewritten (every call of work returns 0).
check "guru write of \$return" "work 0" $T -g -e 'probe process.function("work").return { $return = 0 }' -c "./a64 work 100"

# --perfetto (checked on the host: run.sh).
# --flight-recorder: a fault after 16384 iterations of three nested calls
# (49152 calls, 768 stages): the dump holds what 1 MB holds (655 chunks of
# 64 calls) and the call in flight, the faulting function (the host loads
# the file: run.sh).
rm -f crash.pftrace
timeout 300 $T --flight-recorder crash.pftrace --flight-size 1M -c "./flight crash 16384" \
    -e 'probe process.function("first"), process.function("second"), process.function("third"), process.function("fourth") {}' \
    > /dev/null 2> err.txt
got=$(grep '^--flight-recorder: ' err.txt | sed 's/(SIGSEGV in process [0-9]*)/(SIGSEGV)/; s/, the history.*//')
want="--flight-recorder: 1 (SIGSEGV): 41921 calls of 1 thread, 1 in flight"
if [ "$got" = "$want" ]; then ok "--flight-recorder dumps at a fault"; else bad "--flight-recorder dumps at a fault" "$want" "$got"; fi

rm -f calls.pftrace
want=$(./a64 work 300)
check "--perfetto writes" "$want" $T --perfetto calls.pftrace -e 'probe process.function("work") {}' -c "./a64 work 300"

# A command with shell syntax runs through `sh -c 'exec ...'`: the probes
# go into the program the shell execs.
want=$(./a64 work 100)
check "exec followed" "$want
100" $T -e 'global n probe process.function("work") { n++ } probe end { println(n) }' -c './a64 work $((50 * 2))'

# A static program, stopped at its entry before its C library runs.
want=$(./a64static work 100)
check "static program" "$want
100" $T -e 'global n probe process.function("work") { n++ } probe end { println(n) }' -c "./a64static work 100"

# C++ exceptions thrown through return-probed functions: the program runs
# on to its right result. middle's frame record is at the top of its frame
# (x30 at the return probe's slot), big's and catcher's at the bottom of a
# larger one (x30 where their CFI says, recorded in the shadow frame).
# Counted: the calls that returned (two in three of middle's and big's;
# every one of catcher's, which catches inside). throwpac is built with
# pointer authentication: each function signs x30 (paciasp) and checks it
# (autiasp), so the trampoline's address is signed as the function signs.
for prog in throw throwpac; do
    want=$(./$prog 30)
    check "exceptions through return probes ($prog)" "$want
20 20 30" $T -e 'global m, b, c
probe process.function("middle").return { m++ }
probe process.function("big").return { b++ }
probe process.function("catcher").return { c++ }
probe end { printf("%d %d %d\n", m, b, c) }' -c "./$prog 30"
done

# A backtrace from a return probe starts at the caller, once.
got=$($T -e 'global d probe process.function("middle").return { if (!d++) print_ubacktrace() }' -c "./throwpac 3" \
    2>err.txt | grep -c ' main+')
if [ "$got" = 1 ]; then ok "ubacktrace in a return probe"; else bad "ubacktrace in a return probe" "1 line in main" "$got"; fi

# The tracer detaches while a return-probed call is running: the return
# address goes back where the call keeps it, and the call returns to its
# caller. `serve`: big_wait, blocked in read(), has x30 saved at the
# bottom of its large frame (signed, in throwpac). `spin`: a leaf spinning
# until SIGUSR1, whose return address is in the link register only. Ready
# by lines: the tracer's "probes armed" (stderr, through a FIFO), then the
# byte that starts the traced call (serve: that ends the untraced first
# one); the traced call's entry probe ends the session.
for prog in throw throwpac; do
  for mode in serve spin; do
    case $mode in
        serve) fn=big_wait; want="served 2" ;;
        spin) fn=spin; want="spun" ;;
    esac
    rm -f /tmp/serve.in /tmp/tracer.fifo
    mkfifo /tmp/serve.in /tmp/tracer.fifo
    ./$prog $mode < /tmp/serve.in > serve.txt &
    spid=$!
    exec 4>/tmp/serve.in
    timeout 300 $T -v -p $spid -e "global n, r
probe process.function(\"$fn\") { if (++n == 1) exit() }
probe process.function(\"$fn\").return { r++ }" > /dev/null 2>/tmp/tracer.fifo &
    tpid=$!
    exec 3</tmp/tracer.fifo
    until_line "Pass 5: probes armed"
    printf a >&4
    wait $tpid; trc=$?
    wait $drain
    case $mode in
        serve) printf b >&4 ;;
        spin) kill -USR1 $spid ;;
    esac
    exec 4>&-
    wait $spid; src=$?
    got=$(cat serve.txt)
    if [ $trc -eq 0 ] && [ $src -eq 0 ] && [ "$got" = "$want" ]; then ok "detach during a return-probed call ($prog $mode)"
    else bad "detach during a return-probed call ($prog $mode; tracer exit $trc, target exit $src)" "$want" "$got"; fi
    rm -f /tmp/serve.in /tmp/tracer.fifo serve.txt
  done
done

# A statement probe where a call returns to (stmt.c:15): planned with the
# call as its lead, run at the call's return with the callee's result.
want=$(./stmt 50)
check "statement after a call (lead)" "$want
50 50" $T -e 'global n, good
probe process.statement("caller@stmt.c:15") { n++; if ($a == 3 * $x && register("x0") == $a) good++ }
probe end { println(n, " ", good) }' -c "./stmt 50"

# Parameters by name at a function's entry (-O0: their DWARF locations
# hold only after the prologue), where AAPCS64 passes them: a 24-byte
# struct by reference, a 16-byte one in two registers, the memory
# result's address in x8, not an argument register. Its \$return is refused
# (x8 need not be kept): the message, and a non-zero exit.
want=$(./args 20)
check "parameters by AAPCS64 at entry" "$want
20" $T -e 'global good
probe process.function("mk") {
    if ($in->a == $x && $in->b == 2 * $x && $in->c == 3 * $x && $sm->a == 5 && $sm->b == 7 && $y == 11) good++
}
probe end { println(good) }' -c "./args 20"
if $T -e 'probe process.function("mk").return { println($return->a) }' -c "./args 1" > /dev/null 2>err.txt; then
    bad "\$return in memory refused" "an error" "exit 0"
elif grep -q "returns it in memory" err.txt; then ok "\$return in memory refused"
else bad "\$return in memory refused" "returns it in memory" "$(head -3 err.txt)"; fi

# A loop back to a function's first instruction (loop.c): retargeted past
# the probe, which fires once per call (100 calls, 5050 iterations), and
# the function's result unchanged.
want=$(./loop 100)
check "a loop back to the entry" "$want
100 100" $T -e 'global e, r
probe process.function("count_to") { e++ }
probe process.function("count_to").return { if ($return == @entry($arg1)) r++ }
probe end { println(e, " ", r) }' -c "./loop 100"

# A statement probe where the flags are live (loop.c's flags_live: `subs`,
# the probed `add`, then `b.gt`): a lean trampoline there compares, and
# must put the flags back, or the loop ends after one iteration.
check "flags kept at a statement (lean)" "flags 1000
1000" $T -e 'global n probe process.statement("flags_live+8") { n++ } probe end { println(n) }' -c "./loop 1000 flags"

# A statement on a load-exclusive (loop.c's excl_add+8, `ldaxr`): its B
# goes on the instruction before it (the lead), which the trampoline runs
# first; the probe sees the registers as at the site (x3 = 7), once per
# attempt of the exclusive sequence (the program counts them), lean and
# full.
for body in 'n++' 'if (register("x3") == 7) n++'; do
    out=$(timeout 300 $T -e "global n probe process.statement(\"excl_add+8\") { $body } probe end { println(n) }" \
        -c "./loop 1000 excl" 2>err.txt); rc=$?
    tries=$(printf '%s\n' "$out" | sed -n 's/^excl 7000 \([0-9]*\)$/\1/p')
    if [ $rc -eq 0 ] && [ -n "$tries" ] && [ "$(printf '%s\n' "$out" | sed -n 2p)" = "$tries" ]; then
        ok "statement on a load-exclusive (lead: $body)"
    else bad "statement on a load-exclusive (lead: $body) (exit $rc)" "excl 7000 N|N" "$out"; fi
done

# Trap probes (a `brk` over the instruction, SIGTRAP's handler in the
# target going to the trampoline a B would reach): forced where the B fits
# (-D TRAP_PROBES=1), since on aarch64 a trap takes the same one
# instruction. Entry probes in 8 threads, return probes with @entry, a
# statement, a statement where the flags are live.
want=$(./a64 threads 20000)
check "trap probes: 8 threads count exactly" "$want
160000" $T -D TRAP_PROBES=1 -e 'global n probe process.function("work") { n++ } probe end { println(n) }' -c "./a64 threads 20000"
check "trap probes: return probes with @entry" "$want
160000 0" $T -D TRAP_PROBES=1 -e 'global good, wrong
probe process.function("work").return { if ($return == @entry($arg1) * 2 + 1) good++; else wrong++ }
probe end { println(good, " ", wrong) }' -c "./a64 threads 20000"
check "trap probes: flags kept at a statement" "flags 1000
1000" $T -D TRAP_PROBES=1 -e 'global n probe process.statement("flags_live+8") { n++ } probe end { println(n) }' -c "./loop 1000 flags"
# The program's own SIGTRAP (raise) reaches its handler, its sigaction
# reads back what it set, a thread that blocks every signal and a handler
# that masks them all run the probe, 8 threads at once; forks carry it.
want=$(./traps signals)
check "trap probes: the program keeps its signals" "$want
801001" $T -D TRAP_PROBES=1 -e 'global t probe process.function("tick") { t++ } probe end { println(t) }' -c "./traps signals"
check "trap probes: forks" "forked 0
2000" $T -D TRAP_PROBES=1 -e 'global t probe process.function("tick") { t++ } probe end { println(t) }' -c "./traps fork 1000"
if grep -q "placed with a trap where no jump fits" err.txt; then ok "trap probes: said in the summary"
else bad "trap probes: said in the summary" "a WARNING line" "$(cat err.txt)"; fi

# A function 256 MiB above the rest of its program (far.c), out of a B's
# reach of the code region placed near the first: its patch branches to a
# veneer near it, and its trampoline jumps back from afar. Built with
# pointer authentication too (far_fn signs x30), and guarded by BTI (the
# program prints "bti 1 1" when the kernel guards both functions' pages):
# the veneer's and the trampolines' branches into them land where BTI
# allows them, or the program would die of SIGILL.
want=$(timeout 60 ./far 100)
case "$want" in "bti 1 1"*) ok "BTI guards the far program" ;; *) bad "BTI guards the far program" "bti 1 1" "$want" ;; esac
check "a function beyond a branch's reach (veneer, BTI)" "$want
100 100 200" $T -e 'global e, r, n
probe process.function("far_fn") { e++ }
probe process.function("far_fn").return { r++ }
probe process.function("near_fn").return { n++ }
probe end { println(e, " ", r, " ", n) }' -c "./far 100"

# SDT markers (a statement-site patch inside a function, planned by pass
# 2's aarch64 site analysis), with their arguments.
want=$(./a64 sdt 200)
check "SDT markers" "$want
200" $T -e 'global n probe process.mark("tick") { if ($arg1 >= 0 && $arg2 > 0) n++ } probe end { println(n) }' \
    -c "./a64 sdt 200"

# A backtrace from a probe: the probed function and its callers by CFI.
want=$(./a64 work 3)
got=$($T -e 'probe process.function("work") { if (!done) { print_ubacktrace(); done = 1 } } global done' \
    -c "./a64 work 3" 2>err.txt)
if echo "$got" | grep -q ' : work+0x0/' && echo "$got" | grep -q ' : main+'; then ok "ubacktrace"
else bad "ubacktrace" "work, then main" "$got"; fi

# timer.profile samples the target (perf events in the guest's kernel).
want=$(./a64 slow 300)
got=$($T -e 'global n probe timer.profile { n++ } probe end { println(n > 0) }' -c "./a64 slow 300" 2>err.txt)
if [ "$got" = "$want
1" ]; then ok "timer.profile"; else bad "timer.profile" "$want|1" "$got"; fi

# Waits (--off-cpu, process.blocked: context switches sampled by the
# guest's kernel, named by its symbols): a read on a pipe that a thread
# writes to 300 ms later is read's, under reader(), and the writer's
# sleep clock_nanosleep's.
got=$($T -e 'probe process.blocked { if ($duration > 200000000) println($syscall) }' \
    -c "./offcpu pipe 300" --off-cpu --folded off.folded 2>err.txt | grep -Ev '^(waited|done)' | sort | tr '\n' ' ')
under=$(awk '/;main;reader;read;\[off-cpu\] read [0-9]+$/ { n += $NF } END { print (n >= 250000) ? "read" : "none" }' off.folded)
if [ "$got $under" = "clock_nanosleep read  read" ]; then ok "off-CPU waits named"
else bad "off-CPU waits named" "clock_nanosleep read  read" "$got $under"; fi
rm -f off.folded

# Samples taken in the probes' own code (an entry or return trampoline,
# lean or saving every register for uaddr(), a statement's, a compiled
# handler, the runtime library) go on to main like any other, by the rows
# derived for that code (runtime/src/arch/aarch64/frames.rs): that time is
# `[telco-stap]`, right under the probed function (or, after a return,
# its caller), never a stack cut short. tiny() is called millions of
# times, so a good part of the samples land in our code.
line=$(grep -n "/\* statement probe \*/" profile.c | cut -d: -f1)
for what in lean full return statement; do
    case $what in
        lean) probes='global n probe process.function("tiny") { n++ }' ;;
        return) probes='global n probe process.function("tiny").return { n++ }' ;;
        full) probes='global n probe process.function("tiny") { if (uaddr()) n++ }' ;;
        statement) probes="global n probe process.statement(\"calls@profile.c:$line\") { n++ }" ;;
    esac
    rm -f own.folded
    out=$(timeout 300 $T -v -e "$probes probe timer.profile.hz(999) {} probe end { println(n > 0) }" \
        -c "./profile calls 5000000" --folded own.folded 2>err.txt)
    got=$(awk '
        { c = $NF; s = $0; sub(/ [0-9]+$/, "", s) }
        s ~ /;calls(;|$)/ {
            all += c
            if (s ~ /^profile;_start;__libc_start_main;[^;]*;main;calls/) rooted += c
            if (s ~ /\[unknown\]/) unknown += c
            if (s ~ /\[telco-stap\]/) { own += c; if (s !~ /;(calls|tiny);\[telco-stap\]/) misplaced += c }
        }
        END { print (all >= 150 && rooted * 100 >= all * 99 && own * 10 >= all && unknown * 100 <= all && misplaced == 0) ? "ok" : "all " all " rooted " rooted " own " own " unknown " unknown " misplaced " misplaced }' own.folded)
    # And no stack cut short anywhere (a sample in our code whose rows do
    # not lead out is `[telco-stap]` alone, under no function).
    cut=$(sed -n 's/^timer.profile: \([0-9]*\) samples ([0-9]* lost, \([0-9]*\) stacks not unwound.*/\1 \2/p' err.txt)
    case "$cut" in "") got="$got (no -v line)" ;; *) set -- $cut; [ $(($2 * 100)) -le "$1" ] || got="$got ($2 of $1 stacks cut short)" ;; esac
    case "$out" in *1) ;; *) got="$got (the probes did not run)" ;; esac
    if [ "$got" = ok ]; then ok "samples in the probes' code reach main ($what)"; else
        sort -t' ' -k2 -n own.folded | tail -5 >> err.txt
        bad "samples in the probes' code reach main ($what)" ok "$got"; fi
done
rm -f own.folded

# The tracer SIGKILLed at moments through its attach and session (-p):
# the target runs on to its right result. The remote-operation stub ends
# an operation the tracer left half done by itself (rt_sigreturn). Ready
# by a line: the kill comes 0 to 280 ms after the tracer says pass 4 is
# done (on its stderr, through a FIFO), across the attach (about 250 ms in
# this guest), and once well after it.
want=$(./a64 slow 3000)
mkfifo /tmp/tracer.fifo
for delay in 0 0.02 0.04 0.06 0.08 0.1 0.12 0.14 0.16 0.18 0.2 0.22 0.24 0.28 1.0; do
    ./a64 slow 3000 > target.txt 2>&1 &
    tpid=$!
    $T -v -p $tpid --chrome /tmp/killed.json -e 'global n probe process.function("work") { n++ }' \
        > /dev/null 2>/tmp/tracer.fifo &
    spid=$!
    exec 3</tmp/tracer.fifo
    until_line "Pass 4:"
    sleep $delay
    kill -9 $spid 2>/dev/null
    wait $spid 2>/dev/null
    wait $drain 2>/dev/null
    wait $tpid; rc=$?
    got=$(cat target.txt)
    if [ $rc -eq 0 ] && [ "$got" = "$want" ]; then ok "tracer killed ${delay}s after pass 4"
    else bad "tracer killed ${delay}s after pass 4 (target exit $rc)" "$want" "$got"; fi
done
rm -f /tmp/tracer.fifo
rm -f target.txt /tmp/killed.json

# Go: probes on Go functions' entries (their own stack check first, the
# handlers on the slot's own stack), Go's register ABI and goid(), while
# goroutines grow and copy their stacks; beside the collector and Go's
# preemption; Go's frames unwound by its function table (main.hot makes
# no frame: main.main stays its caller).
want="rec 20100
n 20100 bad 0 deepest 200 goroutines 100 dwarf 20100"
check "Go entry probes while stacks grow" "$want" $T -e 'global n, bad, deepest, ids, goroutines, dwarf
    probe process.function("main.rec") {
        n++
        if ($arg3 != 5 || go_string_arg(2) != "hello") bad++
        if ($arg1 > deepest) deepest = $arg1
        ids[goid()] = 1
        if ($n != $arg1 || user_string_n($s->str, $s->len) != "hello") bad++
        dwarf++
    }
    probe end {
        foreach (id in ids) goroutines++
        printf("n %d bad %d deepest %d goroutines %d dwarf %d\n", n, bad, deepest, goroutines, dwarf)
    }' -c "./gowork stacks 100 200"
check "Go probes beside the collector and preemption" "step 80000 gc true
80000" $T -e 'global n probe process.function("main.step") { n++ } probe end { println(n) }' -c "./gowork preempt 20000"
$T -e 'probe timer.profile.hz(999) {}' -c "./gospin 30" --folded go.folded > /dev/null 2>err.txt
got=$(grep 'main\.hot [0-9]*$' go.folded | head -3)
if [ -n "$got" ] && ! grep 'main\.hot [0-9]*$' go.folded | grep -qv 'runtime\.main;main\.main;main\.hot'; then
    ok "Go stacks by Go's frame table"
else bad "Go stacks by Go's frame table" "...;runtime.main;main.main;main.hot N" "$got"; fi
rm -f go.folded
# Return probes on Go functions (each `ret` a branch to the trampoline,
# the @entry values kept by goroutine and depth): while stacks grow and
# move, and through panics and recovers (the unwound calls counted).
check "Go return probes while stacks grow" "rec 20100
r 20100 bad 0" $T -e 'global r, bad
    probe process.function("main.rec").return {
        r++
        if (@entry(goid()) != goid() || @entry($arg1) > 200 || $return < 5) bad++
    }
    probe end { printf("r %d bad %d\n", r, bad) }' -c "./gowork stacks 100 200"
check "Go return probes through panics" "guarded 300 panicked 100 sum 60100
guarded 300 risky 200 bad 0" $T -e 'global g, r, bad
    probe process.function("main.guarded").return {
        g++
        i = @entry($arg1)
        if ($return != (i % 3 == 0 ? -1 : 2 * i + 1)) bad++
        if (gettimeofday_ns() < @entry(gettimeofday_ns())) bad++
    }
    probe process.function("main.risky").return { r++; if ($return != 2 * @entry($arg1)) bad++ }
    probe end { printf("guarded %d risky %d bad %d\n", g, r, bad) }' -c "./gowork panics 300"
if grep -q "^WARNING: 100 call(s) left by longjmp, an exception or a Go panic" err.txt; then
    ok "Go panics' unwound calls counted"
else bad "Go panics' unwound calls counted" "WARNING: 100 call(s) left by ..." "$(cat err.txt)"; fi

rm -f err.txt p4.txt
echo "GUEST: $pass passed, $fail failed"

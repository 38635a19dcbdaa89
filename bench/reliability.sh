#!/usr/bin/env bash
# Trials for docs/RELIABILITY.md: runs each reliability test of the suite
# RUNS times (default 5) and prints a markdown table of runs and passes.
# Each test is itself a set of trials (see its doc comment); a run passes
# when every trial in it does.
#
#     bash bench/reliability.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
cargo test --workspace --locked --no-run >/dev/null 2>&1
# test binary (cargo --test NAME), test name, what one run checks
trials=(
  "hostile|overwriting_the_whole_region_at_the_start_and_in_the_middle|14 sessions: all-ones and 0xaa over the whole region at the start or the middle, 7 scripts"
  "hostile|random_bytes_in_the_middle_and_at_random_moments|6 sessions: random bytes in the middle and at random moments"
  "hostile|forged_ring_records|3 sessions: forged records (huge length, unknown kind and format, 2^31-bucket histogram)"
  "hostile|a_broken_array_and_a_held_lock|3 sessions: array geometry overwritten; a lock held for ever"
  "hostile|a_statistic_in_an_impossible_state|1 session: a negative count, min > max"
  "hostile|scribbling_through_attach_run_and_detach|3 -p sessions scribbled on from before attach to after detach"
  "untrusted_region|arbitrary_region_bytes_never_crash_the_tracer|48 cases of up to 300 random bytes, then the consumer, the damage checks, the display and a whole session"
  "mutated_elf|a_mutated_binary_gets_an_answer_or_a_message|40 mutated binaries through pass 2's readers"
  "mutated_elf|mutated_debug_information_gets_an_answer_or_a_message|40 binaries with bytes changed in their DWARF, through -L and a script reading variables by name"
  "target|a_killed_target_still_gets_its_end_probe|5 -p sessions whose 4-thread target is SIGKILLed: end probe, clean exit, whole trace"
  "target|the_target_survives_a_killed_tracer|the tracer SIGKILLed after attach: 200,000 probed calls still right"
  "target|the_target_survives_a_tracer_killed_while_attaching|16 -p --chrome sessions SIGKILLed 0-45 ms after pass 4 (through the attach): target exits 0, every result right"
  "target|sigint_during_the_attach_ends_the_session_cleanly|10 -p sessions sent SIGINT right after pass 4: clean exit, end probe, process unchanged"
  "target|a_command_survives_a_tracer_killed_while_it_starts|16 -c sessions SIGKILLed 0-8 ms after pass 4 (the start and the arming): the command runs on and prints its own result"
  "target|the_target_survives_a_tracer_killed_while_detaching|16 -p sessions ended by SIGINT and SIGKILLed 0-15 ms later, during the detach: target exits 0, every result right"
  "target|signals_during_the_detach_leave_nothing_behind|5 -p sessions hit by bursts of 40 SIGINT/SIGTERM/SIGHUP through their end and detach: exit 0, end probe, maps unchanged"
  "target|attach_detach_cycles_leave_nothing_behind|attach/detach cycles: code, maps, fds and output unchanged"
  "target|detaching_from_a_busy_process_leaves_nothing_behind|detach from 4 threads recursing through return probes"
)
echo "| test | what one run checks | runs | passed |"
echo "|---|---|---|---|"
for t in "${trials[@]}"; do
  IFS='|' read -r bin name what <<<"$t"
  pass=0
  for _ in $(seq 1 "$runs"); do
    if cargo test --locked --test "$bin" -- --exact "$name" >/dev/null 2>&1; then pass=$((pass + 1)); fi
  done
  echo "| \`$bin::$name\` | $what | $runs | $pass |"
done

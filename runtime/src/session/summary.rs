//! The end-of-session summary: what the output lacks and why.

use super::*;
use telco_abi::artifact::Artifact;

/// The end-of-session WARNING (and ERROR) lines: what the output lacks and
/// why, each naming the option that changes it; and, unless `quiet`
/// (`-w`), what cost more than it would have (probes placed with a trap).
pub fn summary(o: &Outcome, a: &Artifact, quiet: bool) -> Vec<String> {
    let mut v = Vec::new();
    if o.too_many_skipped {
        v.push(format!(
            "ERROR: Skipped too many probes ({} > MAXSKIPPED={}): the session ended early; \
             -D MAXSKIPPED=N allows more",
            o.skipped, a.limits.maxskipped
        ));
    }
    if o.flight_asks > 0 && a.flight_chunks == 0 && !quiet {
        v.push(format!(
            "WARNING: flight_dump() was called {} time(s) and wrote nothing: the flight recorder is off (--flight-recorder FILE)",
            o.flight_asks
        ));
    }
    if o.errors > 0 || o.skipped > 0 {
        v.push(format!("WARNING: Number of errors: {}, skipped probes: {}", o.errors, o.skipped));
    }
    if o.skipped_busy > 0 {
        v.push(format!(
            "WARNING: Skipped due to reentrancy: {} (a probed function reached while a handler ran on the \
             same thread, e.g. from a signal handler)",
            o.skipped_busy
        ));
    }
    if o.skipped_noslot > 0 {
        v.push(format!(
            "WARNING: Skipped due to too many threads: {} (the first {} threads of the traced processes, all together, get probe state)",
            o.skipped_noslot, a.nthreads
        ));
    }
    if o.skipped_deep > 0 {
        // Go functions' calls are kept by goroutine, in fewer records.
        let go = match crate::region::go_calls(a) {
            0 => String::new(),
            n => format!(
                "; on Go functions, more than {} deep in one goroutine, or more than {n} goroutines inside such calls \
                 at once",
                a.shadow_depth.min(telco_abi::region::GO_CALLS_DEPTH)
            ),
        };
        v.push(format!(
            "WARNING: Skipped due to call depth: {} (return probes on calls nested more than {} deep in one thread{go}: \
             -D MAXRETURNDEPTH=N for more)",
            o.skipped_deep, a.shadow_depth
        ));
    }
    if o.skipped_go > 0 {
        v.push(format!(
            "WARNING: Skipped in Go's runtime: {} (a probed Go function reached on Go's scheduler or signal stack, \
             or with less than {} KiB of the scheduler's stack free)",
            o.skipped_go,
            telco_abi::region::GO_STACK_ROOM / 1024
        ));
    }
    if o.unfollowed_execs > 0 {
        v.push(format!(
            "WARNING: {} program(s) the target exec'd ran without probes: the tracer did not answer their exec in 10 s",
            o.unfollowed_execs
        ));
    }
    if o.trap_probes > 0 && !quiet {
        v.push(format!(
            "WARNING: {} probe point(s) placed with a trap where no jump fits (a signal each hit, about 1 µs; -v names them): {} hit(s)",
            o.trap_probes, o.trap_hits
        ));
    }
    if o.unreturned > 0 {
        v.push(format!(
            "WARNING: {} call(s) left by longjmp, an exception or a Go panic: their return probes did not run",
            o.unreturned
        ));
    }
    if let Some(p) = &o.profile {
        if p.lost > 0 {
            let what =
                if p.waits > 0 { "timer.profile and of waits (--off-cpu, process.blocked)" } else { "timer.profile" };
            v.push(format!(
                "WARNING: {} sample(s) of {what} were lost: the tracer did not drain the kernel's buffer in time",
                p.lost
            ));
        }
        if p.unpaired > 0 {
            v.push(format!(
                "WARNING: {} wait(s) were left out: the record of their end was lost (the kernel's buffer full), or \
                 more than 16,384 threads were waiting at once",
                p.unpaired
            ));
        }
        if p.samples > 0 && p.truncated * 10 > p.samples {
            v.push(format!(
                "WARNING: {} of {} sampled stack(s) could not be unwound to their root (no unwind information, or \
                 deeper than the {} KiB of stack each sample copies)",
                p.truncated,
                p.samples,
                crate::profile::STACK_BYTES / 1024
            ));
        }
        if p.malformed > 0 {
            v.push(format!("WARNING: {} sample record(s) did not parse and were skipped", p.malformed));
        }
    }
    if o.dropped > 0 {
        let mb = (a.ring_size >> 20).max(1);
        v.push(format!(
            "WARNING: {} event(s) were dropped because the event ring ({mb} MB) was full: \
             a larger ring (-s {}) keeps up with more",
            o.dropped,
            (mb * 4).min(4096)
        ));
    }
    v
}

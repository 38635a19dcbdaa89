//! The flight recorder's triggers, seen from the session's side: it alone
//! knows the session's processes, so it reads the calls in flight (their
//! threads' shadow stacks) and hands each dump to the consumer thread
//! (`crate::flight`).

use super::*;
use crate::flight::{self, Request, Why};

/// What the session has seen of the triggers.
#[derive(Default)]
pub(super) struct Watch {
    /// `--flight-recorder` is on.
    pub(super) on: bool,
    pub(super) at_end: bool,
    /// SIGUSR2s and `flight_dump()` calls already answered; dumps the
    /// target caused (past `flight::MAX_TARGET_DUMPS` their calls in
    /// flight are not read: the consumer only counts them).
    signals: u64,
    asks: u64,
    target_dumps: u32,
}

impl Watch {
    pub(super) fn new(on: bool, at_end: bool) -> Watch {
        Watch { on, at_end, signals: crate::os::sys::dump_signals().0, asks: 0, target_dumps: 0 }
    }
}

impl Armed {
    /// The calls in flight in processes `pids`.
    fn open_calls(&self, pids: &[i32]) -> Vec<flight::Open> {
        flight::open_calls(pids, self.hooker.threads_at, &self.hooker.artifact)
    }

    fn ask(&self, why: Why, at_ns: u64, at_ticks: u64) {
        let open = self.open_calls(&self.session_processes());
        flight::request(Request { why, at_ns, at_ticks, open });
    }

    /// Whether the target may still cause a dump (counting this one).
    fn target_may(&mut self) -> bool {
        self.flights.target_dumps = self.flights.target_dumps.saturating_add(1);
        self.flights.target_dumps <= flight::MAX_TARGET_DUMPS
    }

    /// The instant of the target's last trigger (`Header::flight_at`, in
    /// the spans' ticks), in any of the session's regions: the target's
    /// word, so never later than now (nor 0).
    pub(super) fn trigger_ticks(&self) -> u64 {
        let now = crate::os::sys::ticks();
        let at = core::mem::offset_of!(telco_abi::region::Header, flight_at);
        let main = if self.region.header.is_null() {
            0
        } else {
            // SAFETY: a u64 field of the live region's header.
            unsafe { std::sync::atomic::AtomicU64::from_ptr(self.region.header.add(at) as *mut u64) }
                .load(std::sync::atomic::Ordering::Acquire)
        };
        let last = self.domain.others.iter().map(|d| d.region.counter(at)).fold(main, u64::max);
        if last == 0 || last > now {
            now
        } else {
            last
        }
    }

    /// SIGUSR2 to the tracer, `flight_dump()` in a handler (the count in
    /// every region the session's processes write).
    pub(super) fn flight_poll(&mut self) {
        if !self.flights.on {
            return;
        }
        let (n, at, ticks) = crate::os::sys::dump_signals();
        if n != self.flights.signals {
            self.flights.signals = n;
            self.ask(Why::Signal, at, ticks);
        }
        if self.region.header.is_null() {
            return;
        }
        let at = core::mem::offset_of!(telco_abi::region::Header, flight_asks);
        // SAFETY: a u64 field of the live region's header.
        let main = unsafe { std::sync::atomic::AtomicU64::from_ptr(self.region.header.add(at) as *mut u64) }
            .load(std::sync::atomic::Ordering::Acquire);
        let asks = self.domain.others.iter().fold(main, |t, d| t.wrapping_add(d.region.counter(at)));
        if asks != self.flights.asks {
            self.flights.asks = asks;
            let at = (crate::os::sys::realtime_ns(), self.trigger_ticks());
            if self.target_may() {
                self.ask(Why::Asked, at.0, at.1);
            } else {
                // Counted by the consumer, nothing read.
                flight::request(Request { why: Why::Asked, at_ns: at.0, at_ticks: at.1, open: Vec::new() });
            }
        }
    }

    /// Process `pid` is dying of a fatal signal, its handler waiting for
    /// our answer: its calls in flight, while its threads' stacks are
    /// there to read.
    pub(super) fn flight_open_before_crash(&mut self, pid: i32) -> Vec<flight::Open> {
        if self.flights.on && self.target_may() {
            self.open_calls(&[pid])
        } else {
            Vec::new()
        }
    }

    /// The crash `c` was recorded: a dump with `open` (the dying
    /// process's calls in flight) and the other processes'.
    pub(super) fn flight_crash(&self, c: &crate::crash::Crash, mut open: Vec<flight::Open>, at: (u64, u64)) {
        if !self.flights.on {
            return;
        }
        if self.flights.target_dumps <= flight::MAX_TARGET_DUMPS {
            let others: Vec<i32> = self.session_processes().into_iter().filter(|&p| p != c.pid).collect();
            open.extend(self.open_calls(&others));
        }
        let signal = crate::os::process::signal_name(c.signal);
        let signal = signal.split(' ').next().unwrap_or("signal").to_string();
        let why = Why::Crash { pid: c.pid as u32, tid: c.tid as u32, signal, text: c.describe() };
        flight::request(Request { why, at_ns: at.0, at_ticks: at.1, open });
    }

    /// `--flight-at-end`: the last dump, before the probes come out.
    pub(super) fn flight_end(&self) {
        if self.flights.on && self.flights.at_end {
            self.ask(Why::End, crate::os::sys::realtime_ns(), crate::os::sys::ticks());
        }
    }
}

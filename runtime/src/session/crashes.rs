//! Fatal signals in the session's processes, as the crash handler
//! recorded them.

use super::*;

impl Armed {
    /// Where the session's code is in the target's processes, for naming
    /// the place of a crash.
    pub(super) fn our_code(&self) -> Vec<(u64, u64)> {
        let children = self.follow.iter().flat_map(|f| f._codes.iter());
        self.undo._code.iter().chain(children).map(|c| (c.remote, c.size)).collect()
    }

    /// A process of the session is dying of a fatal signal (`rt_crash`
    /// waits for this answer): record where. The command's own is said at
    /// the end with its exit; any other process's at once.
    pub(super) fn take_crash(&mut self) {
        if self.region.header.is_null() {
            return;
        }
        // The session's region, then its other domains'.
        let mut regions = vec![(self.region.header, self.region.ino)];
        regions.extend(self.domain.others.iter().map(|d| (d.region.base() as *const u8, d.ino)));
        // The flight recorder's instant (the fault's, as its handler held
        // the history), then the calls in flight, before the answer lets
        // the process die.
        let at = (crate::os::sys::realtime_ns(), self.trigger_ticks());
        let open = regions
            .iter()
            .find_map(|&(header, ino)| crate::crash::pending(header).filter(|&(pid, tid)| ours(tid, pid, ino)))
            .map(|(pid, _)| self.flight_open_before_crash(pid))
            .unwrap_or_default();
        let codes = self.our_code();
        let relocs = self.hooker.relocs.borrow().clone();
        let ours_ = crate::crash::Ours { codes: &codes, relocs: &relocs, symbols: Some(&*self.symbols) };
        let Some(c) = regions
            .into_iter()
            .find_map(|(header, ino)| crate::crash::take(header, |pid, tid| ours(tid, pid, ino), &ours_))
        else {
            return;
        };
        if !(c.pid == self.target.pid && self.target.child) {
            let exe = crate::os::proc::exe_path(c.pid);
            let line = format!("process {} ({}) is being killed by {}", c.pid, exe.display(), c.describe());
            self.warn(line);
        }
        self.flight_crash(&c, open, at);
        self.report.crashes.push(c);
    }

    /// The crash of process `pid` recorded in the session, if one was
    /// (also one the tracer did not answer in time: `take_leftover_crash`).
    pub fn crash_of(&self, pid: i32) -> Option<crate::crash::Crash> {
        self.report.crashes.iter().rev().find(|c| c.pid == pid).cloned()
    }

    /// At the end, while the region is still mapped: a crash record of the
    /// command that nobody answered.
    pub(super) fn take_leftover_crash(&mut self) {
        if self.region.header.is_null() || self.report.crashes.iter().any(|c| c.pid == self.target.pid) {
            return;
        }
        let codes = self.our_code();
        let relocs = self.hooker.relocs.borrow().clone();
        if let Some(c) = crate::crash::leftover(
            self.region.header,
            self.target.pid,
            &crate::crash::Ours { codes: &codes, relocs: &relocs, symbols: Some(&*self.symbols) },
        ) {
            self.report.crashes.push(c);
        }
    }
}

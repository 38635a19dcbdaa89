//! Per-thread rows of processes that ended, given back for reuse.

use super::*;

impl Armed {
    /// Half the per-thread rows of a region (the session's, a domain's)
    /// are taken or more (`Header::rows_next`): mark the rows whose
    /// process has ended
    /// `ROW_FREE`, for `take_row` to hand out again once all have been
    /// taken once (early, so that the rows are free before a new thread
    /// needs one). Every 20 ms at most, and only when the target's pids
    /// are ours (one pid namespace); a process not reaped yet still holds
    /// its rows.
    pub(super) fn reclaim_rows(&mut self) {
        let Some(f) = &mut self.follow else { return };
        if !f.same_pid_ns
            || self.region.header.is_null()
            || f.rows_checked.elapsed() < std::time::Duration::from_millis(20)
        {
            return;
        }
        f.rows_checked = std::time::Instant::now();
        // The session's region, and its other domains'.
        let mut headers = vec![self.region.header as *mut u8];
        headers.extend(self.domain.others.iter().map(|d| d.region.base()));
        for h in headers {
            reclaim_in(h, &self.hooker.artifact);
        }
    }
}

impl Armed {
    /// A process that exec'd: the rows its old image's threads held (all
    /// gone with the exec; the pid stays, so `reclaim_rows` would never
    /// free them) are free again for the new image's threads.
    pub(super) fn free_rows_of(&self, pid: i32) {
        use std::sync::atomic::{AtomicU32, Ordering};
        use telco_abi::region::ROW_FREE;
        if self.region.header.is_null() {
            return;
        }
        let a = &self.hooker.artifact;
        let mut headers = vec![self.region.header as *mut u8];
        headers.extend(self.domain.others.iter().map(|d| d.region.base()));
        for h in headers {
            for r in 0..a.nthreads as usize {
                // SAFETY: one of the `nthreads` row owners at
                // `row_owners_off` of a live region (4-aligned, inside it).
                let owner = unsafe { AtomicU32::from_ptr(h.add(a.row_owners_off as usize + 4 * r) as *mut u32) };
                let _ = owner.compare_exchange(pid as u32, ROW_FREE, Ordering::AcqRel, Ordering::Relaxed);
            }
        }
    }
}

/// [`Armed::reclaim_rows`] in the region at `header` (in the tracer).
fn reclaim_in(header: *mut u8, a: &Artifact) {
    use std::sync::atomic::{AtomicU32, Ordering};
    use telco_abi::region::{Header, ROW_FREE};
    let field = |off: usize| {
        // SAFETY: a u32 of a live region: the header's rows_next, or one of
        // the `nthreads` row owners at `row_owners_off` (4-aligned, inside
        // the region: layout.rs).
        unsafe { AtomicU32::from_ptr(header.add(off) as *mut u32) }
    };
    if field(core::mem::offset_of!(Header, rows_next)).load(Ordering::Relaxed) < a.nthreads / 2 {
        return;
    }
    for r in 0..a.nthreads as usize {
        let owner = field(a.row_owners_off as usize + 4 * r);
        let o = owner.load(Ordering::Acquire);
        if o == 0 || o == ROW_FREE || o > i32::MAX as u32 {
            continue;
        }
        if !crate::os::process::exists(o as i32) {
            let _ = owner.compare_exchange(o, ROW_FREE, Ordering::AcqRel, Ordering::Relaxed);
        }
    }
}

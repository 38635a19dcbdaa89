//! Waits (`--off-cpu`, `process.blocked`): each switch-out, unwound when
//! drained, paired with its thread's next switch-in.

use std::collections::HashMap;

use telco_abi::region::SavedRegs;

use super::Frame;

/// A switch-out, unwound when it was drained, waiting for the thread's
/// switch-in (`--off-cpu`, `process.blocked`).
pub(super) struct Out {
    pub(super) pid: u32,
    pub(super) tid: u32,
    pub(super) time: u64,
    pub(super) in_kernel: bool,
    pub(super) kernel: Vec<u64>,
    pub(super) regs: SavedRegs,
    pub(super) frames: Vec<Frame>,
    pub(super) complete: bool,
    /// What it waited in (by its kernel chain), unless it was preempted.
    pub(super) name: String,
    pub(super) preempted: bool,
    /// Its switch record came (a second one means this wait's end, and
    /// the next wait's sample, were lost).
    pub(super) recorded: bool,
}

/// The switch records of a drain, and the switch-outs, in time order.
pub(super) enum Timed {
    Out(Box<Out>),
    Switch { tid: u32, out: bool, preempted: bool },
    Exit { tid: u32 },
}

/// Switch-outs waiting for their switch-ins, and the records of the last
/// moments, for the next drain.
#[derive(Default)]
pub(super) struct Pairing {
    /// Each thread's switch-out waiting for its switch-in.
    pub(super) pending: HashMap<u32, Box<Out>>,
    /// Switch-outs and switches newer than the last drain's start, less
    /// `SETTLE_NS`.
    pub(super) deferred: Vec<(u64, Timed)>,
    /// Records dropped past `MAX_DEFERRED` (taken by the summary).
    pub(super) lost: u64,
    /// Waits whose end (or next sample) was lost, and threads past
    /// `MAX_PENDING`.
    pub(super) unpaired: u64,
}

impl Pairing {
    /// Pair each switch-out with its thread's next switch-in, in time
    /// order (records of the last `SETTLE_NS` wait for the next drain:
    /// another CPU's ring may not have its part yet): the waits that
    /// ended, and their length. Once `stopped`, every record is taken,
    /// and the threads still waiting waited until `now` (`state` says
    /// which: one running lost its switch-in, one gone its exit record).
    pub(super) fn pair(
        &mut self,
        mut batch: Vec<(u64, Timed)>,
        now: u64,
        stopped: bool,
        state: &dyn Fn(u32, u32) -> Option<u8>,
    ) -> Vec<(Box<Out>, u64)> {
        batch.append(&mut self.deferred);
        batch.sort_by_key(|b| b.0);
        let settled = if stopped { u64::MAX } else { now.saturating_sub(SETTLE_NS) };
        let cut = batch.partition_point(|b| b.0 < settled);
        self.deferred = batch.split_off(cut);
        if self.deferred.len() > MAX_DEFERRED {
            let extra = self.deferred.len() - MAX_DEFERRED;
            self.lost += extra as u64;
            self.deferred.drain(..extra);
        }
        let mut ended = Vec::new();
        for (time, t) in batch {
            match t {
                Timed::Out(o) => {
                    // A switch-out while one is pending: that one's
                    // switch-in was lost.
                    if self.pending.len() >= MAX_PENDING && !self.pending.contains_key(&o.tid) {
                        self.unpaired += 1;
                    } else if self.pending.insert(o.tid, o).is_some() {
                        self.unpaired += 1;
                    }
                }
                Timed::Switch { tid, out: true, preempted } => match self.pending.get_mut(&tid) {
                    Some(o) if o.recorded => {
                        // Switched out twice without a switch-in between:
                        // its end was lost, and this wait's sample.
                        self.pending.remove(&tid);
                        self.unpaired += 1;
                    }
                    Some(o) if o.time <= time => {
                        o.preempted = preempted;
                        o.recorded = true;
                    }
                    _ => {}
                },
                Timed::Switch { tid, out: false, .. } => {
                    if let Some(o) = self.pending.remove(&tid) {
                        let ns = time.saturating_sub(o.time);
                        ended.push((o, ns));
                    }
                }
                Timed::Exit { tid } => {
                    self.pending.remove(&tid);
                }
            }
        }
        if stopped {
            for (tid, o) in std::mem::take(&mut self.pending) {
                match state(o.pid, tid) {
                    Some(b'R') => self.unpaired += 1,
                    Some(_) => {
                        let ns = now.saturating_sub(o.time);
                        ended.push((o, ns));
                    }
                    None => {}
                }
            }
        }
        ended
    }
}

/// Records newer than a drain's start less this wait for the next drain
/// (a record is written just after its time is taken, and another CPU's
/// ring may not have its records before it yet).
const SETTLE_NS: u64 = 2_000_000;
/// Records kept for the next drain, at most (past it the oldest go, as
/// lost samples).
const MAX_DEFERRED: usize = 16_384;
/// Threads switched out at once whose waits are kept (each with its
/// frames, until it runs again).
const MAX_PENDING: usize = 16_384;

#[cfg(test)]
mod tests {
    use super::*;

    fn out(tid: u32, time: u64) -> (u64, Timed) {
        let o = Out {
            pid: 1,
            tid,
            time,
            in_kernel: true,
            kernel: Vec::new(),
            regs: SavedRegs::default(),
            frames: Vec::new(),
            complete: true,
            name: "read".into(),
            preempted: false,
            recorded: false,
        };
        (time, Timed::Out(Box::new(o)))
    }

    fn switch(tid: u32, time: u64, out: bool, preempted: bool) -> (u64, Timed) {
        (time, Timed::Switch { tid, out, preempted })
    }

    fn lengths(v: &[(Box<Out>, u64)]) -> Vec<(u32, u64, bool)> {
        v.iter().map(|(o, ns)| (o.tid, *ns, o.preempted)).collect()
    }

    /// Waits pair a switch-out with the thread's next switch-in in time
    /// order, whatever ring order they came in; records of the last 2 ms
    /// wait for the next drain; lost records drop waits (counted), never
    /// make one longer.
    #[test]
    fn waits_pair_switch_outs_with_switch_ins() {
        let none = |_: u32, _: u32| Some(b'S');
        let mut p = Pairing::default();
        let now = 100_000_000;
        // Thread 7's switch-in came from another CPU's ring first.
        let batch = vec![switch(7, 5_000, false, false), out(7, 1_000), switch(7, 1_010, true, false)];
        assert_eq!(lengths(&p.pair(batch, now, false, &none)), [(7, 4_000, false)]);
        // Preempted; and a switch-in too recent is kept for the next drain.
        let batch = vec![out(8, 10_000), switch(8, 10_010, true, true), switch(8, now - 1_000_000, false, false)];
        assert!(p.pair(batch, now, false, &none).is_empty());
        assert_eq!(lengths(&p.pair(Vec::new(), now + 2_000_000, false, &none)), [(8, now - 1_010_000, true)]);
        // A lost switch-in: the next switch-out replaces the wait.
        let batch =
            vec![out(9, 20_000), switch(9, 20_010, true, false), out(9, 30_000), switch(9, 30_010, true, false)];
        assert!(p.pair(batch, now, false, &none).is_empty());
        assert_eq!(p.unpaired, 1);
        // A lost sample: a second switch-out record drops the wait.
        let batch = vec![switch(9, 40_000, true, false), switch(9, 50_000, false, false)];
        assert!(p.pair(batch, now, false, &none).is_empty());
        assert_eq!(p.unpaired, 2);
        // An exit drops the wait.
        let batch = vec![out(10, 60_000), (60_100, Timed::Exit { tid: 10 }), switch(10, 70_000, false, false)];
        assert!(p.pair(batch, now, false, &none).is_empty());
        // At the end: a sleeping thread waited until then, a running one
        // lost its switch-in, a gone one is dropped.
        let batch = vec![out(11, 80_000), out(12, 80_000), out(13, 80_000)];
        let state = |_: u32, tid: u32| match tid {
            11 => Some(b'S'),
            12 => Some(b'R'),
            _ => None,
        };
        assert_eq!(lengths(&p.pair(batch, now, true, &state)), [(11, now - 80_000, false)]);
        assert_eq!(p.unpaired, 3);
        assert!(p.pending.is_empty() && p.deferred.is_empty());
    }
}

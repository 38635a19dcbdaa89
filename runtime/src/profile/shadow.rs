//! Return probes' shadow stacks, read from the target to name the
//! return addresses their trampolines replaced in a sampled stack.

use std::collections::HashMap;

use crate::os::proc;

/// Where a process's return probes keep their shadow stacks (the thread
/// slots at `Header::threads_at`, each slot's frames): a sampled stack
/// holds a return trampoline's address where a probed function was called,
/// and the thread's shadow stack says which return address it replaced.
#[derive(Clone, Copy, Debug)]
pub struct ShadowStacks {
    pub threads_at: u64,
    pub nthreads: u32,
    pub frame_size: u32,
    pub depth: u32,
}

/// A thread's shadow stack, innermost first: (trampoline address, the
/// return address it replaced, the stack slot that held it) of each call
/// still running (`live`), and of the last two popped (`popped`, the frames
/// just above the stack's top, not yet overwritten by a later call: a
/// sample taken before a probed call returned, drained after).
#[derive(Clone, Debug, Default)]
pub(super) struct ShadowRead {
    live: Vec<(u64, u64, u64)>,
    popped: Vec<(u64, u64, u64)>,
}

impl ShadowRead {
    /// The return address trampoline `tramp`'s address stands for, read
    /// from stack slot `slot`: the frame with that slot (live, then
    /// popped), else the next live frame with that trampoline after the
    /// ones matched (`next`), else the innermost popped one with it.
    pub(super) fn find(&self, tramp: u64, slot: u64, next: &mut usize) -> Option<u64> {
        if let Some(i) = self.live.iter().position(|f| f.0 == tramp && f.2 == slot) {
            *next = (*next).max(i + 1);
            return Some(self.live[i].1);
        }
        if let Some(f) = self.popped.iter().find(|f| f.0 == tramp && f.2 == slot) {
            return Some(f.1);
        }
        if let Some(i) = self.live.iter().skip(*next).position(|f| f.0 == tramp) {
            *next += i + 1;
            return Some(self.live[*next - 1].1);
        }
        self.popped.iter().find(|f| f.0 == tramp).map(|f| f.1)
    }

    /// The return address of the frame whose slot is `slot` (live, then
    /// popped), else the next live frame after the ones matched.
    pub(super) fn by_slot(&self, slot: u64, next: &mut usize) -> Option<u64> {
        if let Some(i) = self.live.iter().position(|f| f.2 == slot) {
            *next = (*next).max(i + 1);
            return Some(self.live[i].1);
        }
        if let Some(f) = self.popped.iter().find(|f| f.2 == slot) {
            return Some(f.1);
        }
        let &(_, ret, _) = self.live.get(*next)?;
        *next += 1;
        Some(ret)
    }
}

/// Thread `tid`'s shadow stack for one walk, read at its first use (into
/// `read`). Read when the sample is drained, up to 10 ms after it was
/// taken: a thread that has returned since (or a process that has ended)
/// is matched against the last live stack read for it (`seen`, forgotten
/// all at once past 4096 threads).
pub(super) fn shadow_read<'r>(
    read: &'r mut Option<ShadowRead>,
    seen: &mut HashMap<u32, Vec<(u64, u64, u64)>>,
    pid: u32,
    tid: u32,
    sh: &ShadowStacks,
) -> &'r ShadowRead {
    read.get_or_insert_with(|| {
        let mut fresh = shadow_frames(pid, tid, sh);
        if seen.len() >= 4096 && !seen.contains_key(&tid) {
            seen.clear();
        }
        let known = seen.entry(tid).or_default();
        if fresh.live.is_empty() {
            fresh.live = known.clone();
        } else {
            *known = fresh.live.clone();
        }
        fresh
    })
}

/// Thread `tid`'s shadow stack in process `pid`. Read from the target's
/// memory when a sample needs it (the target's word: only used to name and
/// continue a frame, never followed as a pointer here).
fn shadow_frames(pid: u32, tid: u32, s: &ShadowStacks) -> ShadowRead {
    use telco_abi::region::{ShadowFrame, ThreadSlot};
    let none = ShadowRead::default();
    let Ok(m) = proc::mem(pid as i32, false) else { return none };
    let read = |at: u64, len: usize| -> Option<Vec<u8>> {
        let mut b = vec![0u8; len];
        std::os::unix::fs::FileExt::read_exact_at(&m, &mut b, at).ok().map(|()| b)
    };
    let u32_at = |b: &[u8], o: usize| b.get(o..o + 4).map_or(0, |x| u32::from_le_bytes(x.try_into().unwrap_or([0; 4])));
    let u64_at = |b: &[u8], o: usize| b.get(o..o + 8).map_or(0, |x| u64::from_le_bytes(x.try_into().unwrap_or([0; 8])));
    let size = core::mem::size_of::<ThreadSlot>();
    let stride = s.frame_size as usize;
    if stride < core::mem::size_of::<ShadowFrame>() || s.nthreads == 0 {
        return none;
    }
    let Some(slots) = read(s.threads_at, size * s.nthreads.min(1 << 16) as usize) else { return none };
    let Some(b) = slots.chunks_exact(size).find(|b| {
        u32_at(b, core::mem::offset_of!(ThreadSlot, tid)) == tid
            && u32_at(b, core::mem::offset_of!(ThreadSlot, pid)) == pid
    }) else {
        return none;
    };
    let cap = s.depth.min(4096) as usize;
    let depth = (u32_at(b, core::mem::offset_of!(ThreadSlot, depth)) as usize).min(cap);
    let upto = (depth + 2).min(cap);
    let Some(frames) = read(u64_at(b, core::mem::offset_of!(ThreadSlot, frames)), stride * upto) else {
        return none;
    };
    let frame = |f: &[u8]| {
        (
            u64_at(f, core::mem::offset_of!(ShadowFrame, tramp)),
            // Signed where the function signs its return address
            // (aarch64's pointer authentication): the address itself.
            u64_at(f, core::mem::offset_of!(ShadowFrame, ret)) & telco_abi::arch::native::PC_MASK,
            u64_at(f, core::mem::offset_of!(ShadowFrame, sp)),
        )
    };
    let all: Vec<(u64, u64, u64)> = frames.chunks_exact(stride).map(frame).collect();
    ShadowRead {
        live: all[..depth].iter().rev().copied().collect(),
        popped: all[depth..].iter().rev().copied().filter(|f| f.0 != 0).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sample in a return trampoline just entered (or an entry one about
    /// to call) names its frame by the slot below the caller's stack
    /// pointer: found live, or popped when the thread returned before the
    /// stack was read (the race that cut such stacks short), else the next
    /// live frame.
    #[test]
    fn shadow_frames_are_found_by_their_slot_live_or_popped() {
        let r = ShadowRead {
            live: vec![(0x10, 0x500, 0x7f00), (0x10, 0x600, 0x7e00)],
            popped: vec![(0x10, 0x700, 0x7d00)],
        };
        let mut next = 0;
        assert_eq!(r.by_slot(0x7e00, &mut next), Some(0x600));
        assert_eq!(next, 2);
        let mut next = 0;
        assert_eq!(r.by_slot(0x7d00, &mut next), Some(0x700));
        assert_eq!(next, 0);
        assert_eq!(r.by_slot(0x1234, &mut next), Some(0x500));
        assert_eq!(r.by_slot(0x1234, &mut next), Some(0x600));
        assert_eq!(r.by_slot(0x1234, &mut next), None);
    }
}

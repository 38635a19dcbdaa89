//! The session's remote-operation stub (`arch::native::stub`): put into
//! the target, shared by every `Stopped` of a session, taken out last;
//! the stubs a thread was left running in, which no operation may use.

use super::{PtraceError, Regs, Stopped};
use std::sync::Mutex;

/// Where a session's remote-operation stub is: in slack bytes of the
/// program (their original bytes kept), or a page of its own.
#[derive(Clone, Debug)]
pub struct StubPlace {
    pub at: u64,
    pub original: Option<Vec<u8>>,
}

/// Stubs a thread was left running in ([`PtraceError::Abandoned`]): pid,
/// address, thread. Their resume block is that thread's until it leaves,
/// so no other operation may use them, and they are never taken out.
pub(super) static HELD_STUBS: Mutex<Vec<(i32, u64, i32)>> = Mutex::new(Vec::new());

/// The thread left running in process `pid`'s stub at `at`, if any.
pub(super) fn stub_held(pid: i32, at: u64) -> Option<i32> {
    let held = HELD_STUBS.lock().unwrap_or_else(|e| e.into_inner());
    held.iter().find(|&&(p, a, _)| p == pid && a == at).map(|&(_, _, tid)| tid)
}

impl Stopped {
    /// Put the session's remote-operation stub (`arch::native::stub`) into
    /// the target and make every later system call and call go through
    /// it. `slack`: executable bytes the program never uses (past the end
    /// of its code segment, in that segment's last page: `inject::slack`),
    /// kept to be put back; without, a page of its own is mapped, that
    /// `mmap` being made the old way (the one moment the tracer's death
    /// could still hurt the thread). None when neither is possible (calls
    /// go on the old way).
    pub fn install_stub(&mut self, slack: Option<u64>) -> Result<Option<StubPlace>, PtraceError> {
        use crate::arch::native::stub;
        let code = stub::code();
        // Slack in a page the program made non-executable (mprotect) would
        // fault at every use: a page of its own then. (Made so later, the
        // operations fault and say so: `Faulted`.)
        let executable = |at: u64| {
            crate::os::proc::maps(self.pid)
                .is_ok_and(|maps| maps.iter().any(|m| m.executable && m.start <= at && at + stub::SIZE <= m.end))
        };
        if let Some(at) = slack.filter(|&at| executable(at)) {
            // (A page the kernel will not let us write: a page of its own.)
            if let Ok(original) = self.read(at, stub::SIZE as usize) {
                if self.write(at, &code).is_ok() {
                    self.stub = Some(at);
                    return Ok(Some(StubPlace { at, original: Some(original) }));
                }
            }
        }
        let tid = self.main_thread();
        let page = stub::SIZE.next_multiple_of(4096);
        let prot = (libc::PROT_READ | libc::PROT_EXEC) as u64;
        let flags = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64;
        let at = self.syscall(tid, libc::SYS_mmap, [0, page, prot, flags, u64::MAX, 0])?;
        if (-4095..0).contains(&at) {
            return Ok(None);
        }
        self.write(at as u64, &code)?;
        self.stub = Some(at as u64);
        Ok(Some(StubPlace { at: at as u64, original: None }))
    }

    /// Use the stub another `Stopped` of the same session installed.
    pub fn use_stub(&mut self, place: Option<&StubPlace>) {
        self.stub = place.map(|p| p.at);
    }

    /// Take the stub out (last of all): its bytes put back, or its page
    /// unmapped (the old way: its `munmap` cannot run in it).
    pub fn remove_stub(&mut self, place: &StubPlace) -> Result<(), PtraceError> {
        if let Some(tid) = stub_held(self.pid, place.at) {
            return Err(PtraceError::StubHeld { pid: self.pid, tid });
        }
        self.stub = None;
        match &place.original {
            Some(bytes) => self.write(place.at, bytes),
            None => {
                let page = crate::arch::native::stub::SIZE.next_multiple_of(4096);
                let tid = self.main_thread();
                self.syscall(tid, libc::SYS_munmap, [place.at, page, 0, 0, 0, 0]).map(|_| ())
            }
        }
    }

    /// The stub's resume block for thread `tid` stopped with `saved`
    /// (`stub::resume_block`): with the floating-point registers and the
    /// signal mask where the architecture restores those too.
    pub(super) fn resume_block(&self, tid: i32, saved: &Regs) -> Result<Vec<u8>, PtraceError> {
        use crate::arch::native::stub;
        let (fp, mask) = match stub::FP_REGSET {
            Some(nt) => (self.regset(tid, nt, 1024)?, self.sigmask(tid)?),
            None => (Vec::new(), 0),
        };
        Ok(stub::resume_block(saved, &fp, mask))
    }
}

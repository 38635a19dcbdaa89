//! Where a process of the session died: the fatal signals a program leaves
//! at their default action (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT) go
//! to `rt_crash` (compiler/rt/rt.c) while the session runs. It records the
//! signal, the fault address and the thread's program counter in the
//! region's header and waits (bounded) while the tracer reads the record
//! and the process's maps ([`take`]); then the signal ends the process as
//! it would have. The tracer names the place (address, symbol, module) and
//! whether a probe was running.
//!
//! How: at attach, and in each program a followed process execs, a remote
//! call of `rt_crash_install` ([`install`]) gives those signals to a stub in
//! one of the session's code regions that passes the region as a fourth
//! argument (`patch::signal_stub`), installed with the raw `rt_sigaction`,
//! so with our own `sa_restorer` (`patch::SIGRETURN`), and with
//! `SA_RESETHAND`. The handler claims the record (`Header::crash_who`),
//! fills in the signal, `si_code`, fault address, pc and sp (from the
//! `ucontext`) and whether the thread's slot is inside a handler, publishes
//! `crash_req` and waits (2 s at most) for `crash_ack`. The session's poll
//! (`Armed::take_crash`) checks that the process is the session's (the
//! request is the target's word), names the place from the still-living
//! process's maps and the modules' symbols (a pc in a trampoline's relocated
//! copy is named by the function it came from; one elsewhere in our code
//! regions is our bug, said so), and answers. The handler then returns: the
//! default action is back, so a fault recurs and ends the process with its
//! core, and a sent signal (`si_code <= 0`) is sent again with `tgkill`. The
//! command's crash is said with its exit status (src/main.rs), any other
//! process's at once.
//!
//! A program that handles or ignores one of these signals keeps its own
//! disposition (only `SIG_DFL` is taken over), and at the end of a session
//! the default action is put back where the handler is still ours
//! ([`uninstall`]). What a program sees meanwhile: `sigaction(SIGSEGV, NULL,
//! &old)` returns our handler instead of `SIG_DFL`. A fault where no handler
//! can run (a stack overflow without an alternate signal stack) leaves no
//! record: the kernel ends the process at once, and the tracer only knows
//! the signal.

use crate::inject::CodeRegion;
use crate::os::ptrace::Stopped;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};
use telco_abi::artifact::Artifact;
use telco_abi::region::Header;

/// The signals `rt_crash` records (compiler/rt/rt.c: `crash_signals`).
pub const SIGNALS: [i32; 5] = [libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE, libc::SIGABRT];

/// The handler installed in one process: its entry (the stub that passes
/// the region to `rt_crash`) and what removes it.
#[derive(Debug, Clone, Copy)]
pub struct Hook {
    /// 0 when no fatal signal was taken over (the hook holds `traps` only).
    stub: u64,
    uninstall: u64,
    region: u64,
    trap: u64,
    /// SIGTRAP's handler, when trap probes are placed in the process
    /// (`crate::trap`): put back with the fatal signals'.
    traps: Option<crate::trap::Hook>,
}

/// Take over the fatal signals the stopped process leaves at their default
/// action. The stub and its sigreturn go into `code` (a code region of the
/// session in that process). None when nothing was taken over (the program
/// handles them all, or the remote call failed: then there is no record,
/// only the signal) and there are no `traps` to keep.
pub fn install(
    s: &mut Stopped,
    code: &mut CodeRegion,
    a: &Artifact,
    region: u64,
    traps: Option<crate::trap::Hook>,
) -> Option<Hook> {
    let taken = install_crash(s, code, a, region);
    let (stub, uninstall) = taken.unwrap_or((0, 0));
    (taken.is_some() || traps.is_some()).then_some(Hook { stub, uninstall, region, trap: code.trap(), traps })
}

impl Hook {
    /// SIGTRAP's handler, where trap probes are placed.
    pub fn traps(&self) -> Option<crate::trap::Hook> {
        self.traps
    }

    /// `hook` (or none: a hook of `traps` only) with SIGTRAP's handler
    /// `traps`, installed later (trap probes in a library loaded later).
    pub fn with_traps(hook: Option<Hook>, traps: crate::trap::Hook, region: u64) -> Hook {
        match hook {
            Some(h) => Hook { traps: Some(traps), ..h },
            None => Hook { stub: 0, uninstall: 0, region, trap: 0, traps: Some(traps) },
        }
    }
}

/// `install`'s fatal signals: the stub and `rt_crash_uninstall`.
fn install_crash(s: &mut Stopped, code: &mut CodeRegion, a: &Artifact, region: u64) -> Option<(u64, u64)> {
    let symbol = |name: &str| a.symbols.iter().find(|s| s.name == name).map(|s| s.offset);
    let (install, handler, uninstall) =
        (symbol("rt_crash_install")?, symbol("rt_crash")?, symbol("rt_crash_uninstall")?);
    let stub_bytes = crate::arch::native::patch::signal_stub(region, code.at(handler));
    let stub = code.alloc(stub_bytes.len() + crate::arch::native::patch::SIGRETURN.len())?;
    let restorer = stub + stub_bytes.len() as u64;
    s.write(stub, &stub_bytes).ok()?;
    s.write(restorer, &crate::arch::native::patch::SIGRETURN).ok()?;
    let tid = s.main_thread();
    let taken = s.call(tid, code.at(install), &[region, stub, restorer], code.trap()).ok()?;
    (taken != 0).then_some((stub, code.at(uninstall)))
}

/// The end of a session, every thread of the process stopped (and the
/// traps gone): the signals still handled by `hook` get their default
/// action back, SIGTRAP what the program set. Err says what could not.
pub fn uninstall(s: &mut Stopped, hook: &Hook) -> Result<(), String> {
    let tid = s.main_thread();
    if hook.stub != 0 {
        let _ = s.call(tid, hook.uninstall, &[hook.region, hook.stub], hook.trap);
    }
    match &hook.traps {
        Some(t) => crate::trap::uninstall(s, t),
        None => Ok(()),
    }
}

/// A fatal signal in a process of the session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Crash {
    pub pid: i32,
    pub tid: i32,
    pub signal: i32,
    /// The fault, from the signal's code: "address 0x10 not mapped", "sent
    /// by a process", ...
    pub cause: String,
    pub pc: u64,
    /// Where `pc` is: "main+0x12 in /tmp/prog", "telco-stap's code (...)".
    pub place: String,
    /// A probe handler was running on the thread.
    pub in_probe: bool,
    /// The program counter is in code telco-stap put in the process.
    pub in_ours: bool,
}

impl Crash {
    /// "SIGSEGV (Segmentation fault), address 0x0 not mapped, at
    /// 0x401136 in crash_here+0x8 (/tmp/prog), in thread 1234; no probe was
    /// running on that thread".
    pub fn describe(&self) -> String {
        let mut s = format!(
            "{}, {}, at {:#x} in {}, in thread {}",
            crate::os::process::signal_name(self.signal),
            self.cause,
            self.pc,
            self.place,
            self.tid
        );
        if self.in_ours {
            s.push_str(": telco-stap's own code faulted, a bug: please report it with the script and this line");
        } else if self.in_probe {
            s.push_str("; a probe handler was running on that thread");
        } else {
            s.push_str("; no probe was running on that thread");
        }
        s
    }
}

/// What `si_code` says of signal `sig` (with fault address `addr`).
fn cause(sig: i32, code: i32, addr: u64) -> String {
    if code <= 0 {
        return match code {
            libc::SI_USER => "sent by a process (kill)".into(),
            libc::SI_TKILL => "sent by a thread of the process (raise, abort, tgkill)".into(),
            libc::SI_QUEUE => "sent by a process (sigqueue)".into(),
            _ => format!("sent (code {code})"),
        };
    }
    let what = match (sig, code) {
        (libc::SIGSEGV, 1) => "not mapped",
        (libc::SIGSEGV, 2) => "not accessible (permissions)",
        (libc::SIGSEGV, 3) => "out of bounds",
        (libc::SIGSEGV, 4) | (libc::SIGSEGV, 5) | (libc::SIGSEGV, 6) => "refused by memory protection",
        (libc::SIGSEGV, 0x80) => "a general protection fault (a non-canonical address or a privileged instruction)",
        (libc::SIGBUS, 1) => "misaligned",
        (libc::SIGBUS, 2) => "not backed by a file any more (past the end of a mapped file?)",
        (libc::SIGBUS, 3) => "a hardware error",
        (libc::SIGILL, 1) => "an illegal opcode",
        (libc::SIGILL, 2) => "an illegal operand",
        (libc::SIGILL, 5) => "a privileged opcode",
        (libc::SIGILL, _) => "an illegal instruction",
        (libc::SIGFPE, 1) => "an integer divide by zero",
        (libc::SIGFPE, 2) => "an integer overflow",
        (libc::SIGFPE, 3) => "a floating-point divide by zero",
        (libc::SIGFPE, _) => "an arithmetic fault",
        _ => "",
    };
    match sig {
        libc::SIGSEGV | libc::SIGBUS if code == 0x80 => what.to_string(),
        libc::SIGSEGV | libc::SIGBUS if !what.is_empty() => format!("address {addr:#x} {what}"),
        _ if !what.is_empty() => what.to_string(),
        _ => format!("code {code}, address {addr:#x}"),
    }
}

/// The header's crash fields.
struct Fields {
    header: *const u8,
}

impl Fields {
    fn u64(&self, off: usize) -> &AtomicU64 {
        // SAFETY: `header` is the live region's header; `off` is one of
        // its 8-aligned u64 crash fields (callers use offset_of!).
        unsafe { AtomicU64::from_ptr(self.header.add(off) as *mut u64) }
    }
    fn u32(&self, off: usize) -> &AtomicU32 {
        // SAFETY: as above, a 4-aligned u32 field.
        unsafe { AtomicU32::from_ptr(self.header.add(off) as *mut u32) }
    }
}

/// Where the tracer's code regions and trampolines' relocated copies are,
/// to recognise a program counter in them.
pub struct Ours<'a> {
    /// Code regions (start, size) in the crashing process.
    pub codes: &'a [(u64, u64)],
    /// Relocated first instructions: copy, its length, original, its length.
    pub relocs: &'a [(u64, u32, u64, u32)],
    /// Where the names of functions come from (the driver's: the runtime
    /// parses no ELF).
    pub symbols: Option<&'a dyn crate::symtab::SymbolSource>,
}

/// A record `rt_crash` published and the tracer has not answered: read
/// it, name the place from the process's maps (it waits for the answer,
/// so they are still there), and answer. `valid(pid, tid)` says whether the
/// record names a process of the session (the record is the target's
/// word). `header` is the live region's header.
pub fn take(header: *const u8, valid: impl Fn(i32, i32) -> bool, ours: &Ours) -> Option<Crash> {
    let f = Fields { header };
    let req_at = core::mem::offset_of!(Header, crash_req);
    let ack_at = core::mem::offset_of!(Header, crash_ack);
    // Acquire: pairs with rt_crash's Release store after the record.
    let req = f.u64(req_at).load(Ordering::Acquire);
    if req == 0 || f.u64(ack_at).load(Ordering::Acquire) == req {
        return None;
    }
    let crash = read(&f, req, &valid, ours, true);
    // Release: the thread goes on (and dies) after we have read it all.
    f.u64(ack_at).store(req, Ordering::Release);
    crash
}

/// The process and thread of a crash waiting for its answer (the
/// target's word: check it is the session's before use).
pub fn pending(header: *const u8) -> Option<(i32, i32)> {
    let f = Fields { header };
    let req = f.u64(core::mem::offset_of!(Header, crash_req)).load(Ordering::Acquire);
    if req == 0 || f.u64(core::mem::offset_of!(Header, crash_ack)).load(Ordering::Acquire) == req {
        return None;
    }
    Some(((req >> 32) as i32, req as u32 as i32))
}

/// At the end: a record nobody answered (the tracer was late), for
/// process `pid`, named from the addresses alone.
pub fn leftover(header: *const u8, pid: i32, ours: &Ours) -> Option<Crash> {
    let f = Fields { header };
    let req = f.u64(core::mem::offset_of!(Header, crash_req)).load(Ordering::Acquire);
    if req == 0 || (req >> 32) as i32 != pid {
        return None;
    }
    read(&f, req, &|p, _| p == pid, ours, false)
}

fn read(f: &Fields, req: u64, valid: &dyn Fn(i32, i32) -> bool, ours: &Ours, live: bool) -> Option<Crash> {
    let (pid, tid) = ((req >> 32) as i32, (req & 0xffff_ffff) as i32);
    if !valid(pid, tid) {
        return None;
    }
    let signal = f.u32(core::mem::offset_of!(Header, crash_sig)).load(Ordering::Relaxed) as i32;
    // SAFETY: crash_code is a 4-aligned i32 field of the header.
    let code = unsafe { AtomicI32::from_ptr(f.header.add(core::mem::offset_of!(Header, crash_code)) as *mut i32) }
        .load(Ordering::Relaxed);
    let addr = f.u64(core::mem::offset_of!(Header, crash_addr)).load(Ordering::Relaxed);
    let pc = f.u64(core::mem::offset_of!(Header, crash_pc)).load(Ordering::Relaxed);
    let in_probe = f.u32(core::mem::offset_of!(Header, crash_in_probe)).load(Ordering::Relaxed) == 1;
    let (place, in_ours) = place(pid, pc, ours, live);
    Some(Crash { pid, tid, signal, cause: cause(signal, code, addr), pc, place, in_probe, in_ours })
}

/// Where `pc` is in process `pid`, and whether that is telco-stap's code.
fn place(pid: i32, pc: u64, ours: &Ours, live: bool) -> (String, bool) {
    if let Some(&(copy, _, orig, _)) =
        ours.relocs.iter().find(|&&(copy, len, _, _)| pc >= copy && pc < copy + u64::from(len))
    {
        let (name, _) = if live {
            place(pid, orig, &Ours { codes: &[], relocs: &[], symbols: ours.symbols }, live)
        } else {
            (String::new(), false)
        };
        let name = if name.is_empty() { format!("{orig:#x}") } else { name };
        return (format!("the relocated first instructions of {name} (+{:#x})", pc - copy), false);
    }
    if ours.codes.iter().any(|&(start, size)| pc >= start && pc < start + size) {
        return ("telco-stap's code (a trampoline or a probe handler)".into(), true);
    }
    if !live {
        return ("an unknown place (the process was gone before the tracer could read its maps)".into(), false);
    }
    let Ok(maps) = crate::os::proc::maps(pid) else {
        return ("an unknown place (its maps are unreadable)".into(), false);
    };
    let found = maps.into_iter().find(|m| pc >= m.start && pc < m.end);
    if let Some(m) = found {
        let text = m.path.to_string_lossy();
        if text.is_empty() {
            return ("anonymous memory (generated code?)".into(), false);
        }
        if !text.starts_with('/') {
            return (text.into_owned(), false);
        }
        let file_offset = pc - m.start + m.offset;
        let path = &m.path;
        return match symbol(ours.symbols, &m, file_offset) {
            Some(s) => (format!("{s} ({})", path.display()), false),
            None => (format!("{} (+{file_offset:#x})", path.display()), false),
        };
    }
    ("no mapping (a jump to a bad address?)".into(), false)
}

/// The function of the ELF file mapped at `m` that holds the byte at
/// `file_offset`, as `name+0xOFF` (the file as the process maps it:
/// `os::modfile`).
fn symbol(
    symbols: Option<&dyn crate::symtab::SymbolSource>,
    m: &crate::os::proc::Mapping,
    file_offset: u64,
) -> Option<String> {
    let file = crate::os::modfile::mapped(m)?;
    symbols?.function_at(&m.path, &file, file_offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_name_the_fault() {
        assert_eq!(cause(libc::SIGSEGV, 1, 0), "address 0x0 not mapped");
        assert_eq!(cause(libc::SIGSEGV, 2, 0x1000), "address 0x1000 not accessible (permissions)");
        assert_eq!(cause(libc::SIGABRT, libc::SI_TKILL, 0), "sent by a thread of the process (raise, abort, tgkill)");
        assert_eq!(cause(libc::SIGFPE, 1, 0x401000), "an integer divide by zero");
        assert_eq!(cause(libc::SIGTRAP, 7, 0x10), "code 7, address 0x10");
    }

    #[test]
    fn a_place_in_our_code_is_ours() {
        let ours = Ours { codes: &[(0x1000, 0x1000)], relocs: &[(0x1800, 8, 0x7000, 5)], symbols: None };
        assert!(place(0, 0x1010, &ours, false).1);
        let (p, mine) = place(0, 0x1802, &ours, false);
        assert!(!mine);
        assert_eq!(p, "the relocated first instructions of 0x7000 (+0x2)");
    }

    #[test]
    fn symbols_of_this_test_binary() {
        // A function of this very executable, by its address in memory.
        let pc = symbols_of_this_test_binary as *const () as u64;
        let maps = crate::os::proc::maps(std::process::id() as i32).unwrap();
        let m = maps.iter().find(|m| (m.start..m.end).contains(&pc)).unwrap();
        let s = symbol(Some(&crate::symtab::TestSymbols), m, pc - m.start + m.offset).expect("a symbol");
        assert!(s.contains("symbols_of_this_test_binary") && s.ends_with("+0x0"), "{s}");
    }
}

//! Trap probes: where no jump fits (a function shorter than the jump, a
//! loop into its bytes, a marker without room), a probe goes on a
//! one-byte trap (`int3`; `brk #0x7e1` on aarch64: `arch::TRAP_PROBE`)
//! over the site's first instruction. Its trampoline is the one a jump
//! would reach (`Hooker::function`); only the way in differs: SIGTRAP's
//! handler, `rt_trap` (compiler/rt/rt.c), looks the trap's address up in
//! the process's trap table and returns into the trampoline, with every
//! register as at the site. No round trip to the tracer: a hit costs one
//! signal delivery and one sigreturn (docs/probe-points.md).
//!
//! Per process (this module, from `session::traps`): the table
//! (`telco_abi::region::TrapArea`, at the end of the thread slots' private
//! mapping: a forked child has a copy, an exec'd program a new one),
//! written while the process is stopped, double-buffered so a thread
//! stopped in the middle of a lookup reads the table it started with;
//! the handler, installed by a remote call of `rt_trap_install` through a
//! stub of ours that passes the trap area ([`install`]); and, at the end,
//! the program's own SIGTRAP disposition put back ([`uninstall`]).
//!
//! The program keeps its signals: the C library's `sigaction` is hooked
//! (`rt_trap_sigaction`: what the program sets for SIGTRAP is kept in the
//! area, and `rt_trap` calls its handler for traps that are not ours), and
//! since the kernel ends a process whose thread traps with SIGTRAP blocked,
//! `pthread_sigmask` and `sigprocmask` are hooked to set masks without it
//! (`rt_trap_sigmask`), the handlers installed before the session lose it
//! from their masks, and the threads blocking it when the session starts
//! are unblocked ([`adopt`]).

use crate::inject::CodeRegion;
use crate::os::ptrace::Stopped;
use telco_abi::artifact::Artifact;
use telco_abi::region::{TrapArea, TRAP_AREA_HEADER, TRAP_CAP};

/// The handler installed in one process: its stub, our restorer, and
/// where `rt_trap_uninstall` and the trap area are.
#[derive(Debug, Clone, Copy)]
pub struct Hook {
    stub: u64,
    restorer: u64,
    uninstall: u64,
    area: u64,
    trap: u64,
}

/// Install `rt_trap` as SIGTRAP's handler in the stopped process, whose
/// trap area is at `area`; `region`: the region's address there (for the
/// hit counter). The stub and its sigreturn go into `code`. Err says why
/// not.
pub fn install(s: &mut Stopped, code: &mut CodeRegion, a: &Artifact, area: u64, region: u64) -> Result<Hook, String> {
    let symbol = |name: &str| a.symbols.iter().find(|s| s.name == name).map(|s| s.offset);
    let (Some(install), Some(handler), Some(uninstall)) =
        (symbol("rt_trap_install"), symbol("rt_trap"), symbol("rt_trap_uninstall"))
    else {
        return Err("the runtime library lacks its trap handler".into());
    };
    let stub_bytes = crate::arch::native::patch::signal_stub(area, code.at(handler));
    let sigreturn = crate::arch::native::patch::SIGRETURN;
    let stub = code.alloc(stub_bytes.len() + sigreturn.len()).ok_or("no room for the trap handler's stub")?;
    let restorer = stub + stub_bytes.len() as u64;
    let err = |e: crate::os::ptrace::PtraceError| e.to_string();
    s.write(stub, &stub_bytes).map_err(err)?;
    s.write(restorer, &sigreturn).map_err(err)?;
    s.write(area + core::mem::offset_of!(TrapArea, region) as u64, &region.to_le_bytes()).map_err(err)?;
    let tid = s.main_thread();
    match s.call(tid, code.at(install), &[area, stub, restorer], code.trap()).map_err(err)? {
        0 => Err("rt_sigaction refused SIGTRAP's handler".into()),
        _ => Ok(Hook { stub, restorer, uninstall: code.at(uninstall), area, trap: code.trap() }),
    }
}

/// Write the trap table of the process (every trap site and its
/// trampoline, in the process's table so far or new) into the spare
/// table, then name it. Err when there are more than the table holds.
pub fn write_table(s: &Stopped, area: u64, entries: &[(u64, u64)]) -> Result<(), String> {
    let mut e: Vec<(u64, u64)> = entries.to_vec();
    e.sort_unstable();
    e.dedup_by_key(|x| x.0);
    if e.len() > TRAP_CAP {
        return Err(format!("more than {TRAP_CAP} trap probes in one process"));
    }
    let err = |e: crate::os::ptrace::PtraceError| e.to_string();
    let active_at = area + core::mem::offset_of!(TrapArea, active) as u64;
    let active = s.read(active_at, 8).map_err(err)?;
    let spare = (u64::from_le_bytes(active[..8].try_into().unwrap_or_default()) & 1) ^ 1;
    let table: Vec<u8> =
        e.iter().flat_map(|&(site, tramp)| [site.to_le_bytes(), tramp.to_le_bytes()]).flatten().collect();
    let at = area + TRAP_AREA_HEADER as u64 + spare * (TRAP_CAP as u64) * 16;
    s.write(at, &table).map_err(err)?;
    let count_at = area + core::mem::offset_of!(TrapArea, count) as u64 + 8 * spare;
    s.write(count_at, &(e.len() as u64).to_le_bytes()).map_err(err)?;
    s.write(active_at, &spare.to_le_bytes()).map_err(err)
}

/// The threads of the stopped process that block SIGTRAP: unblocked (a
/// trap there would end the process). How many.
pub fn adopt(s: &Stopped) -> usize {
    let bit = 1u64 << (libc::SIGTRAP - 1);
    let tids: Vec<i32> = s.threads().collect();
    tids.into_iter()
        .filter(|&tid| s.sigmask(tid).is_ok_and(|m| m & bit != 0 && s.set_sigmask(tid, m & !bit).is_ok()))
        .count()
}

/// The end of a session, every thread of the process stopped, the traps
/// gone: SIGTRAP back to what the program set. Err when the program's
/// handler could not be put back (it is at its default action then).
pub fn uninstall(s: &mut Stopped, hook: &Hook) -> Result<(), String> {
    let tid = s.main_thread();
    match s.call(tid, hook.uninstall, &[hook.area, hook.stub, hook.restorer], hook.trap) {
        Ok(r) if r as i64 == -1 => {
            Err("the program's SIGTRAP handler could not be put back (its default action is back)".into())
        }
        _ => Ok(()),
    }
}

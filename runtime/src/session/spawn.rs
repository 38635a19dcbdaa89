//! A command started traced (`-c`) and run to its ELF entry point, by the
//! entry marker where one fits, else by a trap.

use super::*;

/// The process runs a 64-bit ELF program of telco-stap's own architecture.
pub(super) fn check_machine(pid: i32) -> Result<(), TargetError> {
    let exe = crate::os::proc::exe_head(pid, 20).map_err(|err| TargetError::Proc { pid, file: "exe", err })?;
    if exe.len() < 20 || &exe[..4] != b"\x7fELF" {
        return Err(TargetError::NotNative { pid, what: "not an ELF program".into() });
    }
    let machine = u16::from_le_bytes([exe[18], exe[19]]);
    if exe[4] != 2 || machine != arch::ELF_MACHINE {
        return Err(TargetError::NotNative { pid, what: format!("ELF class {}, machine {machine}", exe[4]) });
    }
    Ok(())
}

/// Start `argv` traced from its `exec` and run it to its entry point.
pub fn spawn(argv: &[String]) -> Result<Stopped, TargetError> {
    let cmd = argv.join(" ");
    let (pid, mut status) =
        crate::os::process::spawn_traced(argv).map_err(|err| TargetError::Spawn { cmd: cmd.clone(), err })?;
    let early = |status: Status| TargetError::EarlyExit { cmd: cmd.clone(), status: status.exit_code().unwrap_or(0) };
    if status.stop_signal().is_none() {
        return Err(early(status));
    }
    // A command run through `sh -c 'exec CMD'`: the program to probe is the
    // one the shell execs, which stops again with SIGTRAP.
    if argv.len() == 3 && argv[0] == "/bin/sh" && argv[2].starts_with("exec ") {
        let mut sig = 0;
        loop {
            let resumed = crate::os::ptrace::req::cont(pid, sig);
            status = match (resumed, crate::os::wait::wait(pid, true)) {
                (Ok(()), Ok(Some((_, st)))) => st,
                _ => return Err(early(status)),
            };
            match status.stop_signal() {
                None => return Err(early(status)),
                Some(libc::SIGTRAP) => break,
                Some(other) => sig = other,
            }
        }
    }
    let mut s = Stopped::adopt(pid)?;
    check_machine(pid)?;
    run_to_entry(&mut s)?;
    Ok(s)
}

/// Run a process stopped at its `exec` (one thread, ours) to its ELF entry
/// point (`AT_ENTRY`): the libraries are mapped, `main` has not run.
/// Through the entry marker where it can be placed (no trap for a dying
/// tracer to leave behind: [`entry_by_marker`]), else with an `int3`.
pub(super) fn run_to_entry(s: &mut Stopped) -> Result<(), TargetError> {
    let pid = s.pid();
    let auxv = crate::os::proc::auxv(pid).map_err(|err| TargetError::Proc { pid, file: "auxv", err })?;
    let entry = crate::os::proc::aux_value(&auxv, libc::AT_ENTRY)
        .ok_or_else(|| TargetError::Unsupported(format!("pid {pid} has no AT_ENTRY")))?;
    if entry_by_marker(s, entry)? {
        return Ok(());
    }
    let saved = s.read(entry, arch::TRAP_INSN.len())?;
    s.write(entry, &arch::TRAP_INSN)?;
    let r = s.run_to_trap(pid, entry);
    s.write(entry, &saved)?;
    Ok(r?)
}

/// [`run_to_entry`] without a trap: the entry's first instructions jump to
/// the entry marker (`arch::native::stub::entry_marker_head`, then their
/// relocated copy) in slack bytes of the program (`inject::slack`); the
/// process runs to the signal the marker sends itself (one stop, not two
/// at each system call of the dynamic loader), where the tracer puts every
/// byte back, the thread's signal mask, and the thread at its entry. If the tracer
/// dies meanwhile, the program goes through the copy and starts as usual.
/// False (nothing changed) where no slack or no relocatable entry is found.
pub(super) fn entry_by_marker(s: &mut Stopped, entry: u64) -> Result<bool, TargetError> {
    use crate::arch::native::stub;
    let pid = s.pid();
    let Some(at) = inject::slack(s) else { return Ok(false) };
    let code = s.read(entry, 64)?;
    let Ok(hook) = arch::patch::plan(&code, entry, 48) else { return Ok(false) };
    let start = (hook.patch_at - entry) as usize;
    // A jump within ±2 GiB moves the planned bytes; farther (slack in the
    // dynamic loader or the vDSO), an absolute jump moves the whole
    // instructions its 14 bytes cover.
    let (jmp, len): (Vec<u8>, usize) = match arch::patch::jump(hook.patch_at, at) {
        Some(j) => (j.to_vec(), hook.displaced),
        None => {
            let starts = arch::instruction_starts(code.get(start..).unwrap_or_default(), hook.patch_at);
            let jmp = arch::patch::jump_anywhere(at);
            match starts.into_iter().find(|&s| s >= hook.patch_at + jmp.len() as u64) {
                Some(end) => (jmp.to_vec(), (end - hook.patch_at) as usize),
                None => return Ok(false),
            }
        }
    };
    let Some(displaced) = code.get(start..start + len) else { return Ok(false) };
    let head = stub::entry_marker_head();
    let Ok(copy) = arch::patch::relocate(displaced, hook.patch_at, len, at + head.len() as u64) else {
        return Ok(false);
    };
    let marker: Vec<u8> = head.into_iter().chain(copy).collect();
    let slack_bytes = s.read(at, marker.len())?;
    let entry_bytes = s.read(hook.patch_at, jmp.len())?;
    s.write(at, &marker)?;
    s.write(hook.patch_at, &jmp)?;
    let after = at + stub::ENTRY_MARKER_AFTER;
    let result = (|| -> Result<(), TargetError> {
        let mut sig = 0;
        loop {
            crate::os::ptrace::req::cont(pid, sig)?;
            sig = 0;
            let status = match crate::os::wait::wait(pid, true) {
                Ok(Some((_, st))) => st,
                Ok(None) => continue,
                Err(err) => return Err(TargetError::Proc { pid, file: "wait", err }),
            };
            if status.ended() {
                return Err(TargetError::Unsupported(format!("pid {pid} ended before its entry point")));
            }
            if let Some(d) = status.delivering() {
                // The marker's own signal: taken back (never delivered).
                if d == stub::ENTRY_MARKER_SIGNAL && arch::pc(&s.regs(pid)?) == after {
                    return Ok(());
                }
                // Delivered with the next resume (the program is starting).
                sig = d;
            }
        }
    })();
    // The entry's bytes back, then the thread's signal mask and the thread
    // where the program starts, and only then the slack: a tracer killed
    // between any two of these steps leaves a thread that still runs on,
    // through the marker's copy (its pc is in the slack until the
    // registers are set) or from the entry. Putting the slack back first
    // left a killed tracer's command at a pc in bytes that were no longer
    // the marker (CI saw one die so).
    let restored = s.write(hook.patch_at, &entry_bytes);
    let moved = match (&result, restored) {
        (Ok(()), Ok(())) => (|| -> Result<(), TargetError> {
            let now = s.regs(pid)?;
            let (off, len) = stub::ENTRY_KEPT;
            let kept = s.read(arch::sp(&now).wrapping_add_signed(off), len)?;
            let (regs, mask) = stub::entry_regs(&now, &kept, hook.patch_at);
            s.set_sigmask(pid, mask)?;
            s.set_regs(pid, &regs)?;
            Ok(())
        })(),
        (_, restored) => restored.map_err(TargetError::from),
    };
    s.write(at, &slack_bytes)?;
    result?;
    moved?;
    Ok(true)
}

//! Trap probes in one process of the session (`crate::trap`): after its
//! probes are placed, the traps among them get the C library's signal
//! hooks, SIGTRAP's handler and their table before any is written; where
//! that cannot be done, they are refused, with why.

use super::*;

/// The C library's functions hooked while trap probes are placed: its
/// `sigaction` (`rt_trap_sigaction`), then what sets a thread's signal
/// mask (`rt_trap_sigmask`).
const SIGACTION: [&str; 2] = ["sigaction", "__sigaction"];
const SIGMASK: [&str; 3] = ["pthread_sigmask", "sigprocmask", "__sigprocmask"];

/// One of those functions in a process: address, size, its hook (an
/// offset in the blob) and whether it is `sigaction`.
#[derive(Clone, Copy, Debug)]
pub(super) struct SignalEntry {
    addr: u64,
    size: u64,
    hook: u32,
    action: bool,
}

/// Where those functions are in one process, looked up once it needs
/// them: before its probes are placed when a probe of the script's is on
/// one of them (its trampoline then calls the hook too:
/// `Hooker::always_hooks`), else only when a trap is placed.
pub(super) struct Signals<'a> {
    symbols: &'a dyn SymbolSource,
    maps: &'a [Mapping],
    exe: Option<&'a Path>,
    entries: Option<Vec<SignalEntry>>,
}

impl Signals<'_> {
    /// Those functions in the process (its C library, or the program
    /// itself when it is linked statically).
    fn entries(&mut self, hooker: &Hooker) -> &[SignalEntry] {
        let (symbols, maps, exe) = (self.symbols, self.maps, self.exe);
        self.entries.get_or_insert_with(|| find(hooker, symbols, maps, exe))
    }
}

fn find(hooker: &Hooker, symbols: &dyn SymbolSource, maps: &[Mapping], exe: Option<&Path>) -> Vec<SignalEntry> {
    let a = &hooker.artifact;
    let symbol = |name: &str| a.symbols.iter().find(|s| s.name == name).map(|s| s.offset);
    let mut out = Vec::new();
    if let (Some(act), Some(mask)) = (symbol("rt_trap_sigaction"), symbol("rt_trap_sigmask")) {
        let names: Vec<&str> = SIGACTION.iter().chain(SIGMASK.iter()).copied().collect();
        let pick = |p: &Path| p.to_string_lossy().contains("/libc.so") || exe.is_some_and(|e| e == p);
        for (_, found) in symbol_entries(symbols, maps, pick, &names) {
            for (addr, size, index) in found {
                if out.iter().any(|e: &SignalEntry| e.addr == addr) {
                    continue;
                }
                let action = index < SIGACTION.len();
                out.push(SignalEntry { addr, size, hook: if action { act } else { mask }, action });
            }
        }
    }
    out
}

/// Before the probes of the process mapping `maps` are placed: when a
/// probe of the script's is on one of those functions, where they are, in
/// `hooker.always_hooks` too. Returns the lookup, and the map's previous
/// contents (another process's: `arm_image` puts them back).
pub(super) fn prepare<'a>(
    hooker: &Hooker,
    symbols: &'a dyn SymbolSource,
    maps: &'a [Mapping],
    exe: Option<&'a Path>,
) -> (Signals<'a>, BTreeMap<u64, u32>) {
    let named = hooker.artifact.probes.iter().any(|p| match &p.attach {
        Attach::Function { symbol, .. } => {
            let base = symbol.split('@').next().unwrap_or_default();
            SIGACTION.contains(&base) || SIGMASK.contains(&base)
        }
        _ => false,
    });
    let entries = named.then(|| find(hooker, symbols, maps, exe));
    let hooks = entries.iter().flatten().map(|e| (e.addr, e.hook)).collect();
    let previous = std::mem::replace(&mut *hooker.always_hooks.borrow_mut(), hooks);
    (Signals { symbols, maps, exe, entries }, previous)
}

/// The trap sites among `plans` in the stopped process `s` (and those
/// already applied there, `applied`): the first time, the signal hooks
/// placed (`signals`, from [`prepare`]) and SIGTRAP's handler installed
/// (`hook`), the threads blocking SIGTRAP unblocked; then the process's
/// table written. Where that fails, the new traps are taken out of
/// `plans` and refused (`refused`, with why). `region`: the region's
/// address in the process.
#[allow(clippy::too_many_arguments)]
pub(super) fn place(
    hooker: &Hooker,
    s: &mut Stopped,
    signals: &mut Signals<'_>,
    plans: &mut Vec<Plan>,
    applied: &[Patch],
    codes: &mut Vec<CodeRegion>,
    refused: &mut Vec<String>,
    hook: &mut Option<crate::trap::Hook>,
    region: u64,
) -> Result<(), TargetError> {
    let pid = s.pid();
    let a = &hooker.artifact;
    let is_trap = |p: &[u8]| p == arch::TRAP_PROBE;
    let new: Vec<u64> = plans.iter().filter(|(_, _, p)| is_trap(p)).map(|p| p.0).collect();
    if new.is_empty() {
        return Ok(());
    }
    let refuse = |plans: &mut Vec<Plan>, refused: &mut Vec<String>, why: &str| {
        plans.retain(|(at, _, p)| !(is_trap(p) && new.contains(at)));
        for t in hooker.trapped.borrow().iter().filter(|t| t.pid == pid && new.contains(&t.site)) {
            refused.push(format!("{}: {}; nor can a trap be placed: {why}", t.name, t.why));
        }
    };
    if hook.is_none() {
        // The hooks, where a probe of the script's does not call them
        // already (its trampoline does: `Hooker::always_hooks`).
        let (mut action, mut mask) = (false, false);
        let mut why = Vec::new();
        let todo: Vec<SignalEntry> = signals
            .entries(hooker)
            .iter()
            .filter(|e| {
                let by_script = hooked(plans, e.addr);
                if by_script {
                    action |= e.action;
                    mask |= !e.action;
                }
                !by_script
            })
            .copied()
            .collect();
        if let Some(first) = todo.first() {
            let mut code = inject::code(s, a, first.addr, 1024 * todo.len() as u64 + 1024)?;
            hooker.own_blob(pid as u32, &code);
            for e in &todo {
                let t = Tramp::always(code.at(e.hook), hooker.traps_at());
                match hooker.function(s, &mut code, e.addr, e.size, None, t)? {
                    Ok(p) => {
                        action |= e.action;
                        mask |= !e.action;
                        plans.extend(p.into_plans());
                    }
                    Err(no) => why.push(format!("hooking the C library at {:#x}: {no}", e.addr)),
                }
            }
            codes.push(code);
        }
        if !(action && mask) {
            if why.is_empty() {
                why.push("no C library's sigaction and pthread_sigmask were found to hook".into());
            }
            let why = format!(
                "{} (they keep every thread from blocking SIGTRAP, which would end the process at a trap)",
                why.join("; ")
            );
            refuse(plans, refused, &why);
            return Ok(());
        }
        let Some(code) = codes.first_mut() else { return Ok(()) };
        match crate::trap::install(s, code, a, hooker.traps_at(), region) {
            Ok(h) => *hook = Some(h),
            Err(why) => {
                refuse(plans, refused, &why);
                return Ok(());
            }
        }
        crate::trap::adopt(s);
    }
    if let Err(why) = write_table(hooker, s, applied, &new) {
        refuse(plans, refused, &why);
    }
    Ok(())
}

/// The table of the stopped process: every trap site of it (applied, or
/// `new`), with its latest trampoline (a library loaded again where
/// another was); a library unloaded since has left `applied`, and its
/// sites the table.
pub(super) fn write_table(hooker: &Hooker, s: &Stopped, applied: &[Patch], new: &[u64]) -> Result<(), String> {
    let pid = s.pid();
    let is_trap = |p: &[u8]| p == arch::TRAP_PROBE;
    let live: std::collections::BTreeSet<u64> =
        applied.iter().filter(|p| is_trap(&p.patched)).map(|p| p.at).chain(new.iter().copied()).collect();
    let table: BTreeMap<u64, u64> = hooker
        .trapped
        .borrow()
        .iter()
        .filter(|t| t.pid == pid && live.contains(&t.site))
        .map(|t| (t.site, t.tramp))
        .collect();
    crate::trap::write_table(s, hooker.traps_at(), &table.into_iter().collect::<Vec<_>>())
}

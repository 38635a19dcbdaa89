//! Arming a stopped target: the region and thread slots injected, every
//! mapped module's probes placed (`crate::place`), the runtime's own hooks
//! (the loader's `r_brk`, the unwinder, `execve`), SDT semaphores raised,
//! the symbol table published, the crash handler installed.

use super::*;

/// The dynamic loader's `r_brk` (called around every dlopen), from the
/// program's `DT_DEBUG` entry; None for static programs.
pub(super) fn r_brk(s: &Stopped) -> Option<u64> {
    let pid = s.pid();
    let auxv = crate::os::proc::auxv(pid).ok()?;
    let aux = |t: u64| crate::os::proc::aux_value(&auxv, t);
    let (phdr, phnum) = (aux(libc::AT_PHDR)?, aux(libc::AT_PHNUM)?);
    let phdrs = s.read(phdr, 56 * phnum as usize).ok()?;
    let field = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
    let mut bias = None;
    let mut dynamic = None;
    for ph in phdrs.chunks_exact(56) {
        let kind = u32::from_le_bytes(ph[..4].try_into().unwrap_or([0; 4]));
        match kind {
            6 => bias = Some(phdr.wrapping_sub(field(ph, 16))), // PT_PHDR: p_vaddr
            2 => dynamic = Some((field(ph, 16), field(ph, 40))), // PT_DYNAMIC: p_vaddr, p_memsz
            _ => {}
        }
    }
    let (vaddr, size) = dynamic?;
    // The program's own word, and a dynamic section is a few hundred
    // bytes: read at most 64 KB of it.
    let dynamic = s.read(bias.unwrap_or(0).wrapping_add(vaddr), size.min(64 << 10) as usize).ok()?;
    let debug = dynamic.chunks_exact(16).find(|d| field(d, 0) == 21).map(|d| field(d, 8))?; // DT_DEBUG
    if debug == 0 {
        return None;
    }
    let r = s.read(debug.wrapping_add(16), 8).ok()?; // struct r_debug: r_version, r_map, r_brk
    Some(field(&r, 0)).filter(|&a| a != 0)
}

/// The unwinder's entry points that walk a stack, and where a C++ catch
/// block starts.
pub(super) const UNWINDERS: [&str; 4] =
    ["_Unwind_RaiseException", "_Unwind_ForcedUnwind", "_Unwind_Resume", "_Unwind_Resume_or_Rethrow"];

pub(super) const CATCH: &str = "__cxa_begin_catch";

/// The unwinder's entry points in the target ([`UNWINDERS`], [`CATCH`]):
/// run-time address, symbol size, and whether it is the catch. They live
/// in libgcc_s and the C++ runtime (or are linked into the program).
pub(super) fn unwinder_entries(source: &dyn SymbolSource, maps: &[Mapping], exe: &Path) -> ByFile<bool> {
    let candidate = |p: &Path| {
        let name = p.to_string_lossy();
        same_file(p, exe) || ["libgcc_s", "libstdc++", "libc++", "libunwind"].iter().any(|l| name.contains(l))
    };
    let names: Vec<&str> = UNWINDERS.iter().copied().chain([CATCH]).collect();
    symbol_entries(source, maps, candidate, &names)
        .into_iter()
        .map(|(m, found)| (m, found.into_iter().map(|(a, size, i)| (a, size, names[i] == CATCH)).collect()))
        .collect()
}

/// Inject the artifact into the stopped target and hook every function
/// entry and return probe. Probes in libraries not loaded yet wait: the
/// dynamic loader's `r_brk` is hooked, and they are placed when the library
/// appears (`Armed::poll`). Returns the region (for the tracer-side session)
/// and the armed target.
pub fn arm(
    mut s: Stopped,
    a: &Artifact,
    child: bool,
    symbols: std::rc::Rc<dyn SymbolSource>,
) -> Result<(Region, Armed), TargetError> {
    let pid = s.pid();
    check_machine(pid)?;
    // First of all, the stub every later system call and call goes
    // through: from here on, a tracer that dies at any instant leaves
    // every thread able to go on (`os::ptrace`, `arch::native::stub`).
    let stub = s.install_stub(inject::slack(&s))?;
    let execname = crate::os::proc::comm(pid).trim().to_string();
    // Its descriptors stay open until the begin probes ran: the other
    // processes of its user (`-p`: its workers) open the region through
    // them (`Armed::cover`).
    let injected = inject::region(&mut s, a, &execname, true)?;
    let threads_at = inject::threads(&mut s, a)?;
    let tid_off = tcb_tid_offset(&s).unwrap_or(0);
    {
        use telco_abi::region::Header;
        // In the region and its trusted mirror, from which handlers take them.
        injected.region.set_header_u64(core::mem::offset_of!(Header, threads_at), threads_at);
        injected.region.set_header_u32(core::mem::offset_of!(Header, tcb_tid_off), tid_off);
    }
    let maps = mappings(pid)?;
    let exe = crate::os::proc::exe_path(pid);
    let mut by_module: ByModule = BTreeMap::new();
    let mut runs = Program::runs(pid);
    for (i, p) in a.probes.iter().enumerate() {
        match &p.attach {
            Attach::Function { module, file_offset, only_exe, .. } => {
                if only_exe.as_ref().is_some_and(|only| !runs(only)) {
                    continue;
                }
                by_module.entry(module.clone()).or_default().entry(*file_offset).or_default().push(i);
            }
            Attach::Statement { module, file_offset, .. } => {
                by_module.entry(module.clone()).or_default().entry(*file_offset).or_default().push(i);
            }
            _ => {}
        }
    }
    let symbol = |name: &str| a.symbols.iter().find(|s| s.name == name).map(|s| s.offset);
    // (`Hooker::new` checks the trampolines' other helpers.)
    let Some(dlnotify) = symbol("rt_dlnotify") else {
        return Err(TargetError::Unsupported("the runtime library lacks a trampoline helper".into()));
    };
    // Return probes replace return addresses: before an exception walks a
    // stack, the unwinder's entry points put them back (`rt_unwind`), and
    // where a catch block starts, the calls still running get them again
    // (`rt_caught`).
    let returns = a.probes.iter().any(|p| matches!(p.attach, Attach::Function { ret: true, .. }));
    let unwinders = if returns { unwinder_entries(&*symbols, &maps, &exe) } else { Vec::new() };
    let (unwind, caught) = (symbol("rt_unwind"), symbol("rt_caught"));
    // rt_unwind and rt_caught read the saved registers and the thread's
    // slot: the whole context.
    let mut entry_hooks: BTreeMap<u64, (u32, bool)> = unwinders
        .iter()
        .flat_map(|(_, entries)| entries.iter())
        .filter_map(|&(addr, _, catch)| Some((addr, (if catch { caught? } else { unwind? }, true))))
        .collect();
    // Libraries not loaded yet: the loader's r_brk is hooked (rt_dlnotify),
    // by a probe of the script's there if it has one.
    let waits =
        by_module.iter().any(|(m, f)| f.keys().next().is_some_and(|&off| runtime_addr(&maps, m, off).is_none()));
    // And when the symbol table takes libraries loaded later.
    let late_syms = crate::symtab::LateSymbols::wanted(a);
    let brk = if waits || late_syms { r_brk(&s) } else { None };
    if let Some(b) = brk {
        entry_hooks.insert(b, (dlnotify, false));
    }
    let exec_notify = symbol("rt_execnotify")
        .filter(|_| !a.probes.iter().any(|p| matches!(p.attach, Attach::Function { itrace: true, .. })));
    if let Some(f) = exec_notify {
        entry_hooks.extend(exec_entries(&*symbols, &maps).into_iter().map(|addr| (addr, (f, false))));
    }
    let hooker = Hooker::new(a, injected.region_remote, threads_at, tid_off, entry_hooks, exec_notify)?;
    let (mut signals, _) = traps::prepare(&hooker, &*symbols, &maps, Some(&exe));
    let mut patches = Vec::new();
    let mut codes = Vec::new();
    let mut refused = Vec::new();
    let mut plans = Vec::new();
    let mut pending: ByModule = BTreeMap::new();
    for (module, functions) in by_module {
        let mapped = functions.keys().next().is_some_and(|&off| runtime_addr(&maps, &module, off).is_some());
        if !mapped {
            pending.insert(module, functions);
            continue;
        }
        let (code, p) = hooker.module(&mut s, &maps, &module, &functions, &mut refused)?;
        plans.extend(p);
        codes.extend(code);
    }
    // Probes placed with a trap: their handler, hooks and table.
    let mut trap_hook = None;
    let region_remote = injected.region_remote;
    traps::place(
        &hooker,
        &mut s,
        &mut signals,
        &mut plans,
        &[],
        &mut codes,
        &mut refused,
        &mut trap_hook,
        region_remote,
    )?;
    let mut warnings: Vec<String> = Vec::new();
    let mut dl_watch = None;
    if !pending.is_empty() && brk.is_none() {
        let names: Vec<String> = pending.keys().map(|m| m.display().to_string()).collect();
        return Err(TargetError::NotMapped { module: names.join(", "), pid });
    }
    if let Some(brk) = brk {
        // Wait for the libraries, or hear of them: hook the loader's
        // notification function (unless a probe of the script's there does
        // it already).
        if !hooked(&plans, brk) {
            let mut code = inject::code(&mut s, a, brk, 4096)?;
            hooker.own_blob(pid as u32, &code);
            let bytes = s.read(brk, 32)?;
            let size = patch::plan(&bytes, brk, 1).map(|_| 1).unwrap_or(16);
            let notify = code.at(hooker.dlnotify);
            // On every thread, one without a slot too (`Tramp::always`).
            match hooker.function(&mut s, &mut code, brk, size, None, Tramp::always(notify, hooker.region))? {
                Ok(p) => {
                    plans.extend(p.into_plans());
                    codes.push(code);
                }
                Err(why) if pending.is_empty() => warnings.push(format!(
                    "backtraces will not name libraries loaded later (hooking the loader's r_brk: {why})"
                )),
                Err(why) => {
                    return Err(TargetError::Unsupported(format!(
                        "cannot watch for libraries loaded later (hooking the loader's r_brk: {why})"
                    )))
                }
            }
        }
        // The tracer hears of a thread waiting in r_brk at once, not at its
        // next poll.
        let at = core::mem::offset_of!(telco_abi::region::Header, dl_gen);
        match crate::os::sys::Watch::start(injected.region.fd(), 4096.min(a.region_size as usize), at) {
            Ok(w) => dl_watch = Some(w),
            Err(e) => warnings.push(format!("libraries loaded later wait for the 10 ms poll (no watcher: {e})")),
        }
        if !pending.is_empty() {
            // SAFETY: the header is at offset 0 of the live region.
            unsafe { header_u32(&injected.region, core::mem::offset_of!(telco_abi::region::Header, dl_wait)) }
                .store(1, std::sync::atomic::Ordering::Release);
        }
    }
    if returns {
        for (_, entries) in unwinders {
            // A probe of the script's there calls the hook already.
            let entries: Vec<_> = entries.into_iter().filter(|&(addr, _, _)| !hooked(&plans, addr)).collect();
            if entries.is_empty() {
                continue;
            }
            // One code region per library for its entry points.
            let mut code = inject::code(&mut s, a, entries[0].0, 1024 * entries.len() as u64 + 1024)?;
            hooker.own_blob(s.pid() as u32, &code);
            for (addr, size, catch) in entries {
                let Some(f) = (if catch { caught } else { unwind }) else { continue };
                let handler = code.at(f);
                match hooker.function(&mut s, &mut code, addr, size, None, Tramp::call(handler))? {
                    Ok(p) => plans.extend(p.into_plans()),
                    Err(why) if catch => refused.push(format!(
                        "the C++ runtime's catch at {addr:#x} ({why}): functions with a return probe that catch an \
                     exception will not have it run"
                    )),
                    Err(why) => refused.push(format!(
                        "the unwinder at {addr:#x} ({why}): a C++ exception through a frame with a return probe would \
                     end the program"
                    )),
                }
            }
            codes.push(code);
        }
    }
    if plans.is_empty() && pending.is_empty() && !refused.is_empty() {
        return Err(TargetError::NothingPlaced(refused.join("; ")));
    }
    // Follow execs (not with `.itrace`, whose single-stepper attaches to
    // threads itself).
    let follow = match symbol("rt_execnotify") {
        Some(f) if !a.probes.iter().any(|p| matches!(p.attach, Attach::Function { itrace: true, .. })) => {
            let mut codes = Vec::new();
            hook_execs(&*symbols, &hooker, &mut s, a, &maps, f, &mut plans, &mut codes, &mut refused)?;
            Some(Follow {
                region_fd: injected.region.fd(),
                mirror_fd: injected.region.mirror_fd(),
                region_remote: injected.region_remote,
                region_size: a.region_size,
                threads_at,
                execnotify: f,
                waiting: Vec::new(),
                execed: Vec::new(),
                children: Vec::new(),
                said: Default::default(),
                vforked: Default::default(),
                same_pid_ns: crate::os::proc::same_pid_namespace(pid),
                rows_checked: std::time::Instant::now(),
                _codes: codes,
                holder: None,
                pruned: std::time::Instant::now(),
            })
        }
        _ => None,
    };
    apply(&mut s, plans, &mut patches, &hooker.relocs.borrow())?;
    let semaphores = raise_semaphores(&s, a, &maps, &[], &patches);
    // SAFETY: the mirror's own base: handlers read the symbol table there.
    unsafe { publish_symbols(injected.region.trusted(), s.pid(), a, &maps, &hooker.relocs.borrow()) };
    if codes.is_empty() {
        // Room for the crash handler's stub and the lifecycle calls.
        let near = arch::pc(&s.regs(s.main_thread())?);
        let code = inject::code(&mut s, a, near, 4096)?;
        hooker.own_blob(s.pid() as u32, &code);
        codes.push(code);
    }
    let crash =
        codes.first_mut().and_then(|code| crate::crash::install(&mut s, code, a, injected.region_remote, trap_hook));
    let region_ino = crate::os::proc::fd_inode(injected.region.fd());
    let enabled = unsafe_enabled_ptr(&injected.region);
    let header = injected.region.base() as *const u8;
    let mirror = injected.region.trusted();
    let armed = Armed {
        symbols,
        target: FirstProcess {
            pid,
            child,
            stopped: Some(s),
            exes: [(pid, Program::of(pid))].into_iter().collect(),
            exit_status: None,
            killed_by: None,
            service: None,
            named: Vec::new(),
            daemons: Vec::new(),
            daemons_checked: None,
            fds: injected.target_fds,
            system: None,
        },
        region: InTarget {
            enabled: Some(enabled),
            header,
            mirror,
            ino: region_ino,
            remote: injected.region_remote,
            fd: injected.region.fd(),
        },
        undo: Undo { patches, semaphores, crash, stub, _code: codes },
        hooker,
        libs: LateLibraries {
            pending,
            late: BTreeMap::new(),
            syms: Default::default(),
            syms_said: 0,
            watch: dl_watch,
            loads: None,
        },
        domain: Domain {
            creds: crate::os::creds::Credentials::of(pid),
            others: Vec::new(),
            handed: 0,
            cut_off: Vec::new(),
            checked: None,
            settling: Vec::new(),
        },
        itrace: Itracing::default(),
        follow,
        report: Report {
            warnings: refused.into_iter().map(|r| format!("cannot probe {r}")).chain(warnings).collect(),
            ..Default::default()
        },
        flights: Default::default(),
    };
    Ok((injected.region, armed))
}

/// Tell the symbol table (`Artifact::symtab_off`) where each of its modules
/// is loaded: the bias, then `mapped` (Release). Modules not mapped yet are
/// left for a later call (libraries loaded with dlopen). Also where the
/// trampolines' copies of first instructions are (`relocs`, all so far).
///
/// # Safety
/// `base` is the live region of `a`.
pub(super) unsafe fn publish_symbols(
    base: *mut u8,
    pid: i32,
    a: &Artifact,
    maps: &[Mapping],
    relocs: &[(u64, u32, u64, u32)],
) {
    use telco_abi::region::{SymReloc, SymTable, SymTableModule, SYM_MODULE_SIZE, SYM_RELOC_SIZE};
    if a.symtab_off == 0 {
        return;
    }
    let tab = base.add(a.symtab_off as usize);
    let field = |off: usize| std::sync::atomic::AtomicU32::from_ptr(tab.add(off).cast());
    // Where the entries go and how many fit: the artifact's word (the
    // region's copy is the target's to overwrite), within the region.
    let fixed = |off: usize| a.init_u32(a.symtab_off + off as u64).map(|v| v as usize);
    let (Some(cap), Some(at)) =
        (fixed(core::mem::offset_of!(SymTable, relocs_cap)), fixed(core::mem::offset_of!(SymTable, relocs)))
    else {
        return;
    };
    let room = (a.region_size as usize).saturating_sub(a.symtab_off as usize + at) / SYM_RELOC_SIZE;
    let n = relocs.len().min(cap).min(room);
    for (i, &(copy, copy_len, orig, orig_len)) in relocs.iter().enumerate().take(n) {
        let r = SymReloc { copy, orig, copy_len, orig_len };
        std::ptr::write_unaligned(tab.add(at + i * SYM_RELOC_SIZE).cast::<SymReloc>(), r);
    }
    // Release: a handler that sees the count sees the entries.
    field(core::mem::offset_of!(SymTable, nrelocs)).store(n as u32, std::sync::atomic::Ordering::Release);
    // The vDSO (pass 2's own image, the same in every process): where this
    // process maps it.
    let vdso = || {
        let maps = crate::os::proc::maps(pid).ok()?;
        maps.iter().find(|m| m.path.as_os_str() == "[vdso]").map(|m| m.start)
    };
    for (i, m) in a.symtab_modules.iter().enumerate() {
        let at = match m.path.as_os_str() == "[vdso]" {
            true => vdso().map(|v| v + m.anchor_offset),
            false => runtime_addr(maps, &m.path, m.anchor_offset),
        };
        let Some(at) = at else { continue };
        let md = base.add(a.symtab_off as usize + core::mem::size_of::<SymTable>() + i * SYM_MODULE_SIZE);
        std::sync::atomic::AtomicU64::from_ptr(md.add(core::mem::offset_of!(SymTableModule, bias)).cast())
            .store(at.wrapping_sub(m.anchor_addr), std::sync::atomic::Ordering::Relaxed);
        // Release: a handler that sees `mapped` sees the bias.
        std::sync::atomic::AtomicU32::from_ptr(md.add(core::mem::offset_of!(SymTableModule, mapped)).cast())
            .store(1, std::sync::atomic::Ordering::Release);
    }
}

/// Where the C library keeps a thread's id in its thread control block, as
/// an offset from the thread pointer (a u32 that the runtime library
/// sign-extends): the first 4-aligned word of the 4 KB after it (x86_64)
/// or before it (aarch64, `arch::TCB_WINDOW`) equal to the thread's id, the
/// same for every stopped thread (glibc on x86_64: 0x2d0; musl: 0x30). None when a thread has no
/// thread pointer yet (a static program before its C library set one up)
/// or no offset fits all of them; then `thread_slot` cannot tell a thread
/// from a later one with the same control block.
pub(super) fn tcb_tid_offset(s: &Stopped) -> Option<u32> {
    let mut found: Option<Vec<u32>> = None;
    for tid in s.threads() {
        let tls = arch::TLS_REGSET.and_then(|nt| s.regset(tid, nt, 8).ok());
        let tp = arch::thread_pointer(&s.regs(tid).ok()?, tls.as_deref());
        if tp == 0 {
            return None;
        }
        // The window: after the thread pointer (x86_64) or before it (aarch64).
        let from = tp.wrapping_add_signed(arch::TCB_WINDOW);
        let block = s.read(from, 4096).ok()?;
        let here: Vec<u32> = (0..block.len() / 4)
            .map(|i| arch::TCB_WINDOW + 4 * i as i64)
            .filter(|&o| {
                let i = (o - arch::TCB_WINDOW) as usize;
                o.unsigned_abs() >= 8
                    && u32::from_le_bytes([block[i], block[i + 1], block[i + 2], block[i + 3]]) == tid as u32
            })
            .map(|o| o as i32 as u32)
            .collect();
        found = Some(match found {
            None => here,
            Some(prev) => prev.into_iter().filter(|o| here.contains(o)).collect(),
        });
    }
    found?.first().copied()
}

/// An atomic view of a u32/u64 header field of a live region.
///
/// # Safety
/// `off` must be a field of the right type in the header of `r`.
pub(super) unsafe fn header_u32(r: &Region, off: usize) -> &std::sync::atomic::AtomicU32 {
    std::sync::atomic::AtomicU32::from_ptr(r.base().add(off).cast())
}

pub(super) fn unsafe_enabled_ptr(r: &Region) -> *const u32 {
    // SAFETY: the header is at offset 0 of the region, which outlives the
    // session (Armed is dropped before the Region).
    unsafe { r.base().add(core::mem::offset_of!(telco_abi::region::Header, enabled)).cast() }
}

/// Functions found in mapped files, by file: (run-time address, size, and
/// what the caller keeps with each).
pub(super) type ByFile<T> = Vec<(PathBuf, Vec<(u64, u64, T)>)>;

/// Run-time addresses and sizes of the function symbols `names` in the
/// mapped modules whose path `pick` accepts, by module (the symbols from
/// `source`, the file as the process maps it: `os::modfile`).
pub(super) fn symbol_entries(
    source: &dyn SymbolSource,
    maps: &[Mapping],
    pick: impl Fn(&Path) -> bool,
    names: &[&str],
) -> ByFile<usize> {
    let mut out = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for m in maps {
        if !pick(&m.path) || !m.is_file() || !seen.insert((m.dev, m.inode)) {
            continue;
        }
        let Some(file) = crate::os::modfile::mapped(m) else { continue };
        // Where the file's byte at `off` is in this process: the mapping
        // of this very file (device and inode) that holds it.
        let addr = |off: u64| {
            maps.iter()
                .find(|x| (x.dev, x.inode) == (m.dev, m.inode) && off >= x.offset && off - x.offset < x.end - x.start)
                .map(|x| x.start + (off - x.offset))
        };
        let mut found: Vec<(u64, u64, usize)> = Vec::new();
        for (off, size, index) in source.functions_named(&m.path, &file, names) {
            if let Some(a) = addr(off).filter(|a| !found.iter().any(|f| f.0 == *a)) {
                found.push((a, size, index));
            }
        }
        if !found.is_empty() {
            out.push((m.path.clone(), found));
        }
    }
    out
}

/// Raise the semaphores of the probed SDT markers whose modules are mapped
/// in the stopped process (a program runs a marker only while its
/// semaphore is non-zero), except those in `done`; returns their addresses
/// (to lower at the end).
pub(super) fn raise_semaphores(
    s: &Stopped,
    a: &Artifact,
    maps: &[Mapping],
    done: &[u64],
    placed: &[Patch],
) -> Vec<u64> {
    let mut raised: Vec<u64> = Vec::new();
    for p in &a.probes {
        let Attach::Statement { module, addr, file_offset, semaphore: Some(sem), .. } = &p.attach else { continue };
        let Some(pc) = runtime_addr(maps, module, *file_offset) else { continue };
        // Only for markers whose jump is in place.
        if !placed.iter().any(|q| q.at == pc) {
            continue;
        }
        let at = pc.wrapping_sub(*addr).wrapping_add(*sem);
        if done.contains(&at) || raised.contains(&at) {
            continue;
        }
        let Ok(b) = s.read(at, 2) else { continue };
        let v = u16::from_le_bytes([b[0], b[1]]).saturating_add(1);
        if s.write(at, &v.to_le_bytes()).is_ok() {
            raised.push(at);
        }
    }
    raised
}

impl Armed {
    /// Functions whose calls their trampolines time and record without
    /// calling a handler (`--chrome` spans, durations into statistics).
    pub fn timed_inline(&self) -> Vec<String> {
        self.hooker.timed.borrow().clone()
    }

    /// The probe points placed with a trap where no jump fits, in any
    /// process of the session so far, and why no jump fit (`-v`).
    pub fn trapped(&self) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> =
            self.hooker.trapped.borrow().iter().map(|t| (t.name.clone(), t.why.clone())).collect();
        v.sort();
        v.dedup_by(|a, b| a.0 == b.0);
        v
    }
}

//! Libraries loaded later: probes waiting for their module are placed when
//! the loader's `r_brk` hook says it is mapped; the symbol table takes
//! their symbols.

use super::*;
use crate::os::proc::FileId;

/// `-p`/`-c`: the watch on the opens of probed libraries that processes of
/// the session other than the first may load later (a backend's
/// extension, a worker's module): each such process is held at the open,
/// stepped until its loader maps the library, and gets that library's
/// probes (`Armed::arm_loading`). Other processes' opens are answered at
/// once.
pub(super) struct Loads {
    pub(super) watch: crate::os::fanotify::ExecWatch,
    readers: Readers,
}

/// Processes that opened a probed library and did not map it (they read
/// it): not stepped through their system calls again, so that one opening
/// it over and over cannot keep the session busy. By pid and start time
/// (pids are reused); bounded.
#[derive(Default)]
pub(super) struct Readers(HashMap<i32, u64>);

impl Readers {
    pub(super) fn has(&self, pid: i32) -> bool {
        self.0.get(&pid).is_some_and(|&t| crate::os::proc::start_time(pid) == Some(t))
    }

    pub(super) fn add(&mut self, pid: i32) {
        if self.0.len() >= 4096 {
            self.0.clear();
        }
        if let Some(t) = crate::os::proc::start_time(pid) {
            self.0.insert(pid, t);
        }
    }
}

/// A library armed once loaded: its probes, and where it was mapped.
pub(super) struct Late {
    pub(crate) functions: BTreeMap<u64, Vec<usize>>,
    /// The run-time address of its first probed function.
    pub(crate) at: u64,
    /// The address range of its mappings.
    pub(crate) range: (u64, u64),
}

impl Armed {
    /// `-p`/`-c`: watch the opens of `libraries` (the probed modules that
    /// are libraries) that the first process did not map at the start,
    /// for the session's other processes (`Loads`). Needs fanotify (root):
    /// without it, said once when there is such a library.
    pub fn watch_loads(&mut self, libraries: &[PathBuf]) {
        if self.follow.is_none() {
            return;
        }
        let later: Vec<&Path> =
            libraries.iter().filter(|l| self.libs.pending.contains_key(*l)).map(PathBuf::as_path).collect();
        if later.is_empty() {
            return;
        }
        match crate::os::fanotify::ExecWatch::new(&[], &later) {
            Ok(watch) => self.libs.loads = Some(Loads { watch, readers: Readers::default() }),
            Err(e) => {
                let names: Vec<String> = later.iter().map(|l| l.display().to_string()).collect();
                self.warn(format!(
                    "processes of the session other than pid {} that load {} later will run without its probes: \
                     watching the opens needs root (fanotify: {e})",
                    self.target.pid,
                    names.join(", ")
                ));
            }
        }
    }

    /// `-p`/`-c`: the opens of watched libraries since the last poll
    /// (`Loads`).
    pub(super) fn take_loads(&mut self) {
        let (first, inos) = (self.target.pid, self.session_inos());
        let Some(loads) = &mut self.libs.loads else { return };
        let readers = &loads.readers;
        let mut loading: Vec<(i32, i32, FileId)> = Vec::new();
        let mut not = Vec::new();
        loads.watch.take(&mut |e| {
            let Some(pid) = crate::os::proc::tgid(e.tid) else { return };
            if e.exec || pid == first || loading.iter().any(|&(_, p, _)| p == pid) {
                return;
            }
            if readers.has(pid) {
                return;
            }
            if crate::os::proc::maps_any(pid, "/memfd:telco-stap", &inos) {
                loading_push(&mut loading, &mut not, e.tid, pid, e.file);
            }
        });
        let mut readers = std::mem::take(&mut loads.readers);
        self.arm_loading(loading, &mut readers, &mut not);
        if let Some(l) = &mut self.libs.loads {
            l.readers = readers;
        }
        for w in not {
            self.warn_once(w);
        }
    }

    /// Processes of the session held at their open of a probed library
    /// (tid, pid, the library): each stepped until its loader maps it,
    /// then given its probes (`Armed::arm_library`); one that did not map
    /// it is remembered in `readers`.
    pub(super) fn arm_loading(
        &mut self,
        loading: Vec<(i32, i32, FileId)>,
        readers: &mut Readers,
        not: &mut Vec<String>,
    ) {
        for (tid, pid, file) in loading {
            if !until_mapped(tid, pid, readers, |id| id == file) {
                continue;
            }
            match self.arm_library(pid, tid, file) {
                Ok(()) | Err(TargetError::Ptrace(PtraceError::NoProcess(_))) => {}
                Err(e) => not.push(format!("cannot probe pid {pid} ({}): {e}", crate::os::proc::comm(pid).trim())),
            }
        }
    }

    /// Where the symbol table finds the symbols of libraries the target
    /// loads later (`symtab.rs`); those it maps already but pass 2 did not
    /// read (preloaded ones) are added now.
    pub fn symbols_from(&mut self, source: std::rc::Rc<dyn crate::symtab::SymbolSource>) {
        if crate::symtab::LateSymbols::wanted(&self.hooker.artifact) {
            self.libs.syms.set_source(source);
            self.publish_late_symbols();
            self.set_dl_wait();
        }
    }

    /// Threads in the loader's `r_brk` wait for the tracer while probes
    /// wait for a library or the symbol table takes new ones (the hook is
    /// there when either was wanted at arm time).
    pub(super) fn set_dl_wait(&self) {
        if self.region.header.is_null() {
            return;
        }
        let wait = !(self.libs.pending.is_empty() && self.libs.late.is_empty()) || self.libs.syms.active();
        let at = core::mem::offset_of!(telco_abi::region::Header, dl_wait);
        // SAFETY: the live region's header's dl_wait field.
        unsafe { std::sync::atomic::AtomicU32::from_ptr(self.region.header.add(at) as *mut u32) }
            .store(u32::from(wait), std::sync::atomic::Ordering::Release);
    }

    /// Add the libraries mapped now to the symbol table's late slots; say
    /// once which ones found no room.
    pub(super) fn publish_late_symbols(&mut self) {
        if !self.libs.syms.active() || self.region.header.is_null() {
            return;
        }
        let Ok(maps) = mappings(self.target.pid) else { return };
        // SAFETY: the header pointer is the live region's base, mapped for
        // the artifact's region_size.
        unsafe { self.libs.syms.publish(self.region.mirror, &self.hooker.artifact, &maps) };
        let said: Vec<String> = self.libs.syms.no_room[self.libs.syms_said..]
            .iter()
            .map(|p| format!("no room in the symbol table for {}: backtraces will not name it", p.display()))
            .collect();
        for w in said {
            self.warn(w);
        }
        self.libs.syms_said = self.libs.syms.no_room.len();
    }

    /// Stop the target and hook the pending libraries that are mapped now;
    /// libraries armed earlier and unloaded since wait again.
    pub(super) fn place_pending(&mut self) -> Result<(), TargetError> {
        let mut s = Stopped::attach(self.target.pid)?;
        s.use_stub(self.undo.stub.as_ref());
        let maps = mappings(self.target.pid)?;
        let gone: Vec<PathBuf> = self
            .libs
            .late
            .iter()
            .filter(|(m, l)| {
                let first = *l.functions.keys().next().unwrap_or(&0);
                runtime_addr(&maps, m, first) != Some(l.at)
            })
            .map(|(m, _)| m.clone())
            .collect();
        let unloaded = !gone.is_empty();
        for m in gone {
            if let Some(l) = self.libs.late.remove(&m) {
                // Its code went with it: nothing of ours to put back there.
                let (lo, hi) = l.range;
                self.undo.patches.retain(|p| !(lo..hi).contains(&p.at));
                self.undo.semaphores.retain(|a| !(lo..hi).contains(a));
                self.libs.pending.entry(m).or_default().extend(l.functions);
            }
        }
        // Its trap sites leave the table (a trap of the program's own
        // that comes there later is not taken for one of ours).
        if unloaded && self.undo.crash.is_some_and(|c| c.traps().is_some()) {
            if let Err(why) = traps::write_table(&self.hooker, &s, &self.undo.patches, &[]) {
                self.warn(format!("the trap table of pid {}: {why}", self.target.pid));
            }
        }
        let ready: Vec<PathBuf> = self
            .libs
            .pending
            .iter()
            .filter(|(m, f)| f.keys().next().is_some_and(|&off| runtime_addr(&maps, m, off).is_some()))
            .map(|(m, _)| m.clone())
            .collect();
        let mut refused = Vec::new();
        let mut plans = Vec::new();
        for m in ready {
            if let Some(functions) = self.libs.pending.remove(&m) {
                let (code, p) = self.hooker.module(&mut s, &maps, &m, &functions, &mut refused)?;
                plans.extend(p);
                self.undo._code.extend(code);
                let first = *functions.keys().next().unwrap_or(&0);
                if let (Some(at), Some(range)) = (runtime_addr(&maps, &m, first), mapped_range(&maps, &m)) {
                    self.libs.late.insert(m, Late { functions, at, range });
                }
            }
        }
        // Probes placed with a trap: their table (the handler and hooks
        // too, the first time).
        if plans.iter().any(|(_, _, p)| p.as_slice() == arch::TRAP_PROBE) {
            let exe = crate::os::proc::exe_path(self.target.pid);
            let (mut signals, _) = traps::prepare(&self.hooker, &*self.symbols, &maps, Some(&exe));
            let mut hook = self.undo.crash.and_then(|c| c.traps());
            let had = hook.is_some();
            let mut codes = Vec::new();
            traps::place(
                &self.hooker,
                &mut s,
                &mut signals,
                &mut plans,
                &self.undo.patches,
                &mut codes,
                &mut refused,
                &mut hook,
                self.region.remote,
            )?;
            self.undo._code.extend(codes);
            if let (Some(h), false) = (hook, had) {
                self.undo.crash = Some(crate::crash::Hook::with_traps(self.undo.crash, h, self.region.remote));
            }
        }
        apply(&mut s, plans, &mut self.undo.patches, &self.hooker.relocs.borrow())?;
        let raised = raise_semaphores(&s, &self.hooker.artifact, &maps, &self.undo.semaphores, &self.undo.patches);
        self.undo.semaphores.extend(raised);
        // SAFETY: the header pointer is the live region's base.
        unsafe {
            publish_symbols(self.region.mirror, s.pid(), &self.hooker.artifact, &maps, &self.hooker.relocs.borrow())
        };
        for r in refused {
            self.warn(format!("cannot probe {r}"));
        }
        self.set_dl_wait();
        s.detach()?;
        Ok(())
    }

    /// At the end: the probe points whose module no process of the
    /// session ever mapped (a library the program never loaded, another
    /// program's path), one warning per module naming them: they never
    /// fired, and nothing else would say why.
    pub(super) fn say_unmapped(&mut self) {
        let a = &self.hooker.artifact;
        let placed = self.hooker.placed_in.borrow();
        let mut never: BTreeMap<&Path, Vec<&str>> = BTreeMap::new();
        for p in &a.probes {
            let module = match &p.attach {
                // (A lifecycle probe's hook in the C library is ours.)
                Attach::Function { module, only_exe: None, .. } | Attach::Statement { module, .. } => module,
                _ => continue,
            };
            if !placed.contains(module) {
                let names = never.entry(module.as_path()).or_default();
                if !names.contains(&p.name.as_str()) {
                    names.push(&p.name);
                }
            }
        }
        let mut said = Vec::new();
        for (module, names) in never {
            let shown: Vec<&str> = names.iter().take(3).copied().collect();
            let more = if names.len() > 3 { format!(" and {} more", names.len() - 3) } else { String::new() };
            said.push(format!(
                "{}{more}: no traced process mapped {}, so {} never fired",
                shown.join(", "),
                module.display(),
                if names.len() == 1 { "it" } else { "they" }
            ));
        }
        drop(placed);
        for w in said {
            self.warn(w);
        }
    }
}

/// Hold thread `tid` of process `pid` of the session at its open of
/// probed library `file`, unless the process maps that library already.
pub(super) fn loading_push(
    loading: &mut Vec<(i32, i32, FileId)>,
    not: &mut Vec<String>,
    tid: i32,
    pid: i32,
    file: FileId,
) {
    if crate::os::proc::maps_executable(pid, |id| id == file) {
        return;
    }
    match crate::os::ptrace::seize_for_open(tid) {
        Ok(()) => loading.push((tid, pid, file)),
        Err(e) => not
            .push(format!("cannot probe pid {pid} ({}) as it loads a library: {e}", crate::os::proc::comm(pid).trim())),
    }
}

/// Run thread `tid` of process `pid`, held at its open of a probed
/// library, until its loader maps executable a file `wanted` accepts:
/// then held (true). One that does not (it read the file) is let go and
/// remembered in `readers`; one that ended is forgotten.
pub(super) fn until_mapped(tid: i32, pid: i32, readers: &mut Readers, wanted: impl Fn(FileId) -> bool) -> bool {
    let mut mapped = || crate::os::proc::maps_executable(pid, &wanted);
    // The loader's open, read, mmaps: a few calls.
    match crate::os::ptrace::run_until_mapped(tid, &mut mapped, 64, std::time::Duration::from_millis(500)) {
        crate::os::ptrace::MapWait::Mapped => true,
        crate::os::ptrace::MapWait::NotMapped => {
            readers.add(pid);
            false
        }
        crate::os::ptrace::MapWait::Gone => false,
    }
}

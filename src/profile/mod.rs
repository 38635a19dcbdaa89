//! The profile files (`--folded`, `--flamegraph`, `--speedscope`,
//! `--pprof`, and the samples in a `--perfetto` trace): every
//! `timer.profile` sample the runtime unwound (`telco_runtime::profile`),
//! kept as interned stacks per thread by [`Profile`] and handed, when the
//! session ends, to each format asked for ([`ProfileWriter`]), each frame
//! named by its module's symbols (demangled, as pass 2 reads them:
//! `telco_compiler::elf`).
//!
//! A frame no module holds is `[unknown]`; one in a module without a
//! symbol for it is `[module]`, so that its samples still add up under
//! one name; a sample taken in the kernel (a system call, a page fault)
//! has the kernel's frames on top, named from /proc/kallsyms with `_[k]`
//! as FlameGraph marks them (`[kernel]` where the kernel gives no call
//! chain or its symbols are hidden), and the return into a signal handler's trampoline is
//! `[signal handler called]` (as gdb shows it). Time in the probes' own
//! code (trampolines, handlers) is `[telco-stap]`, under the probed
//! function. Stacks are rooted at the thread's name, as perf's
//! `stackcollapse` roots them, so one file keeps threads apart.
//!
//! # A new profile format
//!
//! One file in this folder implementing [`ProfileWriter`] (say `ctf.rs`,
//! its `mod` line here, and a `pub const FLAG: &str = "--ctf"`): `write`
//! gets the whole profile with every frame named ([`Named`]: frames,
//! functions, stacks, samples, threads, modules, and the collapsed stacks)
//! and writes the file's bytes. One CLI flag (`--ctf FILE`, in
//! src/cli.rs), and one line registering it in the binary's
//! `outputs::profile_formats`: `(ctf::FLAG, &cli.ctf, Box::new(ctf::Ctf))`.
//! The check of its path before tracing, a `timer.profile` probe when the
//! command line asks for a profile without a script, creating the file,
//! and the end-of-session report then come with it.

pub mod flamegraph;
pub mod folded;
pub mod perfetto;
pub mod pprof;
pub mod push;
pub mod speedscope;

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use telco_compiler::elf::Module;
use telco_runtime::profile::{ModuleInfo, Sink, Stack, Summary};

/// Strings numbered in the order first seen (the string tables of the
/// pprof and Perfetto writers).
#[derive(Default)]
struct Interner {
    list: Vec<Vec<u8>>,
    ids: HashMap<Vec<u8>, usize>,
}

impl Interner {
    fn id(&mut self, s: &[u8]) -> usize {
        if let Some(&i) = self.ids.get(s) {
            return i;
        }
        self.list.push(s.to_vec());
        self.ids.insert(s.to_vec(), self.list.len() - 1);
        self.list.len() - 1
    }
}

/// A profile format: written once the session ends, from every sample.
pub trait ProfileWriter: Send {
    /// The whole profile, every frame named, into `out` (the file, or
    /// packets for the trace).
    fn write(&self, profile: &Named<'_>, out: &mut dyn Write) -> std::io::Result<()>;

    /// Whether its bytes are packets added to the `--perfetto` trace (the
    /// same flag's file) rather than a file of their own: then asking for
    /// the trace does not ask for a profile, and the packets wait in
    /// [`Files::perfetto`] for the trace writer to finish the file.
    fn into_trace(&self) -> bool {
        false
    }
}

/// The bytes of a format written into the trace ([`append_to_perfetto`]).
pub type Packets = Arc<Mutex<Vec<u8>>>;

/// Which files to write, and by which format each.
#[derive(Default)]
pub struct Files {
    list: Vec<File>,
    /// `--perfetto`: the samples' packets, to append to that file once the
    /// session's writer has finished it ([`append_to_perfetto`]). Set by
    /// [`Files::add`] for a format written into the trace.
    pub perfetto: Option<Packets>,
    /// `--off-cpu`: the profile is of wall-clock time (CPU samples and
    /// waits, weighted by nanoseconds).
    pub off_cpu: bool,
}

struct File {
    flag: &'static str,
    path: PathBuf,
    writer: Box<dyn ProfileWriter>,
}

/// Append the samples' packets (if any) to the `--perfetto` file at `path`
/// unless that takes it past `max_size` bytes: then the number of samples'
/// bytes left out.
pub fn append_to_perfetto(
    path: &Path,
    packets: &std::sync::Mutex<Vec<u8>>,
    max_size: u64,
) -> std::io::Result<Option<usize>> {
    let bytes = packets.lock().map(|b| b.clone()).unwrap_or_default();
    if bytes.is_empty() {
        return Ok(None);
    }
    let mut f = telco_runtime::outfile::open(path, telco_runtime::outfile::Mode::Append)?;
    if f.metadata()?.len() + bytes.len() as u64 > max_size {
        return Ok(Some(bytes.len()));
    }
    f.write_all(&bytes)?;
    f.flush()?;
    Ok(None)
}

impl Files {
    /// A format `writer` asked for by `flag`, if its file was named.
    pub fn add(&mut self, flag: &'static str, path: Option<&PathBuf>, writer: Box<dyn ProfileWriter>) {
        let Some(path) = path else { return };
        if writer.into_trace() {
            self.perfetto.get_or_insert_default();
        }
        self.list.push(File { flag, path: path.clone(), writer });
    }

    /// Whether a profile file of its own is asked for (not only samples
    /// in the trace).
    pub fn any(&self) -> bool {
        self.list.iter().any(|f| !f.writer.into_trace())
    }

    /// Each file as the report names it: "--folded out.txt".
    pub fn names(&self) -> Vec<String> {
        self.list.iter().map(|f| format!("{} {}", f.flag, f.path.display())).collect()
    }
}

/// A frame before it has a name: its module (or none) and the address to
/// look up (link-time in the module; the raw address otherwise).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Key {
    Module {
        module: u32,
        addr: u64,
    },
    Unknown {
        addr: u64,
    },
    Kernel,
    /// A kernel address of the kernel's call chain (named from
    /// /proc/kallsyms, `name_[k]` as FlameGraph marks kernel frames).
    KernelAt {
        addr: u64,
    },
    /// The signal trampoline: a handler's frames above, the interrupted
    /// code's below.
    Signal,
    /// Our own code in the target: the probes' trampolines and handlers.
    Own,
    /// The leaf of a stack of time off the CPU: what the thread waited
    /// in (an index into [`Profile::waits`]), `[off-cpu] futex`.
    Wait(u32),
}

/// One sample: its thread, its stack (leaf first), when and how much CPU
/// time it stands for.
#[derive(Debug, Clone, Copy)]
struct Taken {
    thread: u32,
    stack: u32,
    time: u64,
    period: u64,
}

#[derive(Debug, Clone)]
struct Thread {
    pid: u32,
    tid: u32,
    name: String,
}

/// The samples of a session, interned.
pub struct Profile {
    files: Files,
    keys: Vec<Key>,
    key_ids: HashMap<Key, u32>,
    /// Stacks as frame ids, leaf first.
    stacks: Vec<Vec<u32>>,
    stack_ids: HashMap<Vec<u32>, u32>,
    samples: Vec<Taken>,
    /// Past [`MAX_TIMED`] samples, the rest by thread and stack: (the
    /// last one's time, their weight), so a long session's profile stays
    /// bounded (the totals exact, the timeline the first samples').
    merged: HashMap<(u32, u32), (u64, u64, u64)>,
    threads: Vec<Thread>,
    thread_ids: HashMap<u32, u32>,
    modules: Vec<ModuleInfo>,
    started: Option<u64>,
    scratch: Vec<u32>,
    /// The waits' names (`futex`, `preempted`), interned.
    waits: Vec<String>,
    /// Whether a wait was sampled.
    waited: bool,
}

/// Samples kept one by one with their time (48 MB); later ones are
/// summed by thread and stack.
const MAX_TIMED: usize = 2_000_000;

/// Modules read to name frames, by path, build id and size, and the
/// kernel's symbols: a sink that names a profile every few seconds
/// (`push`) reads them once a session, not once a window.
/// Modules [`Symbols`] keeps, at most.
const MAX_MODULES: usize = 1024;

/// A module's path, build id and size.
type ModuleKey = (PathBuf, Vec<u8>, usize);

#[derive(Default)]
pub struct Symbols {
    modules: HashMap<ModuleKey, (Option<Module>, Option<Module>)>,
    /// The kernel's symbols (some 10 MB read and sorted), once asked for.
    kallsyms: Option<Vec<(u64, String)>>,
}

/// A profile ready to write: every frame named.
pub struct Named<'a> {
    /// Per frame id: function name, module path, address in the process.
    pub frames: Vec<NamedFrame>,
    pub stacks: &'a [Vec<u32>],
    pub samples: Vec<(u32, u32, u64, u64)>,
    pub threads: Vec<(u32, u32, String)>,
    pub modules: &'a [ModuleInfo],
    /// Per frame id: its function, an index into `functions` (frames at
    /// different addresses of one function share it).
    pub function_of: Vec<u32>,
    /// (name, module) of each function.
    pub functions: Vec<(String, Option<u32>)>,
    /// Ns from the first sample to the last.
    pub start: u64,
    pub end: u64,
    /// The first sample's time (CLOCK_MONOTONIC, ns).
    pub origin: u64,
    /// [`Named::folded`], made once for the formats that use it.
    pub folded: std::cell::OnceCell<Vec<String>>,
    /// A wall-clock profile (`--off-cpu`): samples of CPU time and waits
    /// alike weighted by their nanoseconds; a wait's stack starts with
    /// its [`NamedFrame::wait`] frame.
    pub wall: bool,
    /// The first `timed` samples are one each, at their own time; the
    /// rest (a long session's) are sums by thread and stack, at the last
    /// one's time: timelines (Perfetto's slices) draw only the first.
    pub timed: usize,
    /// How many samples each of those sums is.
    pub merged: Vec<u64>,
}

impl Named<'_> {
    /// Collapsed stacks: `thread;root;...;leaf count`, one line per
    /// distinct stack, sorted (FlameGraph's, inferno's and speedscope's
    /// input).
    pub fn folded(&self) -> &[String] {
        self.folded.get_or_init(|| folded::lines(self))
    }

    /// How many samples `samples[i]` stands for.
    pub fn count(&self, i: usize) -> u64 {
        i.checked_sub(self.timed).map_or(1, |k| self.merged.get(k).copied().unwrap_or(1))
    }

    /// Whether stack `stack` is of a wait (its leaf names it).
    pub fn waited(&self, stack: u32) -> bool {
        self.stacks[stack as usize].first().is_some_and(|&f| self.frames[f as usize].wait)
    }
}

#[derive(Debug, Clone)]
pub struct NamedFrame {
    pub name: String,
    /// Index into `modules`.
    pub module: Option<u32>,
    /// Link-time address in the module (or the raw address).
    pub addr: u64,
    /// The leaf of a wait's stack: `[off-cpu] NAME`.
    pub wait: bool,
}

impl Profile {
    pub fn new(files: Files) -> Profile {
        Profile {
            files,
            keys: Vec::new(),
            key_ids: HashMap::new(),
            stacks: Vec::new(),
            stack_ids: HashMap::new(),
            samples: Vec::new(),
            merged: HashMap::new(),
            threads: Vec::new(),
            thread_ids: HashMap::new(),
            modules: Vec::new(),
            started: None,
            scratch: Vec::new(),
            waits: Vec::new(),
            waited: false,
        }
    }

    fn key(&mut self, k: Key) -> u32 {
        if let Some(&i) = self.key_ids.get(&k) {
            return i;
        }
        self.keys.push(k);
        let i = (self.keys.len() - 1) as u32;
        self.key_ids.insert(k, i);
        i
    }

    /// Every frame named by its module's symbols.
    fn named(&self) -> Named<'_> {
        self.named_with(&mut Symbols::default())
    }

    /// [`Profile::named`], the modules' symbols read through `symbols`
    /// (kept from one profile to the next by a sink that names many).
    pub fn named_with(&self, symbols: &mut Symbols) -> Named<'_> {
        // A module, and its separate debug file's symbols when installed
        // (a stripped library's local functions).
        let Symbols { modules: loaded, kallsyms: kernel } = symbols;
        let base =
            |p: &Path| p.file_name().map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into_owned());
        let none = Vec::new();
        let kallsyms = match self.keys.iter().any(|k| matches!(k, Key::KernelAt { .. })) {
            true => &*kernel.get_or_insert_with(telco_runtime::os::kallsyms::read),
            false => &none,
        };
        let frames = self
            .keys
            .iter()
            .map(|k| match *k {
                Key::Kernel => NamedFrame { name: "[kernel]".into(), module: None, addr: 0, wait: false },
                Key::Wait(w) => {
                    let name = format!("[off-cpu] {}", self.waits[w as usize]);
                    NamedFrame { name, module: None, addr: 0, wait: true }
                }
                Key::KernelAt { addr } => {
                    let name = match telco_runtime::os::kallsyms::name_of(kallsyms, addr) {
                        Some(n) => format!("{n}_[k]"),
                        None => "[kernel]".into(),
                    };
                    NamedFrame { name, module: None, addr, wait: false }
                }
                Key::Signal => {
                    NamedFrame { name: "[signal handler called]".into(), module: None, addr: 0, wait: false }
                }
                Key::Own => NamedFrame { name: "[telco-stap]".into(), module: None, addr: 0, wait: false },
                Key::Unknown { addr } => NamedFrame { name: "[unknown]".into(), module: None, addr, wait: false },
                Key::Module { module, addr } => {
                    let info = &self.modules[module as usize];
                    let key = (info.path.clone(), info.build_id.clone(), info.image.as_ref().map_or(0, |i| i.len()));
                    // A program that loads ever new libraries (plugins,
                    // rebuilt ones) does not grow the cache for ever: past
                    // MAX_MODULES it starts again.
                    if loaded.len() >= MAX_MODULES && !loaded.contains_key(&key) {
                        loaded.clear();
                    }
                    let (m, debug) = loaded.entry(key).or_insert_with(|| {
                        // The module as the process mapped it (its path
                        // may name another file, or none: never read).
                        let image =
                            info.image.clone().map(|i| telco_compiler::elf::Image::given(std::sync::Arc::new(i)));
                        let debug = telco_compiler::dwarf::debug_file_by_build_id(&info.build_id)
                            .and_then(|p| Module::load_names(&p).ok());
                        (image.and_then(|i| Module::from_image(&info.path, i).ok()), debug)
                    });
                    // A name the symbols give over one made up for an
                    // unnamed function (`sub_…`, by its file offset, as
                    // `-l`, `usymname()` and backtraces name it); the
                    // module's name only where no function is known.
                    let function = |m: &Option<Module>| {
                        m.as_ref().and_then(|m| m.function_at(addr)).map(|f| f.display_name().to_string())
                    };
                    let named = |m: &Option<Module>| function(m).filter(|n| !n.starts_with("sub_"));
                    let name = named(m)
                        .or_else(|| named(debug))
                        .or_else(|| function(m))
                        .unwrap_or_else(|| format!("[{}]", base(&info.path)));
                    NamedFrame { name, module: Some(module), addr, wait: false }
                }
            })
            .collect();
        let frames: Vec<NamedFrame> = frames;
        let mut functions: Vec<(String, Option<u32>)> = Vec::new();
        let mut ids: HashMap<(String, Option<u32>), u32> = HashMap::new();
        let function_of = frames
            .iter()
            .map(|f| {
                let k = (f.name.clone(), f.module);
                *ids.entry(k.clone()).or_insert_with(|| {
                    functions.push(k);
                    (functions.len() - 1) as u32
                })
            })
            .collect();
        let start = self.started.unwrap_or(0);
        let end = self
            .samples
            .iter()
            .map(|s| s.time)
            .chain(self.merged.values().map(|m| m.0))
            .max()
            .unwrap_or(start)
            .max(start);
        Named {
            frames,
            function_of,
            functions,
            stacks: &self.stacks,
            samples: self
                .samples
                .iter()
                .map(|s| (s.thread, s.stack, s.time.saturating_sub(start), s.period))
                .chain(self.merged.iter().map(|(&(t, st), &(time, w, _))| (t, st, time.saturating_sub(start), w)))
                .collect(),
            timed: self.samples.len(),
            merged: self.merged.values().map(|m| m.2).collect(),
            threads: self.threads.iter().map(|t| (t.pid, t.tid, t.name.clone())).collect(),
            modules: &self.modules,
            start: 0,
            end: end - start,
            origin: start,
            folded: Default::default(),
            wall: self.files.off_cpu || self.waited,
        }
    }
}

impl Sink for Profile {
    fn sample(&mut self, s: &Stack<'_>) {
        if s.modules.len() > self.modules.len() {
            self.modules.extend_from_slice(&s.modules[self.modules.len()..]);
        }
        let mut ids = std::mem::take(&mut self.scratch);
        ids.clear();
        if let Some(w) = &s.off_cpu {
            // A wait: its name is the leaf (the kernel's frames, the
            // scheduler's, say less).
            // (Names are the kernel's system calls, or a number the
            // target's registers gave: 512 at most are kept, then a new
            // one is `other`.)
            let known = |n: &str| self.waits.iter().position(|x| x == n);
            let i = match known(w.name) {
                Some(i) => i,
                None if self.waits.len() < 512 => {
                    self.waits.push(w.name.to_string());
                    self.waits.len() - 1
                }
                None => known("other").unwrap_or_else(|| {
                    self.waits.push("other".into());
                    self.waits.len() - 1
                }),
            };
            self.waited = true;
            ids.push(self.key(Key::Wait(i as u32)));
        } else {
            if s.in_kernel && s.kernel.is_empty() {
                ids.push(self.key(Key::Kernel));
            }
            for &addr in s.kernel {
                ids.push(self.key(Key::KernelAt { addr }));
            }
        }
        for f in s.frames {
            let k = match f.module {
                _ if f.signal => Key::Signal,
                _ if f.own => Key::Own,
                Some(m) => Key::Module { module: m, addr: f.lookup.wrapping_sub(s.modules[m as usize].bias) },
                None => Key::Unknown { addr: f.lookup },
            };
            let id = self.key(k);
            ids.push(id);
        }
        let stack = match self.stack_ids.get(&ids) {
            Some(&i) => i,
            None => {
                self.stacks.push(ids.clone());
                let i = (self.stacks.len() - 1) as u32;
                self.stack_ids.insert(ids.clone(), i);
                i
            }
        };
        self.scratch = ids;
        let thread = match self.thread_ids.get(&s.tid) {
            Some(&t) => t,
            None => {
                let name = telco_runtime::os::proc::thread_comm(s.pid as i32, s.tid as i32)
                    .map(|c| String::from_utf8_lossy(&c).into_owned())
                    .unwrap_or_else(|| format!("{}", s.tid));
                self.threads.push(Thread { pid: s.pid, tid: s.tid, name });
                let t = (self.threads.len() - 1) as u32;
                self.thread_ids.insert(s.tid, t);
                t
            }
        };
        self.started = Some(self.started.map_or(s.time, |t| t.min(s.time)));
        if self.samples.len() < MAX_TIMED {
            self.samples.push(Taken { thread, stack, time: s.time, period: s.period });
        } else {
            let m = self.merged.entry((thread, stack)).or_default();
            *m = (m.0.max(s.time), m.1 + s.period, m.2 + 1);
        }
    }

    fn finish(&mut self, _summary: &Summary) -> std::io::Result<()> {
        let named = self.named();
        for f in &self.files.list {
            if f.writer.into_trace() {
                let mut packets = Vec::new();
                f.writer.write(&named, &mut packets)?;
                if let Some(Ok(mut slot)) = self.files.perfetto.as_ref().map(|s| s.lock()) {
                    *slot = packets;
                }
                continue;
            }
            let mut w = telco_runtime::outfile::create(&f.path)
                .map(std::io::BufWriter::new)
                .map_err(|e| std::io::Error::new(e.kind(), format!("cannot create `{}`: {e}", f.path.display())))?;
            f.writer.write(&named, &mut w)?;
            w.flush()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_named_in_the_order_given_and_samples_in_a_trace_ask_for_no_profile() {
        let mut files = Files::default();
        files.add(perfetto::FLAG, Some(&"t.pftrace".into()), Box::new(perfetto::Samples));
        files.add(pprof::FLAG, None, Box::new(pprof::Pprof));
        assert!(!files.any());
        assert!(files.perfetto.is_some());
        files.add(folded::FLAG, Some(&"out.folded".into()), Box::new(folded::Folded));
        assert!(files.any());
        assert_eq!(files.names(), ["--perfetto t.pftrace", "--folded out.folded"]);
    }
}

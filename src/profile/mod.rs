//! The profile files (`--folded`, `--flamegraph`, `--speedscope`,
//! `--pprof`): every `timer.profile` sample the runtime unwound
//! (`telco_runtime::profile`), kept as interned stacks per thread and
//! written out when the session ends, each frame named by its module's
//! symbols (demangled, as pass 2 reads them: `telco_compiler::elf`).
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

mod perfetto;
mod pprof;
mod speedscope;

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

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

/// Which files to write.
#[derive(Debug, Default, Clone)]
pub struct Files {
    pub folded: Option<PathBuf>,
    pub flamegraph: Option<PathBuf>,
    pub speedscope: Option<PathBuf>,
    pub pprof: Option<PathBuf>,
    /// `--perfetto`: the samples' packets, to append to that file once the
    /// session's writer has finished it ([`append_to_perfetto`]).
    pub perfetto: Option<std::sync::Arc<std::sync::Mutex<Vec<u8>>>>,
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
    pub fn any(&self) -> bool {
        self.folded.is_some() || self.flamegraph.is_some() || self.speedscope.is_some() || self.pprof.is_some()
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
    threads: Vec<Thread>,
    thread_ids: HashMap<u32, u32>,
    modules: Vec<ModuleInfo>,
    started: Option<u64>,
    scratch: Vec<u32>,
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
}

#[derive(Debug, Clone)]
pub struct NamedFrame {
    pub name: String,
    /// Index into `modules`.
    pub module: Option<u32>,
    /// Link-time address in the module (or the raw address).
    pub addr: u64,
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
            threads: Vec::new(),
            thread_ids: HashMap::new(),
            modules: Vec::new(),
            started: None,
            scratch: Vec::new(),
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
        // A module, and its separate debug file's symbols when installed
        // (a stripped library's local functions).
        let mut loaded: HashMap<u32, (Option<Module>, Option<Module>)> = HashMap::new();
        let base =
            |p: &Path| p.file_name().map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into_owned());
        let kallsyms =
            if self.keys.iter().any(|k| matches!(k, Key::KernelAt { .. })) { kallsyms() } else { Vec::new() };
        let frames = self
            .keys
            .iter()
            .map(|k| match *k {
                Key::Kernel => NamedFrame { name: "[kernel]".into(), module: None, addr: 0 },
                Key::KernelAt { addr } => {
                    let i = kallsyms.partition_point(|(a, _)| *a <= addr);
                    let name = match i.checked_sub(1).map(|i| &kallsyms[i].1) {
                        Some(n) => format!("{n}_[k]"),
                        None => "[kernel]".into(),
                    };
                    NamedFrame { name, module: None, addr }
                }
                Key::Signal => NamedFrame { name: "[signal handler called]".into(), module: None, addr: 0 },
                Key::Own => NamedFrame { name: "[telco-stap]".into(), module: None, addr: 0 },
                Key::Unknown { addr } => NamedFrame { name: "[unknown]".into(), module: None, addr },
                Key::Module { module, addr } => {
                    let info = &self.modules[module as usize];
                    let (m, debug) = loaded.entry(module).or_insert_with(|| {
                        // The module as the process mapped it (its path
                        // may name another file, or none: never read).
                        let image =
                            info.image.clone().map(|i| telco_compiler::elf::Image::given(std::sync::Arc::new(i)));
                        let debug = telco_compiler::dwarf::debug_file_by_build_id(&info.build_id)
                            .and_then(|p| Module::load_names(&p).ok());
                        (image.and_then(|i| Module::from_image(&info.path, i).ok()), debug)
                    });
                    // A name the symbols give over one made up for an
                    // unnamed function (`sub_…`).
                    let named = |m: &Option<Module>| {
                        m.as_ref()
                            .and_then(|m| m.function_at(addr))
                            .map(|f| f.display_name().to_string())
                            .filter(|n| !n.starts_with("sub_"))
                    };
                    let name = named(m).or_else(|| named(debug)).unwrap_or_else(|| format!("[{}]", base(&info.path)));
                    NamedFrame { name, module: Some(module), addr }
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
        let end = self.samples.iter().map(|s| s.time).max().unwrap_or(start).max(start);
        Named {
            frames,
            function_of,
            functions,
            stacks: &self.stacks,
            samples: self.samples.iter().map(|s| (s.thread, s.stack, s.time.saturating_sub(start), s.period)).collect(),
            threads: self.threads.iter().map(|t| (t.pid, t.tid, t.name.clone())).collect(),
            modules: &self.modules,
            start: 0,
            end: end - start,
            origin: start,
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
        if s.in_kernel && s.kernel.is_empty() {
            ids.push(self.key(Key::Kernel));
        }
        for &addr in s.kernel {
            ids.push(self.key(Key::KernelAt { addr }));
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
        self.samples.push(Taken { thread, stack, time: s.time, period: s.period });
    }

    fn finish(&mut self, _summary: &Summary) -> std::io::Result<()> {
        let named = self.named();
        let folded = folded_lines(&named);
        let create = |p: &Path| {
            telco_runtime::outfile::create(p)
                .map(std::io::BufWriter::new)
                .map_err(|e| std::io::Error::new(e.kind(), format!("cannot create `{}`: {e}", p.display())))
        };
        if let Some(p) = &self.files.folded {
            let mut w = create(p)?;
            for l in &folded {
                writeln!(w, "{l}")?;
            }
            w.flush()?;
        }
        if let Some(p) = &self.files.flamegraph {
            let mut w = create(p)?;
            let mut opt = inferno::flamegraph::Options::default();
            opt.title = "telco-stap CPU profile".into();
            opt.count_name = "samples".into();
            if folded.is_empty() {
                // inferno refuses an empty profile: an empty graph says
                // the same.
                writeln!(w, "<?xml version=\"1.0\" standalone=\"no\"?><svg xmlns=\"http://www.w3.org/2000/svg\" \
                             width=\"1200\" height=\"60\"><text x=\"10\" y=\"30\">telco-stap CPU profile: no samples</text></svg>")?;
            } else {
                inferno::flamegraph::from_lines(&mut opt, folded.iter().map(String::as_str), &mut w)?;
            }
            w.flush()?;
        }
        if let Some(p) = &self.files.speedscope {
            let mut w = create(p)?;
            speedscope::write(&named, &mut w)?;
            w.flush()?;
        }
        if let Some(p) = &self.files.pprof {
            let mut w = create(p)?;
            w.write_all(&pprof::encode(&named))?;
            w.flush()?;
        }
        if let Some(slot) = &self.files.perfetto {
            if let Ok(mut b) = slot.lock() {
                *b = perfetto::packets(&named);
            }
        }
        Ok(())
    }
}

/// Collapsed stacks: `thread;root;...;leaf count`, one line per distinct
/// stack, sorted (FlameGraph's, inferno's and speedscope's input).
fn folded_lines(n: &Named<'_>) -> Vec<String> {
    let mut by_stack: HashMap<(u32, u32), u64> = HashMap::new();
    for &(thread, stack, _, _) in &n.samples {
        *by_stack.entry((thread, stack)).or_default() += 1;
    }
    let clean = |s: &str| s.replace([';', '\n'], "_");
    // Stacks that differ only in addresses inside the same functions are
    // one line.
    let mut counts: std::collections::BTreeMap<String, u64> = Default::default();
    for ((thread, stack), c) in by_stack {
        let mut l = clean(&n.threads[thread as usize].2);
        for &f in n.stacks[stack as usize].iter().rev() {
            l.push(';');
            l.push_str(&clean(&n.functions[n.function_of[f as usize] as usize].0));
        }
        *counts.entry(l).or_default() += c;
    }
    counts.into_iter().map(|(l, c)| format!("{l} {c}")).collect()
}

/// The kernel's function symbols (/proc/kallsyms), by address; empty where
/// they cannot be read or are hidden (`kptr_restrict`: all zero).
fn kallsyms() -> Vec<(u64, String)> {
    let text = std::fs::read_to_string("/proc/kallsyms").unwrap_or_default();
    let mut v: Vec<(u64, String)> = text
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let addr = u64::from_str_radix(f.next()?, 16).ok()?;
            let kind = f.next()?;
            let name = f.next()?;
            (addr != 0 && matches!(kind, "t" | "T" | "w" | "W")).then(|| (addr, name.to_string()))
        })
        .collect();
    v.sort_unstable();
    v
}

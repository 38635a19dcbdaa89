//! The resolved, typed program: the output of pass 2 and the only input of
//! pass 3. Every name is resolved to an index, every expression has a type,
//! every probe point is a concrete location (a module and an address, or a
//! session event). Nothing here refers to the AST's tapsets or aliases.

pub mod builtins;
pub mod visit;

use crate::span::Span;
use std::path::PathBuf;
use telco_abi::artifact::Runs;

/// The name (`pp()`) of the probe `--chrome` adds.
const CHROME_PROBE: &str = "--chrome";

/// A value type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ty {
    Long,
    String,
    /// A statistic aggregate (`s <<< v`); only `@count(s)`-style operators read it.
    Stat,
    /// A histogram of a statistic (`@hist_log(s)`), only printable.
    Hist,
    /// No value (calls to `printf`, `exit`, functions without `return e`).
    Void,
}

impl Ty {
    pub fn name(self) -> &'static str {
        match self {
            Ty::Long => "long",
            Ty::String => "string",
            Ty::Stat => "statistic",
            Ty::Hist => "histogram",
            Ty::Void => "void",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GlobalId(pub u32);
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LocalId(pub u32);
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FuncId(pub u32);

#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    pub globals: Vec<Global>,
    pub functions: Vec<Function>,
    pub probes: Vec<Probe>,
    /// The source files the program came from (script first, then tapsets).
    pub files: Vec<String>,
    /// `--chrome-min-dur` in ns (with `add_chrome_spans`).
    pub span_min_ns: u64,
    /// `--flight-size` in bytes with `--flight-recorder` (0: without it):
    /// the calls `add_chrome_spans` records are kept in a history of that
    /// size in the region instead of being sent.
    pub flight_size: u64,
    /// The function symbols of every module a probe point is in, for
    /// `usymname()` and `print_ubacktrace()`; empty when the program uses
    /// neither.
    pub symbols: Vec<ModuleSymbols>,
    /// `--compatible` below 1.3: `%p` as SystemTap printed it then.
    pub legacy_pointer_format: bool,
    /// The modules `@var(..., "module")` names in script functions: where
    /// such a global is is found at run time from the probe that called the
    /// function (`Builtin::ModuleBias`, the probe table's module index).
    pub var_modules: Vec<std::path::PathBuf>,
}

/// A module's function symbols (pass 2 read them; pass 3 builds the
/// region's symbol table from them).
#[derive(Clone, Debug, PartialEq)]
pub struct ModuleSymbols {
    /// The module and where its first function is (how the runtime finds
    /// its load bias), as the artifact carries it.
    pub module: telco_abi::artifact::SymModule,
    /// (address, size, name), by address.
    pub functions: Vec<(u64, u64, String)>,
    /// `ubacktrace()`'s unwind rows from the module's CFI (address,
    /// compact rule), by address.
    pub unwind: Vec<(u64, u32)>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum GlobalKind {
    Scalar(Ty),
    /// An associative array: key types, value type (Long, String or Stat).
    Array {
        keys: Vec<Ty>,
        value: Ty,
        capacity: Option<u64>,
        /// Declared `name%`: full, it drops its oldest element for a new one.
        wrap: bool,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Global {
    pub name: String,
    pub kind: GlobalKind,
    pub init: Option<Const>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Const {
    Long(i64),
    String(Vec<u8>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Local {
    pub name: String,
    pub ty: Ty,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Function {
    pub name: String,
    /// The first `params` locals are the parameters, in order.
    pub params: u32,
    pub locals: Vec<Local>,
    pub ret: Ty,
    pub body: Vec<Stmt>,
    pub span: Span,
}

/// Where and when a probe handler runs.
#[derive(Clone, Debug, PartialEq)]
pub enum Point {
    Begin {
        order: i64,
    },
    End {
        order: i64,
    },
    Error {
        order: i64,
    },
    /// A periodic timer, in nanoseconds, with an optional random spread.
    Timer {
        period_ns: u64,
        randomize_ns: u64,
    },
    /// `timer.profile`: a sample of a target thread, taken every
    /// `period_ns` of that thread's CPU time; the handler runs in the
    /// tracer with the sampled thread's registers and unwound stack.
    Profile {
        period_ns: u64,
    },
    /// `process.blocked`: a target thread's wait (`--off-cpu`'s), once it
    /// ends; the handler runs in the tracer with the thread's registers
    /// and stack where it blocked, `$duration` and `$syscall`.
    Blocked,
    /// Entry (or return) of a function in a module.
    Function(FunctionPoint),
    /// An instruction at a module-relative address.
    Statement {
        module: PathBuf,
        addr: u64,
        function: Option<String>,
        /// Where the jump goes, proven safe by pass 2.
        site: Site,
        /// A C label's (`.function("F").label("L")`): its name, for `pp()`.
        label: Option<String>,
    },
    /// An SDT marker (`.mark("NAME")`).
    Mark(MarkPoint),
    ProcessBegin {
        module: Option<PathBuf>,
    },
    ProcessEnd {
        module: Option<PathBuf>,
    },
    ThreadBegin {
        module: Option<PathBuf>,
    },
    ThreadEnd {
        module: Option<PathBuf>,
    },
}

impl Point {
    /// Where its handler runs: the same as the artifact's
    /// `Attach::runs_in` for the attach pass 4 makes of it
    /// (`codegen::link`'s tests check that they agree).
    pub fn runs_in(&self) -> Runs {
        match self {
            Point::Begin { .. } | Point::End { .. } | Point::Error { .. } | Point::Timer { .. } => Runs::Tracer,
            Point::Profile { .. } | Point::Blocked => Runs::TracerSampling,
            Point::Function(_)
            | Point::Statement { .. }
            | Point::Mark(_)
            | Point::ProcessBegin { .. }
            | Point::ProcessEnd { .. }
            | Point::ThreadBegin { .. }
            | Point::ThreadEnd { .. } => Runs::Target,
        }
    }

    /// Whether its handler counts its actions against
    /// `MAXACTION_INTERRUPTIBLE` rather than `MAXACTION`: `begin`, `end`
    /// and `error` (`Attach::interruptible`).
    pub fn interruptible(&self) -> bool {
        match self {
            Point::Begin { .. } | Point::End { .. } | Point::Error { .. } => true,
            Point::Timer { .. }
            | Point::Profile { .. }
            | Point::Blocked
            | Point::Function(_)
            | Point::Statement { .. }
            | Point::Mark(_)
            | Point::ProcessBegin { .. }
            | Point::ProcessEnd { .. }
            | Point::ThreadBegin { .. }
            | Point::ThreadEnd { .. } => false,
        }
    }
}

/// A patch inside a function (`elf::Module::plan_site`): the
/// instruction's offset in the file and how many bytes the jump displaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Site {
    pub file_offset: u64,
    pub displaced: u32,
    /// Bytes of instructions before the site that take the jump instead
    /// (`sites::Patch::lead`).
    pub lead: u32,
    /// The lead is a call probed at its return (`sites::Patch::call`).
    pub call: bool,
    /// A short jump to the padding `pad` bytes on (`sites::Patch::pad`).
    pub pad: u32,
    /// No jump fits: a one-byte trap (`sites::Patch::trap`).
    pub trap: bool,
}

/// An SDT marker of a module.
#[derive(Clone, Debug, PartialEq)]
pub struct MarkPoint {
    pub module: PathBuf,
    pub provider: String,
    pub name: String,
    /// Link-time address of the marker.
    pub addr: u64,
    /// Link-time address of its semaphore, if it has one.
    pub semaphore: Option<u64>,
    /// Its arguments, and their specs as written (`$$parms`, messages).
    pub args: Vec<crate::arch::MarkArg>,
    pub args_text: String,
    /// The module is a PIE or a library: link-time addresses move by its
    /// load bias.
    pub pie: bool,
    pub function: Option<String>,
    pub site: Site,
}

#[derive(Clone, Debug, PartialEq)]
pub struct FunctionPoint {
    pub module: PathBuf,
    /// The symbol name (mangled), and its demangled form when it has one.
    pub symbol: String,
    pub demangled: Option<String>,
    /// Link-time address of the function (module-relative for PIE and
    /// shared libraries), its size and its offset in the file.
    pub addr: u64,
    pub size: u64,
    pub file_offset: u64,
    pub ret: bool,
    pub itrace: bool,
    /// Only in processes running this program (the C library functions
    /// that `process("P").begin` and friends hook: `elaborate::lifecycle`).
    pub only_exe: Option<PathBuf>,
    /// A function too short for the 5-byte jump: its hop (`elf::Module::short_hop`).
    pub hop: Option<telco_abi::artifact::Hop>,
    /// For a return probe: where the function saves its return address,
    /// from its entry's stack pointer (`elf::Module::return_address_saved`).
    pub ra_saved: Option<i32>,
    /// Something arrives inside the jump's bytes and no hop could be
    /// planned: a one-byte trap (`elf::Module::entry_trap`).
    pub trap: bool,
    /// A Go function's entry (`elf::Module::go_entry`).
    pub go: Option<telco_abi::artifact::GoSite>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Probe {
    /// The concrete points this handler is attached to.
    pub points: Vec<Point>,
    /// The probe point as the user wrote it, for `pp()` and messages.
    pub written: String,
    pub condition: Option<Expr>,
    pub locals: Vec<Local>,
    pub body: Vec<Stmt>,
    pub span: Span,
    /// Added by `elaborate::lifecycle`: a lifecycle probe's hook in the C
    /// library, with the lifecycle point's name (its `pp()`; no `--chrome`
    /// span of its own).
    pub lifecycle: Option<String>,
}

impl Program {
    /// `--folded`, `--flamegraph`, `--speedscope`, `--pprof` without a
    /// `timer.profile` probe in the script: sample at 99 Hz, as
    /// `probe timer.profile {}` would. False if the script has its own.
    pub fn add_profile(&mut self) -> bool {
        if self.probes.iter().any(|p| p.points.iter().any(|pt| matches!(pt, Point::Profile { .. }))) {
            return false;
        }
        self.probes.push(Probe {
            points: vec![Point::Profile { period_ns: 1_000_000_000 / 99 }],
            written: "timer.profile".into(),
            condition: None,
            locals: Vec::new(),
            body: Vec::new(),
            span: crate::span::Span::default(),
            lifecycle: None,
        });
        true
    }
}

impl Probe {
    /// The probe `Program::add_chrome_spans` added.
    pub fn is_chrome_span(&self) -> bool {
        self.written == CHROME_PROBE
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Stmt {
    pub kind: StmtKind,
    pub span: Span,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortBy {
    /// Sort by the key at this index.
    Key(usize),
    Value,
    /// An array of statistics by this aggregate of each element.
    Aggregate(AggOp),
}

#[derive(Clone, Debug, PartialEq)]
pub enum StmtKind {
    Expr(Expr),
    Block(Vec<Stmt>),
    If {
        cond: Expr,
        then: Box<Stmt>,
        els: Option<Box<Stmt>>,
    },
    While {
        cond: Expr,
        body: Box<Stmt>,
    },
    For {
        init: Option<Expr>,
        cond: Option<Expr>,
        step: Option<Expr>,
        body: Box<Stmt>,
    },
    Foreach {
        array: GlobalId,
        /// Locals bound to the keys, in key order.
        keys: Vec<LocalId>,
        value: Option<LocalId>,
        sort: Option<(SortBy, crate::ast::SortDir)>,
        limit: Option<Expr>,
        /// `a[k, *]`: the keys an element must have (None: any), by key.
        slice: Vec<Option<Expr>>,
        body: Box<Stmt>,
    },
    Break,
    Continue,
    Next,
    Return(Option<Expr>),
    DeleteGlobal(GlobalId),
    DeleteLocal(LocalId),
    DeleteElement {
        array: GlobalId,
        keys: Vec<Expr>,
    },
    Try {
        body: Vec<Stmt>,
        var: Option<LocalId>,
        handler: Vec<Stmt>,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    pub kind: ExprKind,
    pub ty: Ty,
    pub span: Span,
}

/// Context a probe handler can read from the target.
#[derive(Clone, Debug, PartialEq)]
pub enum Target {
    /// `$argN` (1-based).
    Arg(u32),
    /// `$return`.
    Return,
    /// A saved register (its index in the architecture's register file):
    /// where DWARF says a variable lives.
    Register(u32),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AggOp {
    Count,
    Sum,
    Min,
    Max,
    Avg,
    Variance,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    Long(i64),
    String(Vec<u8>),
    Local(LocalId),
    Global(GlobalId),
    Index {
        array: GlobalId,
        keys: Vec<Expr>,
    },
    Target(Target),
    Call {
        func: FuncId,
        args: Vec<Expr>,
    },
    Builtin {
        func: crate::program::builtins::Builtin,
        args: Vec<Expr>,
    },
    Unary {
        op: crate::ast::UnOp,
        operand: Box<Expr>,
    },
    Binary {
        op: crate::ast::BinOp,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
    },
    /// `target op= value`; the target is a Local, Global or Index.
    Assign {
        op: crate::ast::AssignOp,
        target: Box<Expr>,
        value: Box<Expr>,
    },
    IncDec {
        op: crate::ast::IncDec,
        prefix: bool,
        target: Box<Expr>,
    },
    Ternary {
        cond: Box<Expr>,
        then: Box<Expr>,
        els: Box<Expr>,
    },
    In {
        array: GlobalId,
        keys: Vec<Expr>,
    },
    /// `@entry(e)` in a return probe: `e` evaluated at function entry.
    Entry(Box<Expr>),
    /// `@count(s)` ...; the operand is a Global (Stat) or an Index into an
    /// array of Stat.
    Aggregate {
        op: AggOp,
        stat: Box<Expr>,
        /// `@variance(s, N)`: SystemTap's bit shift N (0 to 62): the
        /// running state keeps values shifted left by it.
        shift: u8,
    },
    HistLog {
        stat: Box<Expr>,
    },
    HistLinear {
        stat: Box<Expr>,
        lo: i64,
        hi: i64,
        step: i64,
    },
    /// `@hist_*(s)[i]`: the count in bucket `i` of the histogram (a
    /// `HistLog` or `HistLinear`).
    HistBucket {
        hist: Box<Expr>,
        index: Box<Expr>,
    },
}

/// How many buckets `@hist_linear(s, LO, HI, STEP)` has in the region
/// (3 to 2^20): pass 2's `foreach` over the histogram and pass 3's layout
/// of the statistic count them alike.
pub fn linear_buckets(lo: i64, hi: i64, step: i64) -> u32 {
    (((hi as i128 - lo as i128) / (step.max(1) as i128)) + 3).clamp(3, 1 << 20) as u32
}

impl Program {
    /// Whether `add_chrome_spans` added its probe.
    pub fn has_chrome_spans(&self) -> bool {
        self.probes.iter().any(Probe::is_chrome_span)
    }

    /// `--chrome`: time every call of every function that has an entry or
    /// return probe. One more probe, on the return of each of them, records
    /// the call as a span from its entry's clock (calls shorter than
    /// `min_ns` are left out in the target).
    ///
    /// `returns` says how the return of each is probed: Ok with the Go
    /// function's site for its returns (`elf::Module::go_entry`; None for
    /// any other function), or Err why it cannot be
    /// (`elf::Module::no_return_address`): such a function gets no span;
    /// its names and reasons are returned.
    pub fn add_chrome_spans(
        &mut self,
        min_ns: u64,
        returns: &mut dyn FnMut(&FunctionPoint) -> Result<Option<telco_abi::artifact::GoSite>, String>,
    ) -> Vec<(String, String)> {
        use crate::program::builtins::Builtin;
        let mut points: Vec<Point> = Vec::new();
        let mut refused = Vec::new();
        for p in self.probes.iter().filter(|p| p.lifecycle.is_none()) {
            for pt in &p.points {
                if let Point::Function(f) = pt {
                    if f.itrace {
                        continue;
                    }
                    let go = match returns(f) {
                        Ok(go) => go,
                        Err(why) => {
                            let name = f.demangled.clone().unwrap_or_else(|| f.symbol.clone());
                            if !refused.iter().any(|(n, _)| *n == name) {
                                refused.push((name, why));
                            }
                            continue;
                        }
                    };
                    let mut r = f.clone();
                    r.ret = true;
                    r.go = go;
                    let r = Point::Function(r);
                    if !points.contains(&r) {
                        points.push(r);
                    }
                }
            }
        }
        if points.is_empty() {
            return refused;
        }
        let span = crate::span::Span::default();
        let e = |kind, ty| Expr { kind, ty, span };
        // The clock in TSC ticks: what the trampolines read inline
        // (`ProbeEntry::span`); the tracer converts.
        let now = e(ExprKind::Builtin { func: Builtin::TraceTicks, args: Vec::new() }, Ty::Long);
        let call = e(
            ExprKind::Builtin { func: Builtin::TraceSpan, args: vec![e(ExprKind::Entry(Box::new(now)), Ty::Long)] },
            Ty::Void,
        );
        self.span_min_ns = min_ns;
        self.probes.push(Probe {
            points,
            written: CHROME_PROBE.into(),
            condition: None,
            locals: Vec::new(),
            body: vec![Stmt { kind: StmtKind::Expr(call), span }],
            span,
            lifecycle: None,
        });
        refused
    }
}

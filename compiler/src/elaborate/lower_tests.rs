//! Lowering probe bodies without resolving probe points: each script's
//! probes are lowered as bodies of one chosen [`BodyKind`], so what a
//! construct becomes in a return probe, a session probe or a sample is
//! checked directly. Lowered code is compared as a compact text form
//! ([`sexpr`], [`stmts`]): spans are left out there and checked on the
//! diagnostics instead.

use super::*;
use crate::diag::Severity;
use crate::span::SourceMap;

/// Everything `Lowerer::run` returns, with the script's text for spans.
struct Lowered {
    text: String,
    globals: Vec<Global>,
    functions: Vec<Function>,
    probes: Vec<LoweredProbe>,
    diags: Vec<Diagnostic>,
}

impl Lowered {
    /// The source text under a span.
    fn at(&self, span: Span) -> &str {
        &self.text[span.range()]
    }

    /// The errors, as `code: message @ text under the span`.
    fn errors(&self) -> Vec<String> {
        self.diags
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .map(|d| format!("{:?}: {} @ {}", d.code, d.message, self.at(d.span)))
            .collect()
    }

    /// The body of probe `i`, one statement a line.
    fn body(&self, i: usize) -> String {
        stmts(&self.probes[i].0)
    }

    /// The locals of probe `i` as `name:type`.
    fn locals(&self, i: usize) -> Vec<String> {
        self.probes[i].2.iter().map(|l| format!("{}:{}", l.name, l.ty.name())).collect()
    }

    fn no_errors(&self) {
        assert_eq!(self.errors(), Vec::<String>::new(), "unexpected errors");
    }
}

/// Lower every probe of `text` as a body of `kind` (no site, no marker),
/// with script arguments `args`.
fn lower_args(text: &str, kind: BodyKind, args: &[String], guru: bool) -> Lowered {
    let mut sources = SourceMap::new();
    let id = sources.add("t.tp", text);
    let (script, ds) = crate::parse(&sources, id, &crate::ParseConfig::default());
    assert!(ds.iter().all(|d| d.severity != Severity::Error), "the test script does not parse: {ds:?}");
    let mut diags = Vec::new();
    let mut l = Lowerer::new(args, guru);
    let mut bodies = Vec::new();
    for item in &script.items {
        match item {
            ast::Item::Global(g) => g.vars.iter().for_each(|v| l.declare_global(v, &mut diags)),
            ast::Item::Function(f) => {
                l.know_function(&f.name.name);
                l.declare_function(f, &mut diags);
            }
            ast::Item::Probe(p) => bodies.push(ProbeBody {
                blocks: vec![&p.body],
                condition: p.points[0].condition.as_deref().cloned(),
                kind,
                locals: Locals::default(),
                mark: None,
                site: None,
            }),
            ast::Item::Alias(_) => panic!("no aliases in these tests"),
        }
    }
    let (globals, functions, probes, more) = l.run(&mut bodies);
    diags.extend(more);
    Lowered { text: text.to_string(), globals, functions, probes, diags }
}

fn lower(text: &str, kind: BodyKind) -> Lowered {
    lower_args(text, kind, &[], false)
}

/// An expression as compact text: `(op args...)`, locals `lN`, globals
/// `gN`, registers by name. Types and spans are left out.
pub(in crate::elaborate) fn sexpr(e: &Expr) -> String {
    let list = |es: &[Expr]| es.iter().map(sexpr).collect::<Vec<_>>().join(" ");
    match &e.kind {
        ExprKind::Long(n) => n.to_string(),
        ExprKind::String(s) => format!("{:?}", String::from_utf8_lossy(s)),
        ExprKind::Local(l) => format!("l{}", l.0),
        ExprKind::Global(g) => format!("g{}", g.0),
        ExprKind::Index { array, keys } => format!("g{}[{}]", array.0, list(keys)),
        ExprKind::In { array, keys } => format!("(in g{}[{}])", array.0, list(keys)),
        ExprKind::Target(Target::Arg(n)) => format!("$arg{n}"),
        ExprKind::Target(Target::Return) => "$return".into(),
        ExprKind::Target(Target::Register(r)) => {
            format!("%{}", telco_abi::arch::native::REGISTERS.get(*r as usize).map_or("?", |r| r.name))
        }
        ExprKind::Call { func, args } if args.is_empty() => format!("(call f{})", func.0),
        ExprKind::Call { func, args } => format!("(call f{} {})", func.0, list(args)),
        ExprKind::Builtin { func, args } if args.is_empty() => format!("({})", func.name()),
        ExprKind::Builtin { func, args } => format!("({} {})", func.name(), list(args)),
        ExprKind::Unary { op, operand } => format!("({} {})", op.symbol(), sexpr(operand)),
        ExprKind::Binary { op, lhs, rhs } => format!("({} {} {})", op.symbol(), sexpr(lhs), sexpr(rhs)),
        ExprKind::Assign { op, target, value } => format!("({} {} {})", op.symbol(), sexpr(target), sexpr(value)),
        ExprKind::IncDec { op, prefix, target } => {
            let op = if *op == IncDec::Inc { "++" } else { "--" };
            if *prefix {
                format!("({op}. {})", sexpr(target))
            } else {
                format!("(.{op} {})", sexpr(target))
            }
        }
        ExprKind::Ternary { cond, then, els } => format!("(? {} {} {})", sexpr(cond), sexpr(then), sexpr(els)),
        ExprKind::Entry(x) => format!("(@entry {})", sexpr(x)),
        ExprKind::Aggregate { op, stat, shift } => format!("(@{op:?} {} {shift})", sexpr(stat)),
        ExprKind::HistLog { stat } => format!("(@hist_log {})", sexpr(stat)),
        ExprKind::HistLinear { stat, lo, hi, step } => format!("(@hist_linear {} {lo} {hi} {step})", sexpr(stat)),
        ExprKind::HistBucket { hist, index } => format!("(bucket {} {})", sexpr(hist), sexpr(index)),
    }
}

/// Statements, one a line, nested ones indented by two spaces.
fn stmts(ss: &[Stmt]) -> String {
    let mut out = String::new();
    for s in ss {
        stmt_into(s, 0, &mut out);
    }
    out
}

fn stmt_into(s: &Stmt, depth: usize, out: &mut String) {
    let pad = "  ".repeat(depth);
    let opt = |e: &Option<Expr>| e.as_ref().map_or("-".to_string(), sexpr);
    match &s.kind {
        StmtKind::Expr(e) => out.push_str(&format!("{pad}{}\n", sexpr(e))),
        StmtKind::Block(b) => {
            out.push_str(&format!("{pad}block\n"));
            b.iter().for_each(|s| stmt_into(s, depth + 1, out));
        }
        StmtKind::If { cond, then, els } => {
            out.push_str(&format!("{pad}if {}\n", sexpr(cond)));
            stmt_into(then, depth + 1, out);
            if let Some(e) = els {
                out.push_str(&format!("{pad}else\n"));
                stmt_into(e, depth + 1, out);
            }
        }
        StmtKind::While { cond, body } => {
            out.push_str(&format!("{pad}while {}\n", sexpr(cond)));
            stmt_into(body, depth + 1, out);
        }
        StmtKind::For { init, cond, step, body } => {
            out.push_str(&format!("{pad}for {}; {}; {}\n", opt(init), opt(cond), opt(step)));
            stmt_into(body, depth + 1, out);
        }
        StmtKind::Foreach { array, keys, value, sort, limit, slice, body } => {
            let keys: Vec<String> = keys.iter().map(|k| format!("l{}", k.0)).collect();
            let value = value.map_or("-".to_string(), |v| format!("l{}", v.0));
            let slice: Vec<String> = slice.iter().map(opt).collect();
            out.push_str(&format!(
                "{pad}foreach [{}] {value} in g{} sort {sort:?} limit {} slice [{}]\n",
                keys.join(" "),
                array.0,
                opt(limit),
                slice.join(" ")
            ));
            stmt_into(body, depth + 1, out);
        }
        StmtKind::Break => out.push_str(&format!("{pad}break\n")),
        StmtKind::Continue => out.push_str(&format!("{pad}continue\n")),
        StmtKind::Next => out.push_str(&format!("{pad}next\n")),
        StmtKind::Return(e) => out.push_str(&format!("{pad}return {}\n", opt(e))),
        StmtKind::DeleteGlobal(g) => out.push_str(&format!("{pad}delete g{}\n", g.0)),
        StmtKind::DeleteLocal(l) => out.push_str(&format!("{pad}delete l{}\n", l.0)),
        StmtKind::DeleteElement { array, keys } => {
            let keys: Vec<String> = keys.iter().map(sexpr).collect();
            out.push_str(&format!("{pad}delete g{}[{}]\n", array.0, keys.join(" ")));
        }
        StmtKind::Try { body, var, handler } => {
            out.push_str(&format!("{pad}try\n"));
            body.iter().for_each(|s| stmt_into(s, depth + 1, out));
            out.push_str(&format!("{pad}catch {}\n", var.map_or("-".to_string(), |v| format!("l{}", v.0))));
            handler.iter().for_each(|s| stmt_into(s, depth + 1, out));
        }
    }
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn body_kinds_say_which_context_a_body_has() {
    use BodyKind::*;
    // (kind, a function's arguments and scope, a target thread's registers)
    let table = [
        (Session, false, false),
        (FunctionEntry, true, true),
        (FunctionReturn, true, true),
        (Function, true, true),
        (Mark, false, true),
        (ProcessEnd, false, false),
        (Condition, false, false),
        (Sample, false, true),
    ];
    for (kind, at_function, registers) in table {
        assert_eq!((kind.at_function(), kind.has_registers()), (at_function, registers), "{kind:?}");
    }
}

#[test]
fn locals_and_globals_are_typed_by_their_uses() {
    let l = lower(
        "global count, names\nprobe begin { x = 1; s = \"a\"; count += x; names[s] = x; if (s in names) delete names[s] }",
        BodyKind::Session,
    );
    l.no_errors();
    assert_eq!(l.body(0), "(= l0 1)\n(= l1 \"a\")\n(+= g0 l0)\n(= g1[l1] l0)\nif (in g1[l1])\n  delete g1[l1]\n");
    assert_eq!(l.locals(0), strings(&["x:long", "s:string"]));
    let kinds: Vec<(&str, &GlobalKind)> = l.globals.iter().map(|g| (g.name.as_str(), &g.kind)).collect();
    assert_eq!(
        kinds,
        vec![
            ("count", &GlobalKind::Scalar(Ty::Long)),
            ("names", &GlobalKind::Array { keys: vec![Ty::String], value: Ty::Long, capacity: None, wrap: false }),
        ]
    );
}

#[test]
fn a_type_conflict_names_where_the_first_type_came_from() {
    let l = lower("probe begin { x = 1; x = \"s\" }", BodyKind::Session);
    assert_eq!(l.errors(), strings(&["TypeMismatch: type mismatch for `x`: string here, but long before @ \"s\""]));
    let d = &l.diags[0];
    assert_eq!(d.label, "used as a string");
    assert_eq!(d.secondary.len(), 1);
    assert_eq!(d.secondary[0].message, "long because of this");
    // The first `x`, whose assignment made it a long.
    assert_eq!(d.secondary[0].span.start, 14);
    assert_eq!(l.at(d.secondary[0].span), "x");
}

#[test]
fn an_untyped_variable_is_reported_once_at_its_first_use() {
    let l = lower("probe begin { print(y); print(y) }", BodyKind::Session);
    assert_eq!(l.errors(), strings(&["TypeUnknown: cannot tell the type of `y` @ y"]));
    assert_eq!(l.diags[0].span.start, 20, "the first `y`");
    assert_eq!(
        l.diags[0].help.as_deref(),
        Some("assign it a number or a string somewhere, or annotate it (`name:long`)")
    );
    // Taken as a long so lowering can go on.
    assert_eq!(l.locals(0), strings(&["y:long"]));
}

#[test]
fn functions_get_their_types_from_calls_and_returns() {
    let l = lower(
        "function f(a) { return a . \"!\" }\nfunction g() { print(\"x\") }\nprobe begin { s = f(\"x\"); g() }",
        BodyKind::Session,
    );
    l.no_errors();
    let sigs: Vec<String> = l
        .functions
        .iter()
        .map(|f| {
            let params: Vec<String> =
                f.locals[..f.params as usize].iter().map(|p| format!("{}:{}", p.name, p.ty.name())).collect();
            format!("{}({}):{}", f.name, params.join(", "), f.ret.name())
        })
        .collect();
    assert_eq!(sigs, strings(&["f(a:string):string", "g():void"]));
    assert_eq!(stmts(&l.functions[0].body), "return (. l0 \"!\")\n");
    assert_eq!(l.body(0), "(= l0 (call f0 \"x\"))\n(call f1)\n");
    assert_eq!(l.locals(0), strings(&["s:string"]));
}

#[test]
fn a_result_that_only_recursion_decides_is_an_error_on_the_function() {
    let l = lower("function r(n) { return r(n - 1) }\nprobe begin { r(1) }", BodyKind::Session);
    assert_eq!(l.errors(), strings(&["TypeUnknown: cannot tell the type of the result of `r` @ r"]));
    assert_eq!(l.diags[0].span.start, 9, "the function's name");
    assert_eq!(l.diags[0].help.as_deref(), Some("annotate it: `function r:long(...)` or `:string`"));
    // Taken as a long: no further errors at the uses.
    assert_eq!(l.functions[0].ret, Ty::Long);
}

#[test]
fn entry_is_kept_in_a_return_probe_and_refused_elsewhere() {
    let text = "probe begin { t = gettimeofday_ns() - @entry(gettimeofday_ns()) }";
    let ret = lower(text, BodyKind::FunctionReturn);
    ret.no_errors();
    assert_eq!(ret.body(0), "(= l0 (- (gettimeofday_ns) (@entry (gettimeofday_ns))))\n");
    assert_eq!(ret.locals(0), strings(&["t:long"]));

    let entry = lower(text, BodyKind::FunctionEntry);
    assert_eq!(entry.errors(), strings(&["Context: `@entry` outside a return probe @ @entry(gettimeofday_ns())"]));
    assert_eq!(entry.diags[0].help.as_deref(), Some("use `@entry(...)` in a `.return` probe"));
}

#[test]
fn arguments_and_return_value_by_probe_kind() {
    let text = "probe begin { a = $arg2; r = $return }";
    let ret = lower(text, BodyKind::FunctionReturn);
    ret.no_errors();
    // A return probe reads arguments as they were at entry.
    assert_eq!(ret.body(0), "(= l0 (@entry $arg2))\n(= l1 $return)\n");
    assert_eq!(ret.locals(0), strings(&["a:long", "r:long"]));

    let entry = lower(text, BodyKind::FunctionEntry);
    assert_eq!(entry.errors(), strings(&["Context: `$return` outside a return probe @ $return"]));
    assert_eq!(entry.diags[0].help.as_deref(), Some("probe `...function(\"name\").return` to read `$return`"));
    assert_eq!(entry.body(0), "(= l0 $arg2)\n(= l1 0)\n");
}

#[test]
fn context_variables_are_refused_where_they_do_not_exist() {
    let session = lower("probe begin { a = $arg2; b = $x; c = $status; d = $$name }", BodyKind::Session);
    assert_eq!(
        session.errors(),
        strings(&[
            "Context: `$arg2` outside a function probe @ $arg2",
            "Unsupported: target variable `$x` is not available @ $x",
            "Context: `$status` outside a `process.end` probe @ $status",
            "Context: `$$name` outside a marker probe @ $$name",
        ])
    );
    assert_eq!(session.diags[1].label, "begin, end, error and timer probes run in the tracer, in no target function");

    let entry = lower("probe begin { a = $arg0 }", BodyKind::FunctionEntry);
    assert_eq!(entry.errors(), strings(&["Context: `$arg0` does not exist @ $arg0"]));

    let sample = lower("probe begin { a = $x }", BodyKind::Sample);
    assert_eq!(sample.errors(), strings(&["Unsupported: target variable `$x` is not available @ $x"]));
    assert_eq!(sample.diags[0].help.as_deref(), Some("use `uaddr()`, `register(\"rsp\")` or `ubacktrace()`"));

    // `process.end`: what the process gave `_exit`, as an int.
    let end = lower("probe begin { s = $status }", BodyKind::ProcessEnd);
    end.no_errors();
    assert_eq!(end.body(0), "(= l0 (__int32 $arg1))\n");
}

#[test]
fn registers_exist_only_where_a_target_thread_stopped() {
    let session = lower("probe begin { a = uaddr(); b = register(\"rsp\") }", BodyKind::Session);
    assert_eq!(
        session.errors(),
        strings(&[
            "Context: `uaddr` outside a probe in the target @ uaddr()",
            "Context: `register` outside a probe in the target @ register(\"rsp\")",
        ])
    );
    let sample = lower("probe begin { a = uaddr(); b = returnval() }", BodyKind::Sample);
    assert_eq!(sample.errors(), strings(&["Context: `returnval` in a `timer.profile` probe @ returnval()"]));
    // A script function may be called from a probe in the target.
    let function = lower("function f() { return uaddr() }\nprobe begin { print(f()) }", BodyKind::Session);
    function.no_errors();
}

#[test]
fn a_probe_condition_reads_globals_only() {
    let l = lower("global on\nprobe begin if (on && x) { on = 1 }", BodyKind::Session);
    assert_eq!(l.errors(), strings(&["Undefined: `x` is not a global @ x"]));
    assert_eq!(l.diags[0].label, "probe conditions may use only globals");
    assert_eq!(l.probes[0].1.as_ref().map(sexpr).as_deref(), Some("(&& g0 0)"));
    assert_eq!(l.body(0), "(= g0 1)\n");
}

#[test]
fn script_arguments_as_numbers_and_strings() {
    let args = strings(&["0x10", "abc"]);
    let l =
        lower_args("global n = $1, s = @2\nprobe begin { a = $2; b = $3; c = $# }", BodyKind::Session, &args, false);
    assert_eq!(
        l.errors(),
        strings(&[
            "ScriptArgument: script argument $2 is `abc`, not a number @ $2",
            "ScriptArgument: script argument 3 is not given (2 arguments given) @ $3",
        ])
    );
    let inits: Vec<(&str, &GlobalKind, Option<&Const>)> =
        l.globals.iter().map(|g| (g.name.as_str(), &g.kind, g.init.as_ref())).collect();
    assert_eq!(
        inits,
        vec![
            ("n", &GlobalKind::Scalar(Ty::Long), Some(&Const::Long(16))),
            ("s", &GlobalKind::Scalar(Ty::String), Some(&Const::String(b"abc".to_vec()))),
        ]
    );
    assert_eq!(l.body(0), "(= l0 0)\n(= l1 0)\n(= l2 2)\n");
}

#[test]
fn arrays_and_scalars_do_not_mix() {
    let l = lower("global a, b\nprobe begin { a = 1; a[1] = 2; b[1] = 1; b[1, 2] = 2 }", BodyKind::Session);
    assert_eq!(
        l.errors(),
        strings(&[
            "ArrayMisuse: `a` is a scalar but is used as an array here @ a",
            "ArrayMisuse: `b` has 1 key but is used with 2 here @ b",
        ])
    );
    assert_eq!(l.diags[0].secondary.len(), 1);
    assert_eq!(l.diags[0].secondary[0].message, "a scalar because of this");
    assert_eq!(l.diags[0].secondary[0].span.start, 26, "the first `a`");
}

#[test]
fn statistics_are_read_through_aggregates_only() {
    let l = lower("global s\nprobe begin { s <<< 3; n = @count(s); x = s }", BodyKind::Session);
    assert_eq!(l.errors(), strings(&["TypeMismatch: `s` is a statistic and has no single value @ s"]));
    assert_eq!(l.diags[0].span.start, 51, "the last `s`");
    assert_eq!(l.globals[0].kind, GlobalKind::Scalar(Ty::Stat));
    assert_eq!(l.body(0), "(<<< g0 3)\n(= l0 (@Count g0 0))\n(= l1 g0)\n");
    assert_eq!(l.locals(0), strings(&["n:long", "x:long"]));
}

#[test]
fn defined_chooses_a_branch_at_compile_time() {
    let text = "probe begin { if (@defined($arg1)) a = $arg1 else a = 0 }";
    // In a session probe the branch naming `$arg1` is not lowered: no error.
    let session = lower(text, BodyKind::Session);
    session.no_errors();
    assert_eq!(session.body(0), "if 0\n  block\nelse\n  (= l0 0)\n");
    let entry = lower(text, BodyKind::FunctionEntry);
    entry.no_errors();
    assert_eq!(entry.body(0), "if 1\n  (= l0 $arg1)\n");
}

//! Target variables against the DWARF of a small C program built here with
//! `cc -g -O0` (into a scratch directory removed on drop; without `cc` the
//! tests fail and say why), plus the pure pieces (`extend`, `piece_at`,
//! locations) on made-up input. Expressions are compared as the compact
//! text of `lower`'s tests ([`sexpr`]); registers by name.
//!
//! Where a parameter arrives at a function's entry and where a result
//! comes back is the platform ABI's: those tests check System V on x86_64
//! and say in their output that they checked nothing on another host.

use super::*;
use crate::elaborate::lower::tests::sexpr;
use std::process::Command;
use telco_abi::arch::native as regs;

const PROGRAM: &str = r#"
struct small { int a; int b; };
struct pair { long x; long y; };
struct big { long v[3]; };
struct mixed { int i; float f; };
union u { int i; char c[4]; };
struct node { int val; struct node *next; unsigned flag : 3; unsigned mode : 5; short arr[4]; };

long g_counter = 5;

__attribute__((noinline)) long take(struct small s, struct pair p, struct big b, double d, int last)
{
    return s.a + p.y + b.v[2] + (long)d + last;
}

__attribute__((noinline)) long after_mixed(struct mixed m, int k)
{
    return m.i + k;
}

__attribute__((noinline)) struct pair ret_pair(long a)
{
    struct pair p = { a, a + 1 };
    return p;
}

__attribute__((noinline)) struct big ret_big(long a)
{
    struct big b = { { a, a, a } };
    return b;
}

__attribute__((noinline)) double ret_double(long a)
{
    return a / 2.0;
}

__attribute__((noinline)) int walk(struct node *n, union u x)
{
    int local = n->val + x.i;
    return local;
}

int main(void)
{
    struct small s = { 1, 2 };
    struct pair p = { 3, 4 };
    struct big b = { { 5, 6, 7 } };
    struct mixed m = { 8, 9.0f };
    struct node n = { 10, 0, 1, 2, { 0 } };
    union u x = { 11 };
    return (int)(take(s, p, b, 1.5, 12) + after_mixed(m, 13) + ret_pair(14).y + ret_big(15).v[1]
                 + (long)ret_double(16) + walk(&n, x) + g_counter);
}
"#;

/// The C program, built and loaded; its directory is removed on drop.
struct Fixture {
    dir: PathBuf,
    module: crate::elf::Module,
    debug: Arc<Debug>,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            eprintln!("note: could not remove {}: {e}", self.dir.display());
        }
    }
}

impl Fixture {
    fn build(test: &str) -> Fixture {
        let dir = std::env::temp_dir().join(format!("telco-dwarf-vars-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        if let Err(e) = std::fs::create_dir_all(&dir) {
            panic!("cannot create {}: {e}", dir.display());
        }
        let src = dir.join("prog.c");
        let exe = dir.join("prog");
        if let Err(e) = std::fs::write(&src, PROGRAM) {
            panic!("cannot write {}: {e}", src.display());
        }
        let out = match Command::new("cc").args(["-g", "-O0", "-o"]).arg(&exe).arg(&src).output() {
            Ok(out) => out,
            Err(e) => panic!(
                "cannot run `cc` ({e}): these tests build a C program with debugging information at test \
                 time; install a C compiler (gcc)"
            ),
        };
        assert!(out.status.success(), "cc failed:\n{}", String::from_utf8_lossy(&out.stderr));
        let module = crate::elf::Module::load(&exe).unwrap_or_else(|e| panic!("loading {}: {e}", exe.display()));
        let debug = match module.debug() {
            Ok(Some(d)) => d,
            other => panic!("no DWARF in {} built with -g: {other:?}", exe.display()),
        };
        Fixture { dir, module, debug }
    }

    /// An entry (or, with `ret`, a return) probe site on `function`, as
    /// `elaborate::debug_site` makes it.
    fn site(&self, function: &str, ret: bool) -> Site {
        let pc = self.address(function);
        Site {
            module: self.module.path.clone(),
            debug: Ok(self.debug.clone()),
            scope: self.debug.scope(pc),
            pc,
            at_entry: true,
            ret,
            pie: self.module.kind == crate::elf::ModuleKind::PositionIndependent,
            cfa: self.module.cfa_at(pc),
            others: Default::default(),
            bias_from: None,
        }
    }

    /// A symbol's link-time address, from the symbol table (not the DWARF).
    fn address(&self, symbol: &str) -> u64 {
        self.module.symbol_address(symbol).unwrap_or_else(|| panic!("no symbol `{symbol}`"))
    }
}

fn sp() -> Span {
    Span::default()
}

fn ident(name: &str) -> Ident {
    Ident { name: crate::ast::Name::new(name), span: sp() }
}

/// `name[2]` to ("name", Some(2)).
fn split_index(part: &str) -> (&str, Option<i64>) {
    match part.strip_suffix(']').and_then(|p| p.split_once('[')) {
        Some((name, i)) => (name, Some(i.parse().unwrap_or_else(|_| panic!("bad index in `{part}`")))),
        None => (part, None),
    }
}

/// A path such as `n->next->val` or `b->v[2]` (constant indices), from
/// `$name` or `$return`.
fn path(site: &Site, text: &str) -> Res<Val> {
    let mut parts = text.split("->");
    let (name, i) = split_index(parts.next().unwrap_or_default());
    let mut v = if name == "return" { site.return_value(sp())? } else { site.var(name, sp())? };
    if let Some(i) = i {
        v = site.index(v, num(i, sp()), sp())?;
    }
    for part in parts {
        let (m, i) = split_index(part);
        v = site.member(v, &ident(m))?;
        if let Some(i) = i {
            v = site.index(v, num(i, sp()), sp())?;
        }
    }
    Ok(v)
}

/// A place as text: `%reg`, `[address]`, `=value`, `pieces(8:%a 8:-)`.
fn place(p: &Place) -> String {
    match p {
        Place::Reg(r) => format!("%{}", reg_name(*r as usize)),
        Place::Mem(e) => format!("[{}]", sexpr(e)),
        Place::Value(e) => format!("={}", sexpr(e)),
        Place::Pieces(ps) => {
            let v: Vec<String> =
                ps.iter().map(|(n, p)| format!("{n}:{}", p.as_ref().map_or("-".to_string(), place))).collect();
            format!("pieces({})", v.join(" "))
        }
    }
}

fn reg_name(i: usize) -> &'static str {
    regs::REGISTERS[i].name
}

/// The `k`th integer argument register's name.
fn arg(k: usize) -> &'static str {
    reg_name(regs::ARG_REGS[k])
}

/// Where a path is, or its error as `code: message | label | help`.
fn place_of(site: &Site, text: &str) -> String {
    path(site, text).map(|v| place(&v.place)).unwrap_or_else(|d| error(&d))
}

/// What reading a path gives, or its error.
fn read_of(site: &Site, text: &str) -> String {
    path(site, text).and_then(|v| site.read(&v, sp())).map(|e| sexpr(&e)).unwrap_or_else(|d| error(&d))
}

fn error(d: &Diagnostic) -> String {
    let mut s = format!("{:?}: {}", d.code, d.message);
    if !d.label.is_empty() {
        s.push_str(&format!(" | {}", d.label));
    }
    if let Some(h) = &d.help {
        s.push_str(&format!(" | {h}"));
    }
    s
}

/// Whether the ABI tests run here: they check System V (x86_64).
fn system_v(test: &str) -> bool {
    if cfg!(target_arch = "x86_64") {
        return true;
    }
    println!("note: {test} checks the System V ABI (x86_64); this host is not x86_64, nothing checked");
    false
}

#[test]
fn extend_narrows_values_to_their_width_and_sign() {
    let v = || long(ExprKind::Target(Target::Register(regs::RETURN_REG as u32)), sp());
    let r = reg_name(regs::RETURN_REG);
    let cases = [
        (1, true, format!("(>> (<< %{r} 56) 56)")),
        (1, false, format!("(& %{r} 255)")),
        (2, true, format!("(__short %{r})")),
        (2, false, format!("(__ushort %{r})")),
        (3, false, format!("(& %{r} 16777215)")),
        (4, true, format!("(__int32 %{r})")),
        (4, false, format!("(__uint32 %{r})")),
        (8, true, format!("%{r}")),
        // A damaged enum's size 0 leaves the value whole.
        (0, true, format!("%{r}")),
    ];
    for (size, signed, want) in cases {
        assert_eq!(sexpr(&extend(v(), size, signed)), want, "size {size}, signed {signed}");
    }
}

#[test]
fn pieces_give_the_part_a_member_lies_in() {
    let a = regs::RETURN_REG as u32;
    let r = reg_name(a as usize);
    let mem = Place::Mem(num(0x1000, sp()));
    let two = || vec![(8, Some(Place::Reg(a))), (8, Some(mem.clone())), (8, None)];
    let at = |off, size| piece_at(two(), off, size).map_or("none".to_string(), |p| place(&p));
    // A whole register stays a place (writable); part of one is a value.
    assert_eq!(at(0, 8), format!("%{r}"));
    assert_eq!(at(0, 4), format!("=%{r}"));
    assert_eq!(at(4, 4), format!("=(>>> %{r} 32)"));
    assert_eq!(at(12, 2), "[4100]");
    // Across two pieces, in an optimised-out piece, past the end.
    assert_eq!(at(4, 8), "none");
    assert_eq!(at(16, 8), "none");
    assert_eq!(at(24, 1), "none");
}

#[test]
fn locations_without_debugging_information_or_call_frame_say_why() {
    let site = Site {
        module: PathBuf::from("/bin/prog"),
        debug: Err("/bin/prog has no DWARF and no separate debug file was found".into()),
        scope: Err("no DWARF".into()),
        pc: 0x1000,
        at_entry: false,
        ret: false,
        pie: false,
        cfa: None,
        others: Default::default(),
        bias_from: None,
    };
    assert_eq!(
        place_of(&site, "x"),
        "Unsupported: no debugging information for target variables \
         | /bin/prog has no DWARF and no separate debug file was found \
         | build the program with -g, or install its debug file (found by build-id under /usr/lib/debug)"
    );
    let at = |loc: &Location, site: &Site| site.place(loc, "x", sp()).map(|p| place(&p)).unwrap_or_else(|d| error(&d));
    assert_eq!(
        at(&Location::Unavailable, &site),
        "Context: target variable `$x` is not accessible at this address | optimised out here"
    );
    assert_eq!(
        at(&Location::Unsupported("it needs DW_OP_foo".into()), &site),
        "Context: target variable `$x` is not accessible at this address | it needs DW_OP_foo"
    );
    let frame = Location::Memory(Sym::Bin(crate::dwarf::expr::Op::Add, Box::new(Sym::Cfa), Box::new(Sym::Const(-20))));
    assert_eq!(
        at(&frame, &site),
        "Context: target variable `$x` is not accessible at this address | no call frame information at this address"
    );
    // With the CFA rule `sp + 16`, and a link-time address in a fixed executable.
    let site = Site { cfa: Some((crate::arch::native::DWARF_SP.0, 16)), ..site };
    assert_eq!(at(&frame, &site), format!("[(+ (+ %{} 16) -20)]", reg_name(regs::SP)));
    assert_eq!(at(&Location::Memory(Sym::Link(0x4010)), &site), "[16400]");
    assert_eq!(at(&Location::Value(Sym::Const(7)), &site), "=7");
}

#[test]
fn abi_classes_of_parameters_and_results() {
    let f = Fixture::build("abi-classes");
    let d: &Debug = &f.debug;
    let class = |function: &str, param: &str| {
        let s = d.scope(f.address(function)).unwrap_or_else(|e| panic!("{function}: {e}"));
        let p = s.params().find(|p| p.name == param).unwrap_or_else(|| panic!("{function} has no `{param}`"));
        abi_class(d, &types::resolve(d, p.ty).1, false, 0)
    };
    assert_eq!(class("take", "s"), AbiClass::Integer(1), "struct of two ints: one eightbyte");
    assert_eq!(class("take", "p"), AbiClass::Integer(2), "struct of two longs: two eightbytes");
    let big = if crate::arch::native::CALL_CONV.large_by_reference { AbiClass::Reference } else { AbiClass::Memory(3) };
    assert_eq!(class("take", "b"), big, "24 bytes: in memory (System V) or by reference (AAPCS64)");
    assert_eq!(class("take", "d"), AbiClass::Sse);
    assert_eq!(class("take", "last"), AbiClass::Integer(1));
    assert_eq!(class("after_mixed", "m"), AbiClass::Other, "an int and a float");
    assert_eq!(class("walk", "n"), AbiClass::Integer(1), "a pointer");
    assert_eq!(class("walk", "x"), AbiClass::Integer(1), "a union of an int and char[4]");
    // Rust passes a struct larger than two registers by reference.
    let s = d.scope(f.address("take")).unwrap_or_else(|e| panic!("{e}"));
    let b = s.params().find(|p| p.name == "b").map(|p| types::resolve(d, p.ty).1);
    assert_eq!(b.map(|t| abi_class(d, &t, true, 0)), Some(AbiClass::Reference));
}

#[test]
fn parameters_at_entry_are_read_where_the_abi_passes_them() {
    if !system_v("parameters_at_entry_are_read_where_the_abi_passes_them") {
        return;
    }
    let f = Fixture::build("entry-params");
    let take = f.site("take", false);
    assert_eq!(place_of(&take, "s"), "%rdi");
    assert_eq!(place_of(&take, "p"), "pieces(8:%rsi 8:%rdx)");
    // Above the return address.
    assert_eq!(place_of(&take, "b"), "[(+ %rsp 8)]");
    assert_eq!(
        place_of(&take, "d"),
        "Context: target variable `$d` is not accessible at this address | floating-point values are not read"
    );
    // After two structs in three registers, and a double in xmm0.
    assert_eq!(place_of(&take, "last"), "%rcx");
    // Members of a struct in registers: a part of one register, or a whole one.
    assert_eq!(read_of(&take, "s->b"), "(__int32 (>>> %rdi 32))");
    assert_eq!(read_of(&take, "p->y"), "%rdx");
    assert_eq!(read_of(&take, "b->v[2]"), "(user_int64_error (+ (+ %rsp 8) (* 2 8)))");

    // A struct mixing float and int: neither it nor what follows is located.
    let mixed = f.site("after_mixed", false);
    let not = "Context: target variable `$m` is not accessible at this address | at the function's entry, a \
               parameter of this kind (long double, vector, mixed struct) is not located";
    assert_eq!(place_of(&mixed, "m"), not);
    assert_eq!(
        place_of(&mixed, "k"),
        "Context: target variable `$k` is not accessible at this address | an earlier parameter is a long double, \
         a vector or a struct mixing floating point and integers; where this one is passed is not known at entry"
    );
}

#[test]
fn pointers_members_bitfields_and_arrays() {
    let f = Fixture::build("paths");
    let walk = f.site("walk", false);
    let n = arg(0);
    assert_eq!(place_of(&walk, "n"), format!("%{n}"));
    assert_eq!(read_of(&walk, "n->val"), format!("(__int32 (user_int32_error %{n}))"));
    assert_eq!(read_of(&walk, "n->next->val"), format!("(__int32 (user_int32_error (user_int64_error (+ %{n} 8))))"));
    // Bitfields: the storage byte, shifted up then down (unsigned).
    assert_eq!(read_of(&walk, "n->flag"), format!("(>>> (<< (user_uint8_error (+ %{n} 16)) 61) 61)"));
    assert_eq!(read_of(&walk, "n->mode"), format!("(>>> (<< (user_uint8_error (+ %{n} 16)) 56) 59)"));
    // An array reads as its address; an element as its type.
    assert_eq!(read_of(&walk, "n->arr"), format!("(+ %{n} 18)"));
    assert_eq!(read_of(&walk, "n->arr[3]"), format!("(__short (user_int16_error (+ (+ %{n} 18) (* 3 2))))"));
    // A union of four bytes in a register: a value, not memory.
    let x = arg(1);
    assert_eq!(read_of(&walk, "x->i"), format!("(__int32 %{x})"));
    assert_eq!(read_of(&walk, "x->c[1]"), "Unsupported: `$x->c` is not in memory");
}

#[test]
fn wrong_paths_say_what_the_value_is() {
    let f = Fixture::build("wrong-paths");
    let walk = f.site("walk", false);
    assert_eq!(
        read_of(&walk, "n->vall"),
        "Undefined: `struct node` has no member `vall` | no such member | did you mean `val`?"
    );
    assert_eq!(
        read_of(&walk, "n->zzz"),
        "Undefined: `struct node` has no member `zzz` | no such member | its members: val, next, flag, mode, arr"
    );
    assert_eq!(
        read_of(&walk, "n->val->x"),
        "TypeMismatch: `$n->val` has no member `x` | it is a `int`, not a struct, union or class"
    );
    assert_eq!(
        read_of(&walk, "n->val[1]"),
        "TypeMismatch: `$n->val` cannot be indexed | it is a `int`, not an array or a pointer"
    );
    assert_eq!(
        read_of(&walk, "x"),
        "TypeMismatch: `$x` is a `union u`, not a number | only integers, enums and pointers are values \
         | read a member (`$x->NAME`), or print it with `$x$`"
    );
    assert_eq!(
        read_of(&walk, "lcoal"),
        "Undefined: unable to find target variable `$lcoal` | not a parameter, local or global visible in `walk` \
         | did you mean `$local`?"
    );
    assert!(walk.defined("local"));
    assert!(walk.defined("g_counter"));
    assert!(!walk.defined("lcoal"));
    // A return probe sees parameters as at entry, and no locals.
    let ret = f.site("walk", true);
    assert_eq!(
        read_of(&ret, "local"),
        "Context: target variable `$local` is not accessible at this address \
         | a return probe sees parameters (as at entry), not locals"
    );
    assert_eq!(read_of(&ret, "n->val"), format!("(@entry (__int32 (user_int32_error (@entry %{}))))", arg(0)));
    assert_eq!(
        path(&ret, "n->arr")
            .and_then(|v| ret.index(v, long(ExprKind::Local(crate::program::LocalId(0)), sp()), sp()))
            .map(|v| place(&v.place))
            .unwrap_or_else(|d| error(&d)),
        "Context: `$n->arr` indexed by a computed value in a return probe \
         | a parameter's elements are read as they were at entry | index it with a constant, or read it in an entry probe"
    );
}

#[test]
fn globals_are_moved_by_the_load_bias() {
    let f = Fixture::build("globals");
    let (g, pc) = (f.address("g_counter") as i64, f.address("walk") as i64);
    let rip = reg_name(regs::PC);
    // A PIE or a library: the link-time address plus the load bias, the
    // saved pc less the site's link-time address.
    let walk = Site { pie: true, ..f.site("walk", false) };
    let want = format!("(user_int64_error (+ (+ %{rip} {}) {g}))", -pc);
    assert_eq!(read_of(&walk, "g_counter"), want);
    let at_var = walk.at_var("g_counter", None, sp()).and_then(|v| walk.read(&v, sp()));
    assert_eq!(at_var.map(|e| sexpr(&e)).unwrap_or_else(|d| error(&d)), want);
    // In a return probe, from the pc saved at entry.
    let ret = Site { pie: true, ..f.site("walk", true) };
    assert_eq!(read_of(&ret, "g_counter"), format!("(user_int64_error (+ (+ (@entry %{rip}) {}) {g}))", -pc));
    // A fixed-address executable: the link-time address as it is.
    let fixed = Site { pie: false, ..f.site("walk", false) };
    assert_eq!(read_of(&fixed, "g_counter"), format!("(user_int64_error {g})"));
    assert_eq!(
        walk.at_var("nope", None, sp()).map(|v| place(&v.place)).unwrap_or_else(|d| error(&d)),
        format!(
            "Undefined: unable to find global `nope` | no global variable by that name in {}",
            f.debug.path.display()
        )
    );
}

#[test]
fn return_values_by_the_abi() {
    if !system_v("return_values_by_the_abi") {
        return;
    }
    let f = Fixture::build("returns");
    assert_eq!(read_of(&f.site("walk", true), "return"), "(__int32 %rax)");
    assert_eq!(place_of(&f.site("ret_pair", true), "return"), "pieces(8:%rax 8:%rdx)");
    assert_eq!(read_of(&f.site("ret_pair", true), "return->y"), "%rdx");
    // In memory, at the address the caller passed and rax returns.
    assert_eq!(place_of(&f.site("ret_big", true), "return"), "[%rax]");
    assert_eq!(read_of(&f.site("ret_big", true), "return->v[1]"), "(user_int64_error (+ %rax (* 1 8)))");
    assert_eq!(
        place_of(&f.site("ret_double", true), "return"),
        "Context: target variable `$return` is not accessible at this address \
         | the function returns it in vector registers (floating point)"
    );
}

#[test]
fn writes_go_to_registers_memory_and_bitfields_only() {
    let f = Fixture::build("writes");
    let walk = f.site("walk", false);
    let n = arg(0);
    let write = |site: &Site, text: &str| {
        path(site, text)
            .and_then(|v| site.write(&v, num(3, sp()), sp()))
            .map(|e| sexpr(&e))
            .unwrap_or_else(|d| error(&d))
    };
    assert_eq!(write(&walk, "n"), format!("(= %{n} 3)"));
    assert_eq!(write(&walk, "n->val"), format!("(set_user_int32 %{n} 3)"));
    // Bits 3-7 of the byte: the others kept.
    assert_eq!(
        write(&walk, "n->mode"),
        format!("(set_user_int8 (+ %{n} 16) (| (& (user_uint8_error (+ %{n} 16)) -249) (& (<< 3 3) 248)))")
    );
    assert_eq!(
        write(&walk, "x->i"),
        "Context: `$x->i` cannot be written here \
         | the compiler computed it or split it; it is not stored in one place at this address"
    );
    assert_eq!(
        write(&f.site("walk", true), "n->val"),
        "Context: writing `$n->val` in a return probe | the function has used its parameters already \
         | write it in an entry probe (`.function(\"F\")`)"
    );
}

//! Target variables by name from DWARF (`$name`, `->`, `[i]`, `$var$`,
//! `$$parms`, `@var`, `@cast`, `@defined`, typed `$return`) and guru-mode
//! writes, on programs gcc and rustc build here at -O0 and -O2
//! (tests/programs/dwarfvars.c, dwarfcxx.cc, dwarfrust.rs): every value is
//! compared with what the program itself prints.

mod common;

use common::telco_run as telco;
use std::path::{Path, PathBuf};
use std::process::Command;

fn build(tag: &str, src: &str, flags: &[&str]) -> PathBuf {
    let dir = common::scratch(tag);
    let exe = dir.join(src.split('.').next().unwrap_or("prog"));
    let mut all = vec!["-g"];
    all.extend_from_slice(flags);
    common::compile(&[&common::repo().join("tests/programs").join(src)], &exe, &all);
    exe
}

fn cmd(exe: &Path) -> String {
    exe.display().to_string()
}

/// The program's own line starting with `prefix`.
fn own<'a>(out: &'a str, prefix: &str) -> &'a str {
    out.lines().find(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("no `{prefix}` line in:\n{out}"))
}

const READS: &str = r#"
probe process.function("area") {
    printf("P area x=%d y=%d scale=%d\n", $p->x, $p->y, $scale)
}
probe process.function("describe") {
    printf("P describe name=%s why=%s color=%d c1x=%d origin=%d,%d a=%d b=%d c=%d n=%d w2=%d tag=%s\n",
        user_string($s->name), user_string($why), $c, $s->corners[1]->x, $s->origin->x, $s.origin->y,
        $s->flags->a, $s->flags->b, $s->flags->c, $s->n->i, $s->weights[2], user_string($s->tag))
    printf("P globals counter=%d label=%s origin=%d,%d at=%d\n", $global_counter, user_string($global_label),
        $global_origin->x, @var("global_origin@dwarfvars.c")->y, @var("global_counter"))
}
probe process.function("area").return {
    printf("P return %d scale=%d entry=%d\n", $return, $scale, @entry($p->y))
}
probe process.function("guarded").return { printf("P guarded %d\n", $return) }
"#;

/// Parameters, members through pointers and structs, arrays of structs,
/// bitfields (signed and not), enums, unions, `char *` and char arrays,
/// globals and `@var`: the values the program prints, at -O0 and -O2,
/// in DWARF 5 (gcc's default: `.debug_loclists`, `.debug_rnglists`) and
/// DWARF 4 (`.debug_loc`, `.debug_ranges`).
#[test]
fn variables_by_name_are_the_programs_own_values() {
    for flags in [&["-O0"][..], &["-O2"], &["-O0", "-gdwarf-4"], &["-O2", "-gdwarf-4"]] {
        let opt = flags.join(" ");
        let exe = build(&format!("reads{}", flags.concat()), "dwarfvars.c", flags);
        let (out, err, code) = telco(&["-e", READS, "-c", &format!("{} 2", cmd(&exe))]);
        assert_eq!(code, Some(0), "{opt}: {err}");
        let area = own(&out, "area ");
        let ours = own(&out, "P area ");
        assert!(area.starts_with(&ours[2..]), "{opt}: {ours} vs {area}");
        let describe = own(&out, "describe ");
        let ours = own(&out, "P describe ");
        assert!(describe.starts_with(&ours[2..]), "{opt}: {ours}\nvs\n{describe}");
        // The first round sees the counter before main adds to it.
        assert!(out.contains("P globals counter=40 label=global label origin=7,-9 at=40\n"), "{opt}: {out}");
        assert!(out.contains("P globals counter=41 "), "{opt}: {out}");
        assert!(out.contains("P return 84 scale=2 entry=7\n"), "{opt}: {out}");
        assert!(out.contains("P guarded 42\n"), "{opt}: {out}");
        assert_eq!(out.matches("P area ").count(), 2, "{opt}: {out}");
    }
}

/// Structs passed by value (a small one in registers, a large one on the
/// stack, parameters after them), at the function's entry where -O0 code
/// has not yet stored them (the calling convention says where they are)
/// and at -O2 (location lists).
#[test]
fn structs_passed_by_value() {
    let script = r#"probe process.function("by_value") {
    printf("P by_value a=%d,%d k=%d big.w3=%d tail=%d\n", $a->x, $a.y, $k, $big->weights[3], $tail)
    println("Q ", $a$, " ", user_string($big->name))
}"#;
    for opt in ["-O0", "-O2"] {
        let exe = build(&format!("byvalue{opt}"), "dwarfvars.c", &[opt]);
        let (out, err, code) = telco(&["-e", script, "-c", &cmd(&exe)]);
        assert_eq!(code, Some(0), "{opt}: {err}");
        assert_eq!(own(&out, "by_value "), &own(&out, "P by_value ")[2..], "{opt}: {out}");
        assert!(out.contains("Q {.x=6, .y=7} triangle\n"), "{opt}: {out}");
    }
}

/// Structs returned in memory (`$return` is then their address) and in
/// registers; multi-dimensional arrays; `@defined` choosing a branch at
/// compile time; `++` on a member with -g.
#[test]
fn returns_arrays_and_defined() {
    let script = r#"
probe process.function("make_big").return { printf("P big %d %d %d\n", $return->a, $return->b, $return->c) }
probe process.function("make_pair").return { printf("P pair %d %d %s\n", $return->lo, $return->hi, $return$) }
probe process.function("area") {
    printf("P grid %d %d %d %s\n", @var("grid")[1][2], $grid[1][0], $grid[0][1], $grid$)
    printf("P defined %d %d\n", @defined($nope) ? $nope : 99, @defined($p->y) ? $p->y : -1)
    if (!@defined($nope->x)) println("P not defined")
    $p->x++
}
"#;
    for opt in ["-O0", "-O2"] {
        let exe = build(&format!("returns{opt}"), "dwarfvars.c", &[opt]);
        let (out, err, code) = telco(&["-g", "-e", script, "-c", &cmd(&exe)]);
        assert_eq!(code, Some(0), "{opt}: {err}");
        assert!(out.contains("P big 11 22 33\n") && out.contains("make_big a=11 b=22 c=33\n"), "{opt}: {out}");
        assert!(out.contains("P pair -2 3 {.lo=-2, .hi=3}\n"), "{opt}: {out}");
        assert!(out.contains("P grid 6 4 2 [[1, 2, 3], [4, 5, 6]]\n"), "{opt}: {out}");
        assert!(out.contains("P defined 99 7\n") && out.contains("P not defined\n"), "{opt}: {out}");
        assert!(out.contains("area x=7 y=7 scale=2 result=98\n"), "{opt}: {out}");
    }
}

/// `@cast(p, "type", "module")` with another module's types (libc's, from
/// libc6-dbg); `@var` of another module's global is refused, located (its
/// load address is not known in the probe); an unknown module is said.
#[test]
fn cast_to_another_modules_type() {
    let exe = build("castlibc", "dwarfvars.c", &["-O2"]);
    let script = "probe process.function(\"area\") { printf(\"P %d\\n\", @cast($p, \"struct timespec\", \"libc.so.6\")->tv_sec) }";
    let (out, err, code) = telco(&["-e", script, "-c", &cmd(&exe)]);
    assert_eq!(code, Some(0), "{err}");
    // The point {6, 7} read as a timespec: tv_sec is its 8 bytes.
    assert!(out.contains(&format!("P {}\n", (7i64 << 32) | 6)), "{out}");
    let (_, err, code) = telco(&[
        "-e",
        "probe process.function(\"area\") { println(@var(\"__libc_single_threaded\", \"libc.so.6\")) }",
        "-c",
        &cmd(&exe),
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("of another module") && err.contains("<input>:1:42"), "{err}");
    let (_, err, code) = telco(&[
        "-e",
        "probe process.function(\"area\") { println(@cast($p, \"struct x\", \"libnope.so\")->a) }",
        "-c",
        &cmd(&exe),
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("no module of the target is called `libnope.so`"), "{err}");
}

/// The C library's own variables by name, from its separate debug file
/// (Debian's libc6-dbg, found by build-id under /usr/lib/debug): malloc's
/// `bytes` at entry of an -O2 library, as the program passes it.
#[test]
fn libc_parameters_from_its_debug_file() {
    let dir = common::scratch("libc");
    let exe = common::compile_text(
        &dir,
        "mallocs",
        "#include <stdio.h>\n#include <stdlib.h>\nint main(void) { void *p = malloc(12345); printf(\"%p\\n\", p != 0 ? (void *)1 : 0); free(p); return 0; }\n",
        &["-O0"],
    );
    let script = r#"probe process("libc.so.6").function("malloc") { if ($bytes == 12345) printf("P malloc %d %s\n", $bytes, $$parms) }"#;
    let (out, err, code) = telco(&["-e", script, "-c", &cmd(&exe)]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("P malloc 12345 bytes=0x3039\n"), "{out}{err}");
}

/// Floating-point parameters between integer ones: at entry the integers
/// are where the calling convention puts them (the floats take vector
/// registers of their own), and a float itself is refused, located.
#[test]
fn floats_between_integer_parameters() {
    for opt in ["-O0", "-O2"] {
        let exe = build(&format!("mixed{opt}"), "dwarfvars.c", &[opt]);
        let script = "probe process.function(\"mixed\") { printf(\"P x=%d y=%d\\n\", $x, $y) }";
        let (out, err, code) = telco(&["-e", script, "-c", &cmd(&exe)]);
        assert_eq!(code, Some(0), "{opt}: {err}");
        assert!(out.contains("P x=17 y=-40\n") && out.contains("mixed d=1.5 x=17 f=2.5 y=-40\n"), "{opt}: {out}");
    }
    let exe = build("mixedf", "dwarfvars.c", &["-O0"]);
    let (_, err, code) = telco(&["-e", "probe process.function(\"mixed\") { println($d) }", "-c", &cmd(&exe)]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("target variable `$d` is not accessible at this address"), "{err}");
}

/// Rust: a struct behind a reference and a `&str` (two words, in two
/// registers at entry), with rustc at opt-level 0 and 2.
#[test]
fn rust_structs_and_str() {
    let dir = common::scratch("rust");
    let script = r#"probe process.function("dwarfrust::measure") {
    printf("P measure name=%s x=%d y=%d scale=%d\n", user_string_n($name->data_ptr, $name->length), $p->x, $p->y, $scale)
}"#;
    for opt in ["0", "2"] {
        let exe = dir.join(format!("dwarfrust{opt}"));
        let o = Command::new("rustc")
            .args(["-g", "-C", &format!("opt-level={opt}"), "-o"])
            .arg(&exe)
            .arg(common::repo().join("tests/programs/dwarfrust.rs"))
            .output()
            .expect("rustc runs");
        assert!(o.status.success(), "rustc: {}", String::from_utf8_lossy(&o.stderr));
        let (out, err, code) = telco(&["-e", script, "-c", &cmd(&exe)]);
        assert_eq!(code, Some(0), "opt-level {opt}: {err}");
        let own_line = own(&out, "measure ");
        let ours = own(&out, "P measure ");
        assert!(own_line.starts_with(&ours[2..]), "opt-level {opt}: {out}");
    }
}

/// A statement probe on a line inside a loop sees the loop's own locals
/// (a lexical block's variables) as they are at each pass, and `$$locals`
/// and `$$vars` list them.
#[test]
fn statement_probes_see_block_locals() {
    let exe = build("stmt", "dwarfvars.c", &["-O0"]);
    let src = std::fs::read_to_string(common::repo().join("tests/programs/dwarfvars.c")).expect("source");
    let line = src.lines().position(|l| l.contains("sum += s->corners[i].x")).expect("the loop's line") + 1;
    let script = format!(
        "probe process.statement(\"describe@dwarfvars.c:{line}\") {{ printf(\"P i=%d sum=%d [%s] [%s]\\n\", $i, $sum, $$locals, $$vars) }}"
    );
    let (out, err, code) = telco(&["-e", &script, "-c", &cmd(&exe)]);
    assert_eq!(code, Some(0), "{err}");
    let lines: Vec<&str> = out.lines().filter(|l| l.starts_with("P ")).collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(lines[0].starts_with("P i=0 sum=0 [i=0x0 sum=0x0] [s=0x"), "{out}");
    assert!(lines[1].starts_with("P i=1 sum=9 "), "{out}");
    assert!(lines[2].starts_with("P i=2 sum=27 [i=0x2 sum=0x1b] [s=0x"), "{out}");
    assert!(lines[2].contains(" c=0x4 i=0x2 sum=0x1b]"), "{out}");
}

/// `$p$`, `$$parms`, `$$parms$`, `$$return`, `$s$$` (nested structs
/// expanded), `@defined`.
#[test]
fn pretty_printing_and_context_strings() {
    let exe = build("pretty", "dwarfvars.c", &["-O0"]);
    let script = r#"
probe process.function("area") {
    println("A ", $p$, " ", $$parms$, " ", @defined($scale), @defined($nope), @defined($p->x), @defined($p->nope))
    println("B ", $$parms)
}
probe process.function("area").return { println("R ", $$return) }
probe process.function("describe") { println("D ", $s->flags$, " ", $s->origin$, " ", $why$) }
"#;
    let (out, err, code) = telco(&["-e", script, "-c", &cmd(&exe)]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("A {.x=6, .y=7} p={.x=6, .y=7} scale=2 1010\n"), "{out}");
    assert!(own(&out, "B ").starts_with("B p=0x7f") && own(&out, "B ").ends_with(" scale=0x2"), "{out}");
    assert!(out.contains("R return=0x54\n"), "{out}");
    assert!(out.contains("D {.a=5, .b=-7, .c=3000} {.x=3, .y=4} \"because\"\n"), "{out}");
}

/// Guru mode: `$x = 0` on a parameter by name, `$return = 7`, a member
/// through a pointer and a bitfield change what the program computes;
/// without -g each write is refused at compile time, located.
#[test]
fn guru_writes_change_the_program() {
    let script = r#"
probe process.function("guarded") { $x = 0 }
probe process.function("area") { $p->x = 100; $scale += 1 }
probe process.function("describe") { $s->flags->b = 3 }
"#;
    for opt in ["-O0", "-O2"] {
        let exe = build(&format!("guru{opt}"), "dwarfvars.c", &[opt]);
        let plain = Command::new(&exe).output().expect("run");
        let plain = String::from_utf8_lossy(&plain.stdout).into_owned();
        assert!(plain.contains("guarded=42\n") && plain.contains("area x=6 y=7 scale=2 result=84\n"), "{plain}");
        let (out, err, code) = telco(&["-g", "-e", script, "-c", &cmd(&exe)]);
        assert_eq!(code, Some(0), "{opt}: {err}");
        assert!(out.contains("guarded=-1\n"), "{opt}: {out}");
        assert!(out.contains("area x=100 y=7 scale=3 result=2100\n"), "{opt}: {out}");
        assert!(out.contains(" a=5 b=3 c=3000 "), "{opt}: {out}");
        let (out, err, code) =
            telco(&["-g", "-e", "probe process.function(\"guarded\").return { $return = 7 }", "-c", &cmd(&exe)]);
        assert_eq!(code, Some(0), "{opt}: {err}");
        assert!(out.contains("guarded=7\n"), "{opt}: {out}");
        // An `int` return value is sign-extended from its DWARF type.
        let (out, err, code) = telco(&[
            "-g",
            "-e",
            "probe process.function(\"guarded\") { $x = -3 } probe process.function(\"guarded\").return { println(\"R \", $return) }",
            "-c",
            &cmd(&exe),
        ]);
        assert_eq!(code, Some(0), "{opt}: {err}");
        assert!(out.contains("R -1\n") && out.contains("guarded=-1\n"), "{opt}: {out}");
        // set_user_int writes memory (guru mode only).
        let write = "probe process.function(\"area\") { set_user_int($p + 4, 9) }";
        let (out, err, code) = telco(&["-g", "-e", write, "-c", &cmd(&exe)]);
        assert_eq!(code, Some(0), "{opt}: {err}");
        assert!(out.contains("area x=6 y=9 scale=2 result=108\n"), "{opt}: {out}");
        let (_, err, code) = telco(&["-e", write, "-c", &cmd(&exe)]);
        assert_eq!(code, Some(1), "{err}");
        assert!(err.contains("`set_user_int` needs guru mode"), "{err}");
        // A compound write whose index has side effects would compute its
        // place twice: refused, located.
        let twice = "probe process.function(\"describe\") { i = 0; $s->weights[i++] += 1 }";
        let (_, err, code) = telco(&["-g", "-e", twice, "-c", &cmd(&exe)]);
        assert_eq!(code, Some(1), "{err}");
        assert!(err.contains("`+=` changes the index it is written at") && err.contains("<input>:1:45"), "{err}");
        let (out, err, code) = telco(&["-e", script, "-c", &cmd(&exe)]);
        assert_eq!(code, Some(1), "{out}");
        assert!(err.contains("writing `$x` needs guru mode") && err.contains("<input>:2:"), "{err}");
        assert!(err.contains("writing `$p->x` needs guru mode"), "{err}");
    }
}

/// A variable optimised out at the probe's address, a name that does not
/// exist, a member that does not exist: located compile-time errors; a
/// bad pointer read at run time is the probe's error (the target lives).
#[test]
fn what_cannot_be_read_is_said_where_it_is_written() {
    let exe = build("errors", "dwarfvars.c", &["-O2"]);
    let (out, err, code) = telco(&[
        "-e",
        "probe process.function(\"area\") { println($result) println($scal) println($p->z) }",
        "-c",
        &cmd(&exe),
    ]);
    assert_eq!(code, Some(1), "{out}");
    assert!(err.contains("target variable `$result` is not accessible at this address"), "{err}");
    assert!(err.contains("<input>:1:42"), "{err}");
    assert!(err.contains("unable to find target variable `$scal`") && err.contains("did you mean `$scale`?"), "{err}");
    assert!(err.contains("`struct point*` has no member `z`") || err.contains("has no member `z`"), "{err}");
    let (out, err, code) =
        telco(&["-e", "probe process.function(\"area\") { println(@cast(0, \"struct point\")->y) }", "-c", &cmd(&exe)]);
    assert!(err.contains("read fault at 0x4"), "{err}");
    assert!(out.contains("area x=6 y=7 scale=2 result=84"), "the target lives on: {out}");
    let _ = code;
}

/// `--skip-badvars`: what cannot be found or read is 0, with a warning
/// that says why, and the rest of the probe reads the real values.
#[test]
fn skip_badvars_reads_zero_for_what_cannot_be_read() {
    let exe = build("skipbad", "dwarfvars.c", &["-O2"]);
    let (out, err, code) = telco(&[
        "--skip-badvars",
        "-e",
        "probe process.function(\"area\") { printf(\"P %d %d %d scale=%d\\n\", $result, $scal, $p->z, $scale) }",
        "-c",
        &cmd(&exe),
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        err.contains("warning")
            && err.contains("`$result` is not accessible at this address (0 instead: --skip-badvars)"),
        "{err}"
    );
    assert!(err.contains("unable to find target variable `$scal`"), "{err}");
    assert!(err.contains("has no member `z`"), "{err}");
    assert!(!err.contains("error"), "{err}");
    let area = own(&out, "area x=");
    let scale = area.split("scale=").nth(1).and_then(|s| s.split_whitespace().next()).expect("scale");
    assert_eq!(own(&out, "P "), format!("P 0 0 0 scale={scale}"), "{out}");
}

/// `-L` lists parameters and locals by name with their C types, as
/// `stap -L` does; `$return` with the function's return type.
#[test]
fn listing_shows_names_and_types() {
    let exe = build("list", "dwarfvars.c", &["-O2"]);
    let p = cmd(&exe);
    let (out, err, code) = telco(&["-L", &format!("process(\"{p}\").function(\"area\").return")]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("$p:struct point* $scale:int $result:int $return:int"), "{out}");
    let (out, _, _) = telco(&["-L", &format!("process(\"{p}\").function(\"describe\")")]);
    assert!(out.contains("$s:shape_t* $why:char const* $c:enum color"), "{out}");
}

/// C++: `$this->member` (inherited ones too; a derived class's member
/// hides its base's, in `$v$` too), references, an unnamed parameter (it
/// still takes its register), a `std::string` passed by invisible
/// reference.
#[test]
fn cxx_members_and_references() {
    let script = r#"
probe process.function("Widget::area") { printf("P area id=%d w=%d h=%d scale=%d\n", $this->id, $this->width, $this->height, $scale) }
probe process.function("by_ref") { printf("P by_ref h=%d counter=%d\n", $w->height, $counter) }
probe process.function("hidden") { printf("P hidden id=%d\n", $h->id); println("P pretty ", $h$) }
probe process.function("Widget::area") { println("P widget ", $this$) }
probe process.function("skip") { printf("P skip y=%d\n", $y) }
probe process.function("by_string") { printf("P by_string len=%d n=%d\n", $s->_M_string_length, $n) }
"#;
    for opt in ["-O0", "-O2"] {
        let exe = build(&format!("cxx{opt}"), "dwarfcxx.cc", &[opt]);
        let (out, err, code) = telco(&["-e", script, "-c", &cmd(&exe)]);
        assert_eq!(code, Some(0), "{opt}: {err}");
        assert!(own(&out, "area ").starts_with(&own(&out, "P area ")[2..]), "{opt}: {out}");
        // The probe runs at entry, before the function adds to the counter.
        assert!(out.contains("P by_ref h=5 counter=10\n") && out.contains("by_ref h=5 counter=13\n"), "{opt}: {out}");
        assert!(out.contains("P hidden id=4\n"), "{opt}: {out}");
        // `$v$`: its own members, then its base's not hidden by them.
        assert!(out.contains("P pretty {.id=4}\n"), "{opt}: {out}");
        assert!(out.contains("P widget {.width=3, .height=5, .id=9}\n"), "{opt}: {out}");
        assert!(out.contains("P skip y=2\n"), "{opt}: {out}");
        assert!(out.contains("P by_string len=12 n=6\n"), "{opt}: {out}");
    }
}

/// Debugging information in a separate file, found by build-id (under
/// `TELCO_DEBUGINFO_PATH`) and by `.gnu_debuglink`; zlib-compressed
/// sections.
#[test]
fn separate_and_compressed_debug_information() {
    let dir = common::scratch("separate");
    let src = common::repo().join("tests/programs/dwarfvars.c");
    let script = "probe process.function(\"area\") { printf(\"P %d %d\\n\", $p->x, $scale) }";
    let run = |exe: &Path, envs: &[(&str, &Path)]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_telco-stap"));
        c.args(["-e", script, "-c", &cmd(exe)]);
        for (k, v) in envs {
            c.env(k, v);
        }
        let o = c.output().expect("run telco-stap");
        (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    // Compressed.
    let z = dir.join("compressed");
    common::compile(&[&src], &z, &["-g", "-O2", "-gz=zlib"]);
    let (out, err) = run(&z, &[]);
    assert!(out.contains("P 6 2\n"), "{out}{err}");
    // Build-id: the debug file under ROOT/.build-id/xx/rest.debug.
    let b = dir.join("buildid");
    common::compile(&[&src], &b, &["-g", "-O2", "-Wl,--build-id"]);
    let id = build_id(&b);
    let root = dir.join("debugroot");
    let target = root.join(".build-id").join(&id[..2]);
    std::fs::create_dir_all(&target).expect("mkdir");
    objcopy(&["--only-keep-debug", &cmd(&b), &cmd(&target.join(format!("{}.debug", &id[2..])))]);
    objcopy(&["--strip-debug", &cmd(&b)]);
    let (out, err) = run(&b, &[]);
    assert!(err.contains("no debugging information for target variables"), "{out}{err}");
    let (out, err) = run(&b, &[("TELCO_DEBUGINFO_PATH", &root)]);
    assert!(out.contains("P 6 2\n"), "{out}{err}");
    // Debuglink: NAME.debug beside the program.
    let l = dir.join("linked");
    common::compile(&[&src], &l, &["-g", "-O2", "-Wl,--build-id=none"]);
    let dbg = dir.join("linked.debug");
    objcopy(&["--only-keep-debug", &cmd(&l), &cmd(&dbg)]);
    objcopy(&["--strip-debug", &format!("--add-gnu-debuglink={}", dbg.display()), &cmd(&l)]);
    let (out, err) = run(&l, &[]);
    assert!(out.contains("P 6 2\n"), "{out}{err}");
}

fn objcopy(args: &[&str]) {
    let o = Command::new("objcopy").args(args).output().expect("objcopy runs");
    assert!(o.status.success(), "objcopy {args:?}: {}", String::from_utf8_lossy(&o.stderr));
}

fn build_id(exe: &Path) -> String {
    let o = Command::new("readelf").args(["-n", &cmd(exe)]).output().expect("readelf");
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let line = text.lines().find(|l| l.contains("Build ID:")).expect("a build id");
    line.rsplit(' ').next().expect("id").trim().to_string()
}

mod generated {
    //! Generated scripts of target paths (bases, members, indexes,
    //! pretty-printing, writes, `@defined`) through passes 1–4 against a
    //! real -g program: an answer or a located message, never a panic.
    use proptest::prelude::*;

    const BASES: &[&str] = &[
        "$p",
        "$s",
        "$scale",
        "$why",
        "$c",
        "$global_counter",
        "$global_origin",
        "$grid",
        "$return",
        "$nope",
        "@cast(0, \"struct point\")",
        "@cast($p, \"struct shape\")",
        "@var(\"grid\")",
        "@var(\"nope@x.c\")",
    ];
    const STEPS: &[&str] = &[
        "->x",
        "->y",
        "->corners",
        "->name",
        "->origin",
        "->flags",
        "->b",
        "->n",
        "->bytes",
        "->nope",
        "[1]",
        "[0]",
        "[$scale]",
        "[-1]",
        "[99999999999]",
        ".x",
        "->tag",
    ];
    const USES: &[&str] =
        &["println(E)", "E = 1", "E++", "E += 2", "println(@defined(E))", "x = E . \"s\"", "println(E$)"];

    fn path() -> impl Strategy<Value = String> {
        (prop::sample::select(BASES), prop::collection::vec(prop::sample::select(STEPS), 0..4), 0u8..3)
            .prop_map(|(b, steps, pretty)| format!("{b}{}{}", steps.concat(), "$".repeat(pretty as usize)))
    }

    fn exe() -> &'static std::path::PathBuf {
        static E: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
        E.get_or_init(|| super::build("generated", "dwarfvars.c", &["-O2"]))
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn generated_target_paths_get_an_answer_or_a_message(
            p in path(),
            use_ in prop::sample::select(USES),
            point in prop::sample::select(&["function(\"area\")", "function(\"describe\").return", "function(\"by_value\")"][..]),
            guru in any::<bool>(),
        ) {
            let body = use_.replace('E', &p);
            let script = format!("probe process(\"{}\").{point} {{ {body} }}", exe().display());
            let mut args = vec!["--last-pass", "4", "-e", &script];
            if guru {
                args.push("-g");
            }
            let o = super::common::telco_bounded(&args, 60);
            let err = String::from_utf8_lossy(&o.stderr);
            prop_assert!(matches!(o.status.code(), Some(0 | 1)), "{script}: {:?}\n{err}", o.status);
            if o.status.code() == Some(1) {
                prop_assert!(err.contains("error"), "{script}: no message\n{err}");
            }
        }
    }
}

/// Variables by name at a marker (as SystemTap reads them there), inside a
/// function inlined into main: the inlined function's parameter and
/// locals, and a constant struct that only the debugging information
/// holds (a DW_AT_const_value block of its abstract instance); `-L` lists
/// them for the marker.
#[test]
fn markers_see_inlined_variables_and_constants() {
    let exe = build("inline", "dwarfinline.c", &["-O2"]);
    let (out, err, code) = telco(&[
        "-e",
        "probe process.mark(\"inside\") { printf(\"P i %d j %d n %d r %d arg %d\\n\", $p->i, $p->j, $n, $r, $arg1) }",
        "-c",
        &cmd(&exe),
    ]);
    assert_eq!(code, Some(0), "{err}");
    // The program's own line says what the values are.
    assert_eq!(own(&out, "r "), "r 107 i 2 j 21", "{out}");
    assert_eq!(own(&out, "P "), "P i 2 j 21 n 5 r 107 arg 107", "{out}");
    let (out, err, code) = telco(&["-L", &format!("process(\"{}\").mark(\"inside\")", exe.display())]);
    assert_eq!(code, Some(0), "{err}");
    for v in ["$n:long int", "$r:long int", "$p:struct pair const", "$argc:int"] {
        assert!(out.contains(v), "{v} in {out}");
    }
}

/// Parameters that after a call are known only as their values at entry
/// (`DW_OP_entry_value`, gcc -Og): read from the caller's call site, the
/// one the return address names, as SystemTap does; each caller passes
/// its own values.
#[test]
fn entry_values_come_from_the_call_sites() {
    let exe = build("entry", "dwarfentry.c", &["-Og"]);
    let (out, err, code) = telco(&[
        "-e",
        "probe process.statement(\"mid@dwarfentry.c:15\") { printf(\"P b %d c %d\\n\", $b, $c) }",
        "-c",
        &cmd(&exe),
    ]);
    assert_eq!(code, Some(0), "{err}");
    let theirs: Vec<&str> = out.lines().filter(|l| l.starts_with("mid ")).collect();
    let ours: Vec<String> = out.lines().filter(|l| l.starts_with("P ")).map(|l| format!("mid {}", &l[2..])).collect();
    assert_eq!(theirs, ["mid b 3 c 2", "mid b 7 c 5"], "{out}");
    assert_eq!(ours, theirs, "{out}");
}

/// glibc's `connect(int, __CONST_SOCKADDR_ARG, socklen_t)`: the address is
/// a transparent union, which gcc's DWARF describes as 8 bytes without
/// members. It reads as the `struct sockaddr *` it passes (libc's debug
/// file, installed by the test command): `$addr->sa_family`, `$addr$`, and
/// `@cast` to the address family's own struct.
#[test]
fn glibc_s_socket_address_unions_read_as_the_pointer_they_pass() {
    const CONNECT: &str = r#"
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
int main(void) {
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    strcpy(a.sun_path, "/nonexistent-socket");
    printf("connect %d\n", connect(fd, (struct sockaddr *)&a, sizeof a));
    return 0;
}
"#;
    let dir = common::scratch("dwarf-sockaddr");
    let exe = common::compile_text(&dir, "conn", CONNECT, &["-O2"]);
    let script = r#"probe process("libc.so.6").function("connect") {
    printf("%d %s\n", $addr->sa_family, $addr$)
    println(user_string(@cast($addr, "struct sockaddr_un")->sun_path), " ", $len)
}"#;
    let (out, err, code) = telco(&["-e", script, "-c", &exe.display().to_string()]);
    assert_eq!(code, Some(0), "{err}");
    // The program's own line may come before or after ours.
    assert_eq!(out.lines().filter(|l| *l == "connect -1").count(), 1, "{out}");
    let ours: Vec<&str> = out.lines().filter(|l| *l != "connect -1").collect();
    assert_eq!(ours, ["1 {.sa_family=1, .sa_data=\"/nonexistent-s\"}", "/nonexistent-socket 110"], "{err}");
}

/// `@var(..., "module")` in a script function (no probe's site there): the
/// global of that module, where the probe that called the function has it
/// loaded (its load bias, from the probe table), read and written; without
/// the module, a located error says to name it.
#[test]
fn at_var_in_a_script_function_names_its_module() {
    let exe = build("fnvar", "dwarfvars.c", &["-O2"]);
    let path = cmd(&exe);
    let script = r#"
function counter() { return @var("global_counter", @1) }
function origin_y() { return @var("global_origin@dwarfvars.c", @1)->y }
probe process(@1).function("describe") { printf("P fn %d %d %d %d\n", counter(), @var("global_counter"), origin_y(), $global_origin->y) }
"#;
    let (out, err, code) = telco(&["-e", script, &path, "-c", &format!("{path} 2")]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("P fn 40 40 -9 -9\n"), "{out}");
    assert!(out.contains("P fn 41 41 -9 -9\n"), "{out}");
    let script = r#"function counter() { return @var("global_counter") } probe process(@1).function("describe") { println(counter()) }"#;
    let (_, err, code) = telco(&["-e", script, &path, "-c", &format!("{path} 2")]);
    assert_eq!(code, Some(1));
    assert!(err.contains("`@var` in a function needs its module"), "{err}");
}

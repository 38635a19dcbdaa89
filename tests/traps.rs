//! Probes where no jump fits, placed with a one-byte trap
//! (tests/programs/traps.c, built here with gcc): exact counts, arguments
//! and return values, entry and return probes; the program's own SIGTRAP
//! handling untouched; threads that block every signal; many threads at
//! once; forks and execs; sessions that end while traps are hit. Readiness
//! is a line on a pipe.

use std::path::PathBuf;
use std::process::Command;

mod common;
use common::telco_run as telco;

/// traps.c in a directory of the test's own (tests run at once).
fn build(tag: &str) -> (PathBuf, PathBuf) {
    let dir = common::scratch(tag);
    let exe = dir.join("traps");
    common::gcc("traps.c", &exe, &["-falign-functions=1", "-g"]);
    (dir, exe)
}

fn untraced(exe: &PathBuf, args: &[&str]) -> String {
    let o = Command::new(exe).args(args).output().expect("run target");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The summary's line for `probes` trap probe points hit `hits` times.
fn summary(probes: u32, hits: u64) -> String {
    format!(
        "WARNING: {probes} probe point(s) placed with a trap where no jump fits (a signal each hit, about 1 µs; -v \
         names them): {hits} hit(s)"
    )
}

/// One-byte functions (one followed by `ud2`, one packed against the next
/// by gcc), a loop back into the first five bytes of a function with no
/// neighbour to hop through, a function another one jumps into (which
/// only pass 2 sees): entry and return probes with a trap, exact counts,
/// `$return`; -v says why.
/// With -D TRAP_PROBES=1 an ordinary function too, with `$argN`; without,
/// it keeps its jump.
#[test]
fn functions_no_jump_fits_get_a_trap() {
    let (_d, exe) = build("traps-functions");
    let own = untraced(&exe, &["basic", "10"]);
    assert_eq!(own, "done 1245\n");
    let script = "global t, tr, a, r, l, e probe process.function(\"tick\"), process.function(\"tock\") { t++ } \
                  probe process.function(\"tick\").return, process.function(\"tock\").return { tr++ } \
                  probe process.function(\"add3\") { a += $a + $b + $c } \
                  probe process.function(\"add3\").return { r += $return } \
                  probe process.function(\"looper\") { l += $arg1 } \
                  probe process.function(\"looper\").return { l += 100 * $return } \
                  probe process.function(\"entered\") { e++ } \
                  probe process.function(\"entered\").return { e += 1000 * $return } \
                  probe end { printf(\"%d %d %d %d %d %d\\n\", t, tr, a, r, l, e) }";
    let cmd = format!("{} basic 10", exe.display());
    let (out, err, code) = telco(&["-v", "-e", script, "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, format!("{own}20 20 75 75 3030 70010\n"));
    assert!(err.contains("Pass 5: entered: placed with a trap (control arrives inside the jump's bytes)"), "{err}");
    assert!(err.contains("Pass 5: tick: placed with a trap (the function is 1 bytes long"), "{err}");
    assert!(err.contains("Pass 5: tock: placed with a trap (the function is 1 bytes long"), "{err}");
    assert!(err.contains("Pass 5: looper: placed with a trap (a branch at +0x7 jumps to +0x2"), "{err}");
    assert!(!err.contains("add3: placed with a trap"), "{err}");
    // tick, tock, looper and entered: 10 calls each, one trap a call (the
    // return probe is the trampoline's; side_door's jump into entered
    // runs no probe).
    assert!(err.contains(&summary(4, 40)), "{err}");
    let (out, err, code) = telco(&["-v", "-D", "TRAP_PROBES=1", "-e", script, "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, format!("{own}20 20 75 75 3030 70010\n"));
    assert!(err.contains("Pass 5: add3: placed with a trap (-D TRAP_PROBES)"), "{err}");
    assert!(err.contains(&summary(5, 50)), "{err}");
}

/// The program's own SIGTRAP: its handler gets the traps that are not ours
/// (`raise`, its own `int3`), and its `sigaction` reads back what it set.
/// A thread that blocks every signal, and a signal handler installed with
/// every signal in its mask, still run the trap probe, and eight threads
/// hit it at once: every hit counted, nothing ends the process.
#[test]
fn the_program_keeps_its_signals() {
    let (_d, exe) = build("traps-signals");
    let own = untraced(&exe, &["signals"]);
    assert_eq!(own, "view ok\nown 2\n");
    let script = "global t probe process.function(\"tick\") { t++ } probe end { println(t) }";
    let cmd = format!("{} signals", exe.display());
    let (out, err, code) = telco(&["-e", script, "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    // 1000 on the blocking thread, 1 in the handler, 8 x 100000.
    assert_eq!(out, format!("{own}801001\n"));
    assert!(err.contains(&summary(1, 801001)), "{err}");
    // With a probe of the script's on pthread_sigmask and sigaction: their
    // trampolines keep SIGTRAP unblocked too.
    let script = "global t, m probe process.function(\"tick\") { t++ } \
                  probe process(\"libc.so.6\").function(\"pthread_sigmask\"), process(\"libc.so.6\").function(\"sigaction\") { m++ } \
                  probe end { println(t, \" \", m > 0) }";
    let (out, err, code) = telco(&["-e", script, "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, format!("{own}801001 1\n"));
}

/// Forked children carry the traps and their table; an exec'd program
/// gets its own.
#[test]
fn forks_and_execs_carry_the_traps() {
    let (d, exe) = build("traps-forks");
    let script = "global t probe process.function(\"tick\") { t++ } probe end { println(t) }";
    let cmd = format!("{} fork 1000", exe.display());
    let (out, err, code) = telco(&["-e", script, "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "forked 0\n2000\n");
    let p = exe.display();
    let script = format!(
        "global t probe process(\"{p}\").function(\"tick\") {{ t++ }} \
         probe process(\"{p}\").function(\"looper\").return {{ t += 1000 * $return }} probe end {{ println(t) }}"
    );
    let cmd = format!("sh -c 'cd {} && ./traps basic 10; true'", d.display());
    let (out, err, code) = telco(&["-e", &script, "-c", &cmd]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "done 1245\n30010\n");
}

/// Sessions attached to a running program whose four threads hit a trap
/// probe all the time (one of them with every signal blocked since before
/// the session), each ended by `exit()` in the middle of those hits: the
/// program goes on untouched after each, its mappings as they were.
#[test]
fn sessions_end_in_the_middle_of_trap_hits() {
    let (_d, exe) = build("traps-sessions");
    let mut target = common::Running::start(&exe, &["wait"]);
    assert_eq!(target.ready, "ready\n");
    let pid = target.pid();
    let maps = || std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
    let before = maps();
    let script = "global t probe process.function(\"tick\") { if (++t == 100000) exit() } \
                  probe end { println(t >= 100000) }";
    for _ in 0..3 {
        let (out, err, code) = telco(&["-e", script, "-p", &pid.to_string()]);
        assert_eq!((code, out.as_str()), (Some(0), "1\n"), "{err}");
        assert_eq!(maps(), before);
    }
    target.say("stop");
    let (last, status) = target.finish();
    assert!(status.success(), "{status:?}");
    assert_eq!(last, "alive\n");
}

/// A program whose C library's `sigaction` and `pthread_sigmask` cannot be
/// found (static and stripped): a trap there could end it (a thread that
/// blocks SIGTRAP), so the probe is refused, with why, and the program
/// runs as it would.
#[test]
fn no_trap_where_the_signal_hooks_cannot_go() {
    let dir = common::scratch("traps-stripped");
    let exe = dir.join("traps");
    common::gcc("traps.c", &exe, &["-falign-functions=1", "-static"]);
    let nm = Command::new("nm").arg(&exe).output().expect("nm");
    let tock = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .find_map(|l| l.strip_suffix(" T tock").map(str::to_string))
        .expect("tock in the symbol table");
    let stripped = dir.join("stripped");
    let st = Command::new("strip").arg("-o").arg(&stripped).arg(&exe).status().expect("strip");
    assert!(st.success());
    let script = format!("global n probe process.statement(0x{tock}) {{ n++ }} probe end {{ println(n) }}");
    let cmd = format!("{} basic 10", stripped.display());
    let (out, err, code) = telco(&["-e", &script, "-c", &cmd]);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(out, "done 1245\n");
    assert!(err.contains("no jump fits at the site, nor before it; nor can a trap be placed"), "{err}");
    assert!(err.contains("no C library's sigaction and pthread_sigmask were found to hook"), "{err}");
}

//! The files a target maps are read as the process maps them, never by
//! the path its `/proc/PID/maps` shows (INTERNALS.md, invariant 6): the
//! tracer runs as root, the target (tests/programs/mapped.c, as uid 12345)
//! controls those paths. A library the target deleted or renamed a file
//! over, a library whose name holds a newline (`\012` in maps), a library
//! and an executable bind-mounted in the target's own user and mount
//! namespace: in each case a decoy readable by root alone, built from the
//! same source with other function names (`decoy_secret_…`), sits at the
//! path the maps show, and those names appear nowhere: not in the
//! tracer's output, its profile, nor the target's memory (the symbol table
//! the tracer writes into the region), while the library's real names do.
//! And memory: a 1 GiB sparse fake ELF mapped through three hard links
//! costs the profiler no copy of it (peak RSS by `wait4`).

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{scratch, Running, Tracer};

/// The target's user (no such account: a uid the tracer's root is not).
const UID: u32 = 12345;
/// What a decoy's function names start with.
const SECRET: &str = "decoy_secret";
/// The tracer's script: ready once armed; a backtrace through the library
/// (`probe_here` is called back from its `shown_outer`).
const SCRIPT: &str = "probe begin { println(\"armed\") } \
                      probe process.function(\"probe_here\") { print_ubacktrace(); println(usymname(uaddr())) }";

/// A directory for one test that uid 12345 may enter, with the target
/// (`mapped`), its library (`libshown.so`) and a decoy of each (root's
/// alone: mode 0600).
struct Files {
    dir: PathBuf,
    exe: PathBuf,
    lib: PathBuf,
    decoy_exe: PathBuf,
    decoy_lib: PathBuf,
}

fn files(tag: &str) -> Files {
    let dir = scratch(tag);
    let mut d = dir.as_path();
    // Every folder down from the scratch root: searchable by the target.
    while d != std::env::temp_dir() {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        d = d.parent().expect("parent");
    }
    let src = common::repo().join("tests/programs");
    let exe = dir.join("mapped");
    common::compile(&[&src.join("mapped.c")], &exe, &["-O1", "-ldl"]);
    let lib = dir.join("libshown.so");
    common::compile(&[&src.join("mappedlib.c")], &lib, &["-O1", "-shared", "-fPIC"]);
    let secret = format!("-DNAME(x)={SECRET}_##x");
    let decoy_exe = dir.join("decoy-exe");
    common::compile(&[&src.join("mapped.c")], &decoy_exe, &["-O1", "-ldl", &secret]);
    let decoy_lib = dir.join("decoy-lib.so");
    common::compile(&[&src.join("mappedlib.c")], &decoy_lib, &["-O1", "-shared", "-fPIC", &secret]);
    for f in [&decoy_exe, &decoy_lib] {
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    }
    Files { dir, exe, lib, decoy_exe, decoy_lib }
}

/// A root-only copy of `decoy` at `at`.
fn plant(decoy: &Path, at: &Path) {
    std::fs::copy(decoy, at).expect("copy the decoy");
    std::fs::set_permissions(at, std::fs::Permissions::from_mode(0o600)).expect("chmod");
}

/// `args` run as uid 12345 (no groups), its first line read.
fn as_user(args: &[&str]) -> Running {
    let uid = UID.to_string();
    let mut all = vec![format!("--reuid={uid}"), format!("--regid={uid}"), "--clear-groups".into()];
    all.extend(args.iter().map(|a| a.to_string()));
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    let t = Running::start(Path::new("setpriv"), &all);
    assert_eq!(t.ready.trim_end(), "ready", "the target did not start");
    t
}

/// Every readable byte of process `pid`'s memory holds no `needle`
/// (the region with its symbol table included).
fn memory_lacks(pid: u32, needle: &[u8]) -> Result<(), String> {
    use std::os::unix::fs::FileExt;
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("the target's maps");
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).expect("the target's memory");
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms)) = (f.next(), f.next()) else { continue };
        let (lo, hi) = range.split_once('-').expect("a range");
        let (lo, hi) = (u64::from_str_radix(lo, 16).unwrap(), u64::from_str_radix(hi, 16).unwrap());
        if !perms.starts_with('r') || line.ends_with("[vvar]") || line.ends_with("[vvar_vclock]") {
            continue;
        }
        // The target's own large mappings (the sparse file's) hold nothing of the tracer's.
        if hi - lo > 256 << 20 {
            continue;
        }
        let mut buf = vec![0u8; (hi - lo) as usize];
        if mem.read_exact_at(&mut buf, lo).is_err() {
            continue;
        }
        if buf.windows(needle.len()).any(|w| w == needle) {
            return Err(format!("{} found in the target's memory at {line}", String::from_utf8_lossy(needle)));
        }
    }
    Ok(())
}

/// Attach to `target` with [`SCRIPT`] and `--folded`, call through the
/// library and spin in it, check the target's memory while attached,
/// end the target: the tracer's (output, errors, folded stacks).
fn trace(mut target: Running, dir: &Path, late: bool) -> (String, String, String) {
    let folded = dir.join("out.folded");
    let pid = target.pid().to_string();
    let tracer = Tracer::start(&["-p", &pid, "--folded", folded.to_str().unwrap(), "-e", SCRIPT], "armed");
    if late {
        target.say("load");
        assert_eq!(target.line().trim_end(), "loaded");
    }
    target.say("call");
    assert_eq!(target.line().trim_end(), "called");
    target.say("spin 600");
    assert_eq!(target.line().trim_end(), "spun");
    let memory = memory_lacks(target.pid(), SECRET.as_bytes());
    let (_, status) = target.finish();
    assert!(status.success(), "the target failed: {status:?}");
    let (out, err, code) = tracer.finish();
    assert_eq!(code, Some(0), "telco-stap failed:\n{out}\n{err}");
    if let Err(e) = memory {
        panic!("{e}\n{out}\n{err}");
    }
    let stacks = std::fs::read_to_string(&folded).unwrap_or_default();
    std::fs::remove_file(&folded).ok();
    (out, err, stacks)
}

/// The library's real names, and never the decoy's.
fn check(out: &str, err: &str, stacks: &str) {
    let all = format!("--- output\n{out}\n--- errors\n{err}\n--- folded\n{stacks}");
    assert!(!all.contains(SECRET), "a decoy's names reached the tracer:\n{all}");
    // Frame lines `0x… : NAME+0x…/0x… [MODULE]`: the probed function, then
    // the library's that called it.
    let names: Vec<&str> =
        out.lines().filter_map(|l| l.split_once(" : ")).map(|(_, r)| r.split('+').next().unwrap_or("")).collect();
    assert!(
        names.starts_with(&["probe_here", "shown_outer"]),
        "the backtrace does not name the library's function:\n{all}"
    );
    assert!(out.lines().any(|l| l == "probe_here"), "usymname does not name the probed function:\n{all}");
    assert!(stacks.lines().any(|l| l.contains(";shown_spin ")), "no samples name shown_spin:\n{all}");
}

#[test]
fn a_deleted_library_is_read_as_mapped_not_at_its_path() {
    let f = files("deleted");
    let target = as_user(&[f.exe.to_str().unwrap(), "lib", f.lib.to_str().unwrap()]);
    // Deleted: maps say `libshown.so (deleted)`; a decoy at that path and
    // at the path without the suffix.
    std::fs::remove_file(&f.lib).expect("delete the library");
    plant(&f.decoy_lib, &f.lib);
    plant(&f.decoy_lib, &f.dir.join("libshown.so (deleted)"));
    let (out, err, stacks) = trace(target, &f.dir, false);
    check(&out, &err, &stacks);
}

#[test]
fn a_library_renamed_over_is_read_as_mapped() {
    let f = files("renamed");
    let target = as_user(&[f.exe.to_str().unwrap(), "lib", f.lib.to_str().unwrap()]);
    // A decoy renamed over the mapped library: the path names another file.
    let staged = f.dir.join("staged.so");
    plant(&f.decoy_lib, &staged);
    std::fs::rename(&staged, &f.lib).expect("rename over the library");
    plant(&f.decoy_lib, &f.dir.join("libshown.so (deleted)"));
    let (out, err, stacks) = trace(target, &f.dir, false);
    check(&out, &err, &stacks);
}

#[test]
fn a_newline_in_a_library_name_does_not_name_another_file() {
    for late in [false, true] {
        let f = files(if late { "newline-late" } else { "newline" });
        let lib = f.dir.join("lib\nshown.so");
        std::fs::rename(&f.lib, &lib).expect("rename");
        // The maps show `lib\012shown.so`: a decoy at that literal path.
        plant(&f.decoy_lib, &f.dir.join("lib\\012shown.so"));
        let mode = if late { "late" } else { "lib" };
        let target = as_user(&[f.exe.to_str().unwrap(), mode, lib.to_str().unwrap()]);
        let (out, err, stacks) = trace(target, &f.dir, late);
        check(&out, &err, &stacks);
    }
}

#[test]
fn a_target_in_its_own_mount_namespace_is_read_by_the_files_it_runs() {
    let f = files("namespace");
    // The real program and library in `inner/`; in the target's own
    // namespace they are bind-mounted over the decoys at `mapped` and
    // `libshown.so`, which the tracer would read at those paths.
    let inner = f.dir.join("inner");
    std::fs::create_dir(&inner).expect("mkdir");
    std::fs::set_permissions(&inner, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let (exe, lib) = (inner.join("mapped"), inner.join("libshown.so"));
    std::fs::rename(&f.exe, &exe).expect("move the program");
    std::fs::rename(&f.lib, &lib).expect("move the library");
    plant(&f.decoy_exe, &f.exe);
    plant(&f.decoy_lib, &f.lib);
    let shell = format!(
        "mount --bind {} {} && mount --bind {} {} && exec {} lib {}",
        exe.display(),
        f.exe.display(),
        lib.display(),
        f.lib.display(),
        f.exe.display(),
        f.lib.display()
    );
    let target = as_user(&["unshare", "-Urm", "sh", "-c", &shell]);
    // Listing (pass 2 alone) reads the same files.
    let pid = target.pid().to_string();
    for point in ["process(\"libshown.so\").function(\"*\")", "process.function(\"*probe_here\")"] {
        let o = common::telco_bounded(&["-l", point, "-p", &pid], 60);
        let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        assert!(o.status.success() && !format!("{out}{err}").contains(SECRET), "-l {point}:\n{out}\n{err}");
        assert!(out.contains("shown_outer") || out.contains("probe_here"), "-l {point}:\n{out}\n{err}");
    }
    let (out, err, stacks) = trace(target, &f.dir, false);
    check(&out, &err, &stacks);
    // The program's own function, named from the file it runs.
    assert!(out.contains("probe_here"), "{out}");
}

/// A small ELF library made to claim `size` bytes of `.text` (up to the
/// end of a sparse file of that size).
fn sparse_elf(lib: &Path, out: &Path, size: u64) {
    let mut b = std::fs::read(lib).expect("read the library");
    let u16_at = |b: &[u8], at: usize| u16::from_le_bytes(b[at..at + 2].try_into().unwrap()) as usize;
    let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    let (shoff, shentsize, shnum, shstrndx) =
        (u64_at(&b, 0x28) as usize, u16_at(&b, 0x3a), u16_at(&b, 0x3c), u16_at(&b, 0x3e));
    let sh = |i: usize| shoff + i * shentsize;
    let names = u64_at(&b, sh(shstrndx) + 0x18) as usize;
    let text = (0..shnum)
        .find(|&i| {
            let name = names + u32::from_le_bytes(b[sh(i)..sh(i) + 4].try_into().unwrap()) as usize;
            b[name..].starts_with(b".text\0")
        })
        .expect("a .text section");
    let offset = u64_at(&b, sh(text) + 0x18);
    b[sh(text) + 0x20..sh(text) + 0x28].copy_from_slice(&(size - offset).to_le_bytes());
    std::fs::write(out, &b).expect("write the fake");
    std::fs::OpenOptions::new().write(true).open(out).and_then(|f| f.set_len(size)).expect("extend the fake");
}

/// A command's peak resident set (`wait4`'s `ru_maxrss`, KiB), with its
/// output; killed after `secs`.
fn peak_rss(child: std::process::Child) -> (u64, String, String, Option<i32>) {
    use std::io::Read;
    let mut child = child;
    let (mut out, mut err) = (String::new(), String::new());
    child.stdout.take().expect("stdout").read_to_string(&mut out).expect("read");
    child.stderr.take().expect("stderr").read_to_string(&mut err).expect("read");
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 on our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32, "wait4");
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    (usage.ru_maxrss as u64, out, err, code)
}

#[test]
fn a_sparse_file_mapped_through_three_links_costs_no_copy() {
    const SIZE: u64 = 1 << 30;
    const MAX_RSS_KIB: u64 = 300 << 10;
    let f = files("sparse");
    let fake = f.dir.join("fake.so");
    sparse_elf(&f.lib, &fake, SIZE);
    let links: Vec<PathBuf> = (1..=3).map(|i| f.dir.join(format!("link{i}.so"))).collect();
    for l in &links {
        std::fs::hard_link(&fake, l).expect("link");
    }
    let mut args = vec![f.exe.to_str().unwrap(), "hold"];
    args.extend(links.iter().map(|l| l.to_str().unwrap()));
    let mut target = as_user(&args);
    let folded = f.dir.join("sparse.folded");
    let pid = target.pid().to_string();
    let mut tracer = Command::new("timeout")
        .args(["-s", "KILL", "120", env!("CARGO_BIN_EXE_telco-stap")])
        .args(["-p", &pid, "--folded", folded.to_str().unwrap(), "-e", "probe begin { println(\"armed\") }"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start telco-stap");
    // Armed: then the target works (samples, whose unwinding reads every
    // module it maps, the fake's three names among them).
    let mut first = [0u8; 6];
    std::io::Read::read_exact(tracer.stdout.as_mut().unwrap(), &mut first).expect("telco-stap's first line");
    assert_eq!(&first, b"armed\n");
    target.say("work 1000");
    assert_eq!(target.line().trim_end(), "worked");
    let (_, status) = target.finish();
    assert!(status.success(), "{status:?}");
    let (rss, out, err, code) = peak_rss(tracer);
    assert_eq!(code, Some(0), "telco-stap failed:\n{out}\n{err}");
    let stacks = std::fs::read_to_string(&folded).unwrap_or_default();
    assert!(stacks.lines().any(|l| l.contains(";work ")), "no samples in work:\n{stacks}\n{err}");
    eprintln!("telco-stap's peak RSS: {} MiB", rss >> 10);
    assert!(
        rss < MAX_RSS_KIB,
        "telco-stap's peak RSS was {} MiB (at most {} allowed)\n{err}",
        rss >> 10,
        MAX_RSS_KIB >> 10
    );
}

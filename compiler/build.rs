use std::fmt::Write;
use std::path::Path;

/// The runtime library's architecture descriptions, one per architecture;
/// the build picks the target's (`CARGO_CFG_TARGET_ARCH`: a build script
/// runs on the host, which may be another architecture).
#[path = "rt/arch/aarch64.rs"]
mod rt_aarch64;
#[path = "rt/arch/x86_64.rs"]
mod rt_x86_64;

/// What build.rs needs to know about an architecture's runtime library.
struct RtArch {
    /// Compiler flags beyond the common ones.
    cflags: &'static [&'static str],
    /// The relocations the linked library may have used.
    pc_relative: &'static [u32],
}

fn rt_arch(arch: &str) -> Option<RtArch> {
    match arch {
        "x86_64" => Some(RtArch { cflags: rt_x86_64::CFLAGS, pc_relative: rt_x86_64::PC_RELATIVE }),
        "aarch64" => Some(RtArch { cflags: rt_aarch64::CFLAGS, pc_relative: rt_aarch64::PC_RELATIVE }),
        _ => None,
    }
}

fn main() {
    // Generates src/grammar.rs into OUT_DIR from src/grammar.lalrpop. Once a
    // build script names any file to watch, cargo watches only those: name
    // the grammar too.
    println!("cargo:rerun-if-changed=src/grammar.lalrpop");
    if let Err(e) = lalrpop::process_src() {
        eprintln!("lalrpop failed: {e}");
        std::process::exit(1);
    }
    embed_tapsets();
    build_runtime_library();
}

/// The built-in tapsets (`../tapsets/*.tp`) travel inside the binary, so an
/// installed telco-stap needs no files beside it.
fn embed_tapsets() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    let dir = Path::new(&manifest).join("../tapsets");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut out = String::new();
    for (ext, what, table) in
        [("tp", "Built-in tapsets", "BUILTIN_TAPSETS"), ("stpm", "Built-in macro libraries", "BUILTIN_MACRO_LIBRARIES")]
    {
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .map(|rd| {
                rd.filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.extension().is_some_and(|x| x == ext))
                    .collect()
            })
            .unwrap_or_default();
        files.sort();
        let _ = writeln!(out, "/// {what}: (file name, text).\npub const {table}: &[(&str, &str)] = &[");
        for f in &files {
            println!("cargo:rerun-if-changed={}", f.display());
            let name = f.file_name().and_then(|n| n.to_str()).unwrap_or("tapset");
            let abs = f.canonicalize().unwrap_or_else(|_| f.clone());
            let _ = writeln!(out, "    ({name:?}, include_str!({:?})),", abs.display().to_string());
        }
        out.push_str("];\n");
    }
    let out_dir = std::env::var("OUT_DIR").unwrap_or_else(|_| ".".into());
    if let Err(e) = std::fs::write(Path::new(&out_dir).join("tapsets.rs"), out) {
        eprintln!("cannot write the tapset table: {e}");
        std::process::exit(1);
    }
}

/// Compiles the runtime library of compiled handlers (`rt/rt.c`) with gcc
/// into one flat position-independent piece of code, checks it, and writes
/// it with its symbol table to OUT_DIR (`rt.bin`, `rt_symbols.rs`).
fn build_runtime_library() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    let out_dir = std::env::var("OUT_DIR").unwrap_or_else(|_| ".".into());
    let rt = Path::new(&manifest).join("rt");
    println!("cargo:rerun-if-changed={}", rt.join("rt.c").display());
    println!("cargo:rerun-if-changed={}", rt.join("rt.ld").display());
    println!("cargo:rerun-if-changed={}", rt.join("arch").display());
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let (Some(rt_arch), Some(header)) = (rt_arch(&arch), telco_abi::c_header(&arch)) else {
        die(&format!("no runtime library for {arch} yet: it needs compiler/rt/arch/{arch}.h and .rs"))
    };
    println!("cargo:rerun-if-changed=../abi/src");
    let out = Path::new(&out_dir);
    fail_on(std::fs::write(out.join("abi.h"), header), "cannot write abi.h");
    // The C compiler for the target: $CC_<target> or $CC as cargo's cc
    // crate reads them, else gcc, or the Debian cross compiler
    // (`aarch64-linux-gnu-gcc`) when building for another architecture.
    let target = std::env::var("TARGET").unwrap_or_default();
    let host = std::env::var("HOST").unwrap_or_default();
    println!("cargo:rerun-if-env-changed=CC");
    println!("cargo:rerun-if-env-changed=CC_{}", target.replace('-', "_"));
    let cc = std::env::var(format!("CC_{}", target.replace('-', "_")))
        .or_else(|_| std::env::var("CC"))
        .unwrap_or_else(|_| if target == host { "gcc".into() } else { format!("{arch}-linux-gnu-gcc") });
    let elf = out.join("rt.elf");
    let status = std::process::Command::new(&cc)
        .args([
            "-std=gnu11",
            "-O2",
            "-fPIE",
            "-ffreestanding",
            "-fno-builtin",
            "-nostdlib",
            "-static",
            "-fno-stack-protector",
            "-fno-asynchronous-unwind-tables",
            "-fno-unwind-tables",
            "-fno-jump-tables",
            "-fno-tree-loop-distribute-patterns",
            "-fno-plt",
            "-fvisibility=hidden",
            "-Wall",
            "-Wextra",
            "-Wno-unused-parameter",
            "-Werror",
            "-Wl,--emit-relocs",
            "-Wl,--build-id=none",
            "-Wl,-z,noexecstack",
        ])
        .args(rt_arch.cflags)
        .arg(format!("-DARCH_HEADER=\"arch/{arch}.h\""))
        .arg(format!("-I{}", rt.display()))
        .arg(format!("-I{}", out.display()))
        .arg(format!("-Wl,-T,{}", rt.join("rt.ld").display()))
        .arg(rt.join("rt.c"))
        .arg("-o")
        .arg(&elf)
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => die(&format!("compiling rt/rt.c with `{cc}` failed ({s})")),
        Err(e) => die(&format!(
            "cannot run `{cc}` to compile the runtime library rt/rt.c: {e}; telco-stap needs gcc to build \
             (apt-get install gcc)"
        )),
    }
    let bytes = fail_on(std::fs::read(&elf), "cannot read rt.elf");
    let parsed = match goblin::elf::Elf::parse(&bytes) {
        Ok(e) => e,
        Err(e) => die(&format!("cannot parse rt.elf: {e}")),
    };
    let mut text = None;
    for (i, sh) in parsed.section_headers.iter().enumerate() {
        let name = parsed.shdr_strtab.get_at(sh.sh_name).unwrap_or("");
        let alloc = sh.sh_flags & u64::from(goblin::elf::section_header::SHF_ALLOC) != 0;
        if name == ".text" {
            text = Some((i, sh.sh_offset as usize, sh.sh_size as usize, sh.sh_addr));
        } else if alloc && sh.sh_size > 0 && sh.sh_type != goblin::elf::section_header::SHT_NOBITS {
            die(&format!("rt/rt.c produced section `{name}`: the runtime library must be code and constants only"));
        } else if alloc && sh.sh_size > 0 {
            die(&format!("rt/rt.c produced writable data (`{name}`): the runtime library must have no state"));
        }
    }
    let Some((text_index, off, size, addr)) = text else { die("rt.elf has no .text") };
    if addr != 0 {
        die("rt.elf's .text does not start at 0");
    }
    // Every relocation the linker resolved must be PC-relative: then the
    // bytes work at any address.
    for (target, relocs) in &parsed.shdr_relocs {
        let applies_to = parsed.section_headers.get(*target).map(|s| s.sh_info as usize);
        if applies_to != Some(text_index) {
            continue;
        }
        for r in relocs.iter() {
            if !rt_arch.pc_relative.contains(&r.r_type) {
                die(&format!(
                    "rt/rt.c needs a relocation of type {} at {:#x}: the runtime library must be position independent",
                    r.r_type, r.r_offset
                ));
            }
        }
    }
    fail_on(std::fs::write(out.join("rt.bin"), &bytes[off..off + size]), "cannot write rt.bin");
    let mut syms = String::from(
        "/// The runtime library's functions: (name, offset, size).\npub const RT_SYMBOLS: &[(&str, u32, u32)] = &[\n",
    );
    let mut list: Vec<(String, u64, u64)> = parsed
        .syms
        .iter()
        .filter(|s| s.is_function() && s.st_size > 0)
        .filter_map(|s| parsed.strtab.get_at(s.st_name).map(|n| (n.to_string(), s.st_value, s.st_size)))
        .collect();
    list.sort_by_key(|s| s.1);
    for (n, v, sz) in list {
        let _ = writeln!(syms, "    ({n:?}, {v}, {sz}),");
    }
    syms.push_str("];\n");
    fail_on(std::fs::write(out.join("rt_symbols.rs"), syms), "cannot write rt_symbols.rs");
}

fn fail_on<T, E: std::fmt::Display>(r: Result<T, E>, what: &str) -> T {
    match r {
        Ok(v) => v,
        Err(e) => die(&format!("{what}: {e}")),
    }
}

fn die(msg: &str) -> ! {
    eprintln!("error: {msg}");
    std::process::exit(1);
}

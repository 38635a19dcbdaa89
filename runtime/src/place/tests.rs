//! Placement without a process: a made-up module in a [`Buffer`], the
//! artifact of a real compiled script with its probes pointed there.

#![cfg(target_arch = "x86_64")]

use super::*;
use telco_abi::artifact::ProbeEntry;

const BASE: u64 = 0x40_0000;
/// `push rbp; mov rbp, rsp; mov eax, 1; pop rbp; ret`.
const FUNCTION: [u8; 11] = [0x55, 0x48, 0x89, 0xe5, 0xb8, 0x01, 0x00, 0x00, 0x00, 0x5d, 0xc3];

fn artifact(attaches: Vec<Attach>) -> Artifact {
    let mut a = telco_compiler::codegen::compile_text("place.tp", "global n probe begin { n++ }")
        .unwrap_or_else(|e| panic!("{e}"));
    let p0 = a.probes[0].clone();
    a.probes =
        attaches.into_iter().map(|attach| ProbeEntry { attach, empty: false, full_ctx: true, ..p0.clone() }).collect();
    a
}

fn function(file_offset: u64, size: u64) -> Attach {
    Attach::Function {
        module: "/m".into(),
        symbol: format!("f{file_offset:x}"),
        addr: BASE + file_offset,
        size,
        file_offset,
        ret: false,
        itrace: false,
        only_exe: None,
        hop: None,
        ra_saved: None,
        trap: false,
        go: None,
    }
}

fn statement(file_offset: u64, displaced: u32) -> Attach {
    Attach::Statement {
        module: "/m".into(),
        addr: BASE + file_offset,
        file_offset,
        displaced,
        lead: 0,
        lead_call: false,
        pad: 0,
        trap: false,
        semaphore: None,
    }
}

/// The module: `FUNCTION` at 0x1000 and 0x1100, `ret` at 0x10ff, `mov eax, 1; mov eax, 2;
/// ret` at 0x1200, int3 everywhere else.
fn module() -> (Buffer, Vec<Mapping>) {
    let mut bytes = vec![0xcc; 0x2000];
    bytes[0x1000..0x1000 + FUNCTION.len()].copy_from_slice(&FUNCTION);
    bytes[0x10ff] = 0xc3;
    bytes[0x1100..0x1100 + FUNCTION.len()].copy_from_slice(&FUNCTION);
    bytes[0x1200..0x120b].copy_from_slice(&[0xb8, 1, 0, 0, 0, 0xb8, 2, 0, 0, 0, 0xc3]);
    let mut mem = Buffer::new(BASE + 0x10_0000);
    mem.map(BASE, bytes);
    let m = Mapping {
        pid: 0,
        start: BASE,
        end: BASE + 0x2000,
        offset: 0,
        dev: 1,
        inode: 1,
        path: "/m".into(),
        deleted: false,
        writable: false,
        executable: true,
    };
    (mem, vec![m])
}

/// Every probe of `a` by file offset, as `session::arm` groups them.
fn by_offset(a: &Artifact) -> BTreeMap<u64, Vec<usize>> {
    let mut out: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    for (i, p) in a.probes.iter().enumerate() {
        if let Attach::Function { file_offset, .. } | Attach::Statement { file_offset, .. } = p.attach {
            out.entry(file_offset).or_default().push(i);
        }
    }
    out
}

fn place_all(attaches: Vec<Attach>) -> (Buffer, Vec<Plan>, Vec<String>, Vec<CodeRegion>) {
    let a = artifact(attaches);
    let hooker = Hooker::new(&a, 0x7000_0000, 0x7100_0000, 0x2d0, BTreeMap::new(), None).expect("helpers");
    let (mut mem, maps) = module();
    let mut refused = Vec::new();
    let (codes, plans) =
        hooker.module(&mut mem, &maps, Path::new("/m"), &by_offset(&a), &mut refused).expect("placement");
    (mem, plans, refused, codes)
}

/// Where a `jmp rel32` at `at` goes.
fn jump_target(at: u64, jmp: &[u8]) -> u64 {
    assert_eq!(jmp[0], 0xe9, "a jmp rel32: {jmp:02x?}");
    (at + 5).wrapping_add(i32::from_le_bytes([jmp[1], jmp[2], jmp[3], jmp[4]]) as i64 as u64)
}

#[test]
fn a_function_entry_jumps_to_a_trampoline_that_runs_the_displaced_code_and_comes_back() {
    let (mem, plans, refused, codes) = place_all(vec![function(0x1000, FUNCTION.len() as u64)]);
    assert!(refused.is_empty(), "{refused:?}");
    assert_eq!(plans.len(), 1);
    let (at, original, patch) = &plans[0];
    assert_eq!(*at, BASE + 0x1000);
    // Whole instructions displaced (push; mov rbp, rsp: 4 bytes are not
    // enough for the jump, so mov eax too), their bytes kept to put back.
    assert_eq!(original[..], FUNCTION[..original.len()]);
    assert!(original.len() >= 5);
    // The jump, then traps over what is left of the displaced bytes.
    let tramp = jump_target(*at, patch);
    assert!(patch[5..].iter().all(|&b| b == arch::TRAP));
    let code = &codes[0];
    assert!((code.blob..code.remote + code.size).contains(&tramp), "the trampoline is in the module's code region");
    // The trampoline ends with the displaced instructions and a jump back
    // to the first byte after them.
    let t = mem.read(tramp, 1024).expect("trampoline");
    let back = BASE + 0x1000 + original.len() as u64;
    let found = (0..t.len() - 5).any(|i| t[i] == 0xe9 && jump_target(tramp + i as u64, &t[i..i + 5]) == back);
    assert!(found, "a jump back to {back:#x} in the trampoline");
    // Nothing is written into the module itself until `apply`.
    assert_eq!(mem.read(BASE + 0x1000, FUNCTION.len()).expect("module")[..], FUNCTION[..]);
}

#[test]
fn two_functions_get_two_trampolines() {
    let n = FUNCTION.len() as u64;
    let (_, plans, refused, _) = place_all(vec![function(0x1000, n), function(0x1100, n)]);
    assert!(refused.is_empty(), "{refused:?}");
    let at: Vec<u64> = plans.iter().map(|p| p.0).collect();
    assert_eq!(at, [BASE + 0x1000, BASE + 0x1100]);
    assert_ne!(jump_target(at[0], &plans[0].2), jump_target(at[1], &plans[1].2));
}

#[test]
fn a_statement_whose_jump_would_cover_another_probes_site_gets_a_trap() {
    // `mov eax, 1` at 0x1200, `mov eax, 2` at 0x1205: a jump displacing
    // both would take the second statement's site.
    let (_, plans, refused, _) = place_all(vec![statement(0x1200, 10), statement(0x1205, 5)]);
    assert!(refused.is_empty(), "{refused:?}");
    assert_eq!(plans.len(), 2);
    assert_eq!(plans[0], (BASE + 0x1200, vec![0xb8], arch::TRAP_PROBE.to_vec()));
    assert_eq!((plans[1].0, plans[1].2[0]), (BASE + 0x1205, 0xe9), "a jump at the second");
}

#[test]
fn a_function_entry_whose_jump_would_cover_a_statement_gets_a_trap() {
    // FUNCTION: push rbp; mov rbp, rsp; mov eax, 1 ...: a statement at its
    // third instruction, inside the entry jump's five bytes.
    let (_, plans, refused, _) = place_all(vec![function(0x1000, FUNCTION.len() as u64), statement(0x1004, 5)]);
    assert!(refused.is_empty(), "{refused:?}");
    assert_eq!(plans.len(), 2);
    assert_eq!(plans[0], (BASE + 0x1000, vec![FUNCTION[0]], arch::TRAP_PROBE.to_vec()));
    assert_eq!((plans[1].0, plans[1].2[0]), (BASE + 0x1004, 0xe9));
}

#[test]
fn a_function_too_short_for_the_jump_gets_a_trap_over_its_first_instruction() {
    // A one-byte function (`ret` at 0x10ff) right before the next one:
    // a jump would take bytes of another function, a trap takes the
    // `ret` only. (Followed by int3 padding, a jump would be placed: that
    // padding is dead.)
    let a = artifact(vec![function(0x1000, FUNCTION.len() as u64), function(0x10ff, 1)]);
    let hooker = Hooker::new(&a, 0x7000_0000, 0x7100_0000, 0x2d0, BTreeMap::new(), None).expect("helpers");
    let (mut mem, maps) = module();
    let mut refused = Vec::new();
    let (_, plans) = hooker.module(&mut mem, &maps, Path::new("/m"), &by_offset(&a), &mut refused).expect("placed");
    assert!(refused.is_empty(), "{refused:?}");
    assert_eq!(plans.len(), 2, "{plans:?}");
    assert_eq!(plans[1], (BASE + 0x10ff, vec![0xc3], arch::TRAP_PROBE.to_vec()));
    let trapped = hooker.trapped.borrow();
    assert_eq!(trapped.len(), 1);
    assert_eq!(trapped[0].site, BASE + 0x10ff);
    assert!(trapped[0].why.starts_with("the function is 1 bytes long"), "{}", trapped[0].why);
    // Its trampoline runs the relocated `ret` (a trap's way in is rt_trap's
    // table, so nothing jumps there).
    let t = mem.read(trapped[0].tramp, 1024).expect("trampoline");
    assert!(t.contains(&0xc3));
}

#[test]
fn a_trap_is_never_chosen_where_a_jump_fits() {
    let (_, plans, refused, _) = place_all(vec![function(0x1000, FUNCTION.len() as u64)]);
    assert!(refused.is_empty(), "{refused:?}");
    assert_eq!(plans[0].2[0], 0xe9, "a jmp rel32");
}

#[test]
fn a_probe_outside_the_mapped_module_is_said_not_mapped() {
    let (_, plans, refused, _) = place_all(vec![function(0x1000, FUNCTION.len() as u64), function(0x9000, 16)]);
    assert_eq!(plans.len(), 1);
    assert!(refused.iter().any(|r| r.ends_with(": not mapped")), "{refused:?}");
}

//! x86_64 probe placement and prologue relocation.
//!
//! A function probe is a 5-byte `jmp rel32` written over the first
//! instructions of a function (after a leading `endbr64`, so Intel CET's
//! indirect-branch tracking still finds its landing pad). The instructions the
//! jump displaces are re-encoded into the trampoline, followed by a jump back.
//! This module decides where the jump goes ([`plan`], [`plan_loop`]), produces
//! the relocated copy ([`relocate`]) and the jump itself ([`jump`]).
//!
//! **Invariant:** everything here is a pure function of bytes and addresses:
//! no I/O, no `unsafe`, no `#[cfg]`. It is compiled and tested on every host;
//! only the code that reads and writes the target's memory is gated.
//!
//! **Boundary:** a [`Refusal`] is the only way these functions fail. Its
//! message is written for the user (`cannot probe foo: <refusal>`).
//! Offsets in it (`+0x1a`) are from the function's entry for [`plan`] and
//! from the patch site (`from`) for [`relocate`].
//!
//! What is *not* checked here, because the function's bytes alone cannot
//! tell: branches from other functions into the displaced bytes, and indirect
//! jumps (jump tables) that land there. Pass 2 checks those from the whole
//! module (compiler/src/arch/x86_64/sites.rs) for statement and marker sites,
//! and for function entries in modules up to 32 MB (a `required` hop:
//! compiler/src/arch/x86_64/hop.rs). The function body is read by a linear
//! sweep, which is exact for compiler output that keeps no data in `.text`; a
//! body that does not decode cleanly is refused rather than guessed at.
//!
//! *Loops back to the entry* ([`plan_loop`]): a function whose loop jumps
//! back to its patch site from past the jump's bytes would run the probe on
//! every iteration. A loop ending within 32 bytes of the site is displaced
//! whole (it then runs in the trampoline's relocated copy); otherwise at
//! least 10 bytes are displaced, a second jump at +5 leads to the relocated
//! copy past the probe, and every such branch (rel8 or rel32) is retargeted
//! to it ([`Retarget`]: extra patches, restored at detach). Loops back to an
//! `endbr64` before the patch site stay refused.
//!
//! *Calls among the displaced instructions*: a call that ends them (`push
//! rbx; call f`) becomes a push of its original return address and a jump,
//! so no return address points into a trampoline, where the unwinder and
//! backtraces would stop. Also here: the crash handler's entry stub
//! ([`signal_stub`]) and its `rt_sigreturn` restorer ([`SIGRETURN`]).

use iced_x86::{
    BlockEncoder, BlockEncoderOptions, Decoder, DecoderError, DecoderOptions, Instruction, InstructionBlock, Mnemonic,
    OpKind, Register,
};

pub use crate::arch::contract::{CopyMap, Hook, Retarget};

/// Length of the patch jump (`jmp rel32`) written at the patch site.
pub const JUMP_LEN: usize = 5;

/// `endbr64`: the landing pad `-fcf-protection` puts at every function entry.
pub const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];
/// Bytes to read to tell whether a function starts with a landing pad.
pub const LANDING_PAD_LEN: usize = ENDBR64.len();

/// The length of the indirect-branch landing pad (`endbr64`) `code` starts
/// with, 0 for none: a function's jump goes after it.
pub fn landing_pad_len(code: &[u8]) -> usize {
    if code.starts_with(&ENDBR64) {
        ENDBR64.len()
    } else {
        0
    }
}

/// Compilers align x86_64 functions to 16 bytes, so padding after a function
/// never crosses a 16-byte boundary. Bytes past that boundary may be the next
/// function even when they look like padding (`-fpatchable-function-entry`
/// starts functions with real, executed `nop`s), so they are never used.
const FUNCTION_ALIGN: u64 = 16;

/// If a `RIP`-relative operand is refused by the encoder, the offending
/// instruction is the one whose target is within this many bytes of the
/// ±2 GiB limit or past it (relocated instructions can move by a few bytes).
const RIP_SLACK: i128 = 4096;

/// Why a probe cannot be placed at a function, in words for the user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The symbol has no size, so the function's extent is unknown.
    #[error("the function's symbol has size 0, so where it ends is unknown")]
    UnknownSize,
    /// Fewer bytes were read than the symbol size says the function has.
    #[error("only {have} of the function's {size} bytes could be read")]
    Truncated { have: usize, size: u64 },
    /// The bytes at `offset` are not an x86_64 instruction.
    #[error("undecodable instruction at +{offset:#x}")]
    Undecodable { offset: u64 },
    /// An instruction starts inside the function but ends after it.
    #[error(
        "instruction at +{offset:#x} runs past the function's end at +{size:#x} \
         (is the symbol size right?)"
    )]
    RunsPastEnd { offset: u64, size: u64 },
    /// The function ends before the jump's 5 bytes and too little padding
    /// follows it.
    #[error("{}", short_function_message(*.size, *.padding, *.patch_offset, .last.as_ref()))]
    ShortFunction {
        /// The symbol size.
        size: u64,
        /// Bytes of padding found after the function (that the jump may use).
        padding: u64,
        /// Where the jump would go, from the entry.
        patch_offset: u64,
        /// The function's last instruction inside the jump's bytes, as
        /// `(offset, mnemonic)`, when there is one.
        last: Option<(u64, String)>,
    },
    /// A branch elsewhere in the function lands inside the bytes the jump
    /// overwrites.
    #[error("a branch at +{from:#x} jumps to +{to:#x}, inside the bytes the jump replaces")]
    BranchIntoPatch { from: u64, to: u64 },
    /// A loop in the function jumps back to its entry, so every iteration
    /// would run the probe again.
    #[error(
        "a branch at +{from:#x} jumps back to +{to:#x}, the function's entry: \
         every iteration of that loop would re-enter the probe"
    )]
    LoopToEntry { from: u64, to: u64 },
    /// A displaced branch lands inside one of the other displaced
    /// instructions rather than at its start.
    #[error(
        "a branch at +{from:#x} jumps to +{to:#x}, into the middle of an instruction \
         the jump replaces"
    )]
    BranchIntoInstruction { from: u64, to: u64 },
    /// `loop`/`jrcxz` only have an 8-bit displacement and leave the displaced
    /// bytes.
    #[error(
        "`{mnemonic}` at +{at:#x} branches to {target:#x}, outside the bytes the jump \
         replaces; it has only a short form and is not relocated"
    )]
    ShortOnlyBranch { at: u64, mnemonic: String, target: u64 },
    /// A `RIP`-relative memory operand cannot reach its target from the
    /// trampoline.
    #[error(
        "RIP-relative operand at +{at:#x} refers to {target:#x}, more than 2 GiB from \
         the trampoline at {trampoline:#x}"
    )]
    RipTooFar { at: u64, target: u64, trampoline: u64 },
    /// [`relocate`] was given a range that is not whole instructions.
    #[error("the {len} displaced bytes at {from:#x} are not whole instructions: {why}")]
    BadRange { from: u64, len: usize, why: String },
    /// iced-x86's block encoder refused, for a reason not classified above.
    #[error("iced-x86 could not re-encode the displaced instructions for {trampoline:#x}: {message}")]
    Encode { trampoline: u64, message: String },
}

fn short_function_message(size: u64, padding: u64, patch_offset: u64, last: Option<&(u64, String)>) -> String {
    let follows = match padding {
        0 => "no padding follows it".to_string(),
        1 => "only 1 byte of padding follows it".to_string(),
        n => format!("only {n} bytes of padding follow it"),
    };
    let need = (patch_offset + JUMP_LEN as u64).saturating_sub(size);
    let ends = match last {
        Some((at, mnemonic)) => format!(
            "; its instruction at +{at:#x} (`{mnemonic}`) ends it inside the bytes the jump \
             replaces"
        ),
        None => String::new(),
    };
    format!(
        "the function is {size} bytes long and {follows}{ends} (the 5-byte jump at \
         +{patch_offset:#x} needs {need} more)"
    )
}

/// Decide where and how to hook a function, given its bytes as they are in
/// memory.
///
/// `code` starts at `entry`; `size` is the symbol size; `code` may extend
/// past `size` by up to 16 bytes of what follows, so that padding after a
/// short function can be used. When the caller knows where the next symbol
/// starts it should end `code` there: bytes past the next 16-byte boundary are
/// never used, but a next function that starts earlier would only be
/// protected by that slice end.
///
/// Refuses (see [`Refusal`]):
///  - bytes that do not decode, anywhere in the function;
///  - a displaced range that runs past the function's end into bytes that are
///    not padding (`int3`, or a `nop` form: `90`, `66 90`, `0f 1f ...`) or
///    past the next 16-byte boundary;
///  - any branch in `[entry, entry+size)` to an address strictly inside
///    `(patch_at, patch_at+displaced)`, or a jump (not a call: recursion is a
///    real call and should fire the probe) back to `[entry, patch_at]`, which
///    would re-enter the probe on every iteration. Branches *from* the
///    displaced instructions to the start of one of them are fine: the
///    relocated copy keeps them inside itself;
///  - displaced instructions that [`relocate`] cannot move whatever the
///    trampoline's address (`loop`/`jrcxz` leaving the range, branches into
///    the middle of a displaced instruction).
///
/// A `ret` (or any other instruction) among the displaced ones is fine: a
/// 1-byte `ret` followed by padding is hooked by displacing the `ret` and
/// four bytes of padding.
pub fn plan(code: &[u8], entry: u64, size: u64) -> Result<Hook, Refusal> {
    if size == 0 {
        return Err(Refusal::UnknownSize);
    }
    if (code.len() as u64) < size {
        return Err(Refusal::Truncated { have: code.len(), size });
    }
    let patch_offset: u64 =
        if size >= ENDBR64.len() as u64 && code.starts_with(&ENDBR64) { ENDBR64.len() as u64 } else { 0 };
    let patch_at = entry.wrapping_add(patch_offset);

    // Padding may be used up to the first 16-byte boundary at or after the
    // function's end, and never past what the caller gave us.
    let misalign = entry % FUNCTION_ALIGN;
    let aligned_end = (misalign + size).div_ceil(FUNCTION_ALIGN) * FUNCTION_ALIGN - misalign;
    let usable = aligned_end.min(code.len() as u64);

    // The displaced instructions: whole instructions covering >= 5 bytes.
    let mut displaced_instrs = Vec::new();
    let mut offset = patch_offset;
    let mut last_real: Option<(u64, String)> = None;
    while offset - patch_offset < JUMP_LEN as u64 {
        let limit = if offset < size { code.len() } else { usable as usize };
        let ins = decode_one(&code[..limit], entry, offset);
        if offset < size {
            let ins = match ins {
                Some(ins) => ins,
                None if end_of_bytes(&code[..limit], entry, offset) => {
                    return Err(Refusal::RunsPastEnd { offset, size });
                }
                None => return Err(Refusal::Undecodable { offset }),
            };
            let end = offset + ins.len() as u64;
            if end > size {
                return Err(Refusal::RunsPastEnd { offset, size });
            }
            last_real = Some((offset, mnemonic_name(ins.mnemonic())));
            displaced_instrs.push(ins);
            offset = end;
        } else {
            match ins {
                Some(ins) if is_padding(&ins) => {
                    displaced_instrs.push(ins);
                    offset += ins.len() as u64;
                }
                _ => {
                    return Err(Refusal::ShortFunction { size, padding: offset - size, patch_offset, last: last_real });
                }
            }
        }
    }
    let displaced = (offset - patch_offset) as usize;
    check_displaced(&displaced_instrs, patch_at, displaced, entry)?;

    // Every branch in the function: none may land in the overwritten bytes.
    let patch_end = patch_at.wrapping_add(displaced as u64);
    let body = &code[..size as usize];
    let mut decoder = Decoder::with_ip(64, body, entry, DecoderOptions::NONE);
    while decoder.can_decode() {
        let at = decoder.position() as u64;
        let ins = decoder.decode();
        if ins.is_invalid() {
            return Err(if decoder.last_error() == DecoderError::NoMoreBytes {
                Refusal::RunsPastEnd { offset: at, size }
            } else {
                Refusal::Undecodable { offset: at }
            });
        }
        let Some(target) = near_branch_target(&ins) else { continue };
        let to = target.wrapping_sub(entry);
        // A branch among the displaced instructions is relocated with them:
        // targets in `[patch_at, patch_end)` stay inside the relocated copy
        // (`check_displaced` vetted them), so only a jump to the `endbr64`
        // before the patch re-enters the probe.
        let displaced_branch = ins.ip() >= patch_at && ins.ip() < patch_end;
        let reentry_end = if displaced_branch { patch_at } else { patch_at.wrapping_add(1) };
        if !displaced_branch && target > patch_at && target < patch_end {
            return Err(Refusal::BranchIntoPatch { from: at, to });
        }
        if target >= entry && target < reentry_end && !ins.is_call_near() {
            return Err(Refusal::LoopToEntry { from: at, to });
        }
    }

    Ok(Hook { patch_at, displaced })
}

/// Where no jump fits ([`plan_loop`] refused): a one-byte trap (`int3`)
/// over the function's first instruction (after an `endbr64`), which its
/// trampoline runs relocated. Refused where a trap cannot do better: bytes
/// that do not decode, an instruction that cannot be relocated, a branch
/// into the middle of that instruction, and a loop back to the site (the
/// probe would run on every iteration: [`plan_loop`] handles the loops
/// that can be handled).
pub fn plan_trap(code: &[u8], entry: u64, size: u64) -> Result<Hook, Refusal> {
    if size == 0 {
        return Err(Refusal::UnknownSize);
    }
    if (code.len() as u64) < size {
        return Err(Refusal::Truncated { have: code.len(), size });
    }
    let patch_offset: u64 =
        if size > ENDBR64.len() as u64 && code.starts_with(&ENDBR64) { ENDBR64.len() as u64 } else { 0 };
    let patch_at = entry + patch_offset;
    let ins = decode_one(&code[..size as usize], entry, patch_offset).ok_or_else(|| {
        if end_of_bytes(&code[..size as usize], entry, patch_offset) {
            Refusal::RunsPastEnd { offset: patch_offset, size }
        } else {
            Refusal::Undecodable { offset: patch_offset }
        }
    })?;
    let displaced = ins.len();
    check_displaced(&[ins], patch_at, displaced, entry)?;
    let end = patch_at + displaced as u64;
    let mut decoder = Decoder::with_ip(64, &code[..size as usize], entry, DecoderOptions::NONE);
    while decoder.can_decode() {
        let at = decoder.position() as u64;
        let i = decoder.decode();
        if i.is_invalid() {
            return Err(Refusal::Undecodable { offset: at });
        }
        let Some(target) = near_branch_target(&i) else { continue };
        let to = target.wrapping_sub(entry);
        if target > patch_at && target < end {
            return Err(Refusal::BranchIntoInstruction { from: at, to });
        }
        if target >= entry && target <= patch_at && !i.is_call_near() && i.ip() != patch_at {
            return Err(Refusal::LoopToEntry { from: at, to });
        }
    }
    Ok(Hook { patch_at, displaced })
}

/// Whether a refusal of [`plan_loop`] is one a trap ([`plan_trap`]) may
/// do better than: no room for the jump, or a branch into its bytes.
pub fn trap_may_fit(why: &Refusal) -> bool {
    matches!(why, Refusal::ShortFunction { .. } | Refusal::BranchIntoPatch { .. } | Refusal::RunsPastEnd { .. })
}

/// A function whose loop jumps back to the patch site ([`plan`] refuses it
/// with [`Refusal::LoopToEntry`]): the loop must run the function's first
/// instructions, not the probe again. Either the displaced instructions
/// grow to take in every such branch (a small loop then runs entirely in
/// the trampoline's relocated copy), or they cover at least 10 bytes and
/// every such branch is retargeted to a second jump at `patch_at + 5`,
/// which the caller points at the relocated copy (past the probe). Loops
/// back to an `endbr64` before the patch site stay refused.
pub fn plan_loop(code: &[u8], entry: u64, size: u64) -> Result<(Hook, Vec<Retarget>), Refusal> {
    let refusal = match plan(code, entry, size) {
        Err(r @ Refusal::LoopToEntry { .. }) => r,
        other => return other.map(|h| (h, Vec::new())),
    };
    let patch_offset: u64 = if size >= 4 && code.starts_with(&ENDBR64) { 4 } else { 0 };
    let patch_at = entry + patch_offset;
    let body = code.get(..size as usize).ok_or(Refusal::Truncated { have: code.len(), size })?;
    let all: Vec<Instruction> = {
        let mut d = Decoder::with_ip(64, body, entry, DecoderOptions::NONE);
        let mut v = Vec::new();
        while d.can_decode() {
            let i = d.decode();
            if i.is_invalid() {
                return Err(refusal);
            }
            v.push(i);
        }
        v
    };
    let loops: Vec<&Instruction> = all
        .iter()
        .filter(|i| !i.is_call_near() && near_branch_target(i).is_some_and(|t| t >= entry && t <= patch_at))
        .collect();
    if loops.iter().any(|i| near_branch_target(i) != Some(patch_at)) {
        // Back to the `endbr64`: not handled.
        return Err(refusal);
    }
    // Instructions from the patch site covering at least `need` bytes.
    let cover = |need: u64| -> Option<(usize, Vec<Instruction>)> {
        let mut len = 0u64;
        let mut v = Vec::new();
        for i in all.iter().filter(|i| i.ip() >= patch_at) {
            if len >= need {
                break;
            }
            len += i.len() as u64;
            v.push(*i);
        }
        (len >= need).then_some((len as usize, v))
    };
    // Nothing outside the displaced bytes may land inside them, except the
    // loops' jumps to the patch site itself; and no thread may wait inside
    // them: a call or system call among them must be the last.
    let clear = |len: usize| {
        let end = patch_at + len as u64;
        let branches = all.iter().all(|i| {
            let inside = i.ip() >= patch_at && i.ip() < end;
            inside || near_branch_target(i).is_none_or(|t| t <= patch_at || t >= end)
        });
        let waits = all.iter().any(|i| {
            let returns_inside = i.ip() >= patch_at && i.next_ip() < end;
            returns_inside
                && (matches!(i.flow_control(), iced_x86::FlowControl::Call | iced_x86::FlowControl::IndirectCall)
                    || matches!(i.mnemonic(), Mnemonic::Syscall | Mnemonic::Int | Mnemonic::Sysenter))
        });
        branches && !waits
    };
    // 1. Take the loops in.
    let last = loops.iter().map(|i| i.next_ip() - patch_at).max().unwrap_or(0);
    if last <= 32 {
        if let Some((len, instrs)) = cover(last) {
            if clear(len) && check_displaced(&instrs, patch_at, len, entry).is_ok() {
                return Ok((Hook { patch_at, displaced: len }, Vec::new()));
            }
        }
    }
    // 2. A second jump at +5 for the loops.
    let Some((len, instrs)) = cover(10) else { return Err(refusal) };
    if !clear(len) || check_displaced(&instrs, patch_at, len, entry).is_err() {
        return Err(refusal);
    }
    let slot = patch_at + JUMP_LEN as u64;
    let mut retargets = Vec::new();
    for i in loops.iter().filter(|i| i.ip() < patch_at || i.ip() >= patch_at + len as u64) {
        let off = (i.ip() - entry) as usize;
        let bytes = &code[off..off + i.len()];
        // The displacement is the instruction's last byte (a rel8 form,
        // prefixes or not) or its last 4 bytes (rel32).
        let short = i.is_jmp_short() || i.is_jcc_short() || i.is_jcx_short() || i.is_loop() || i.is_loopcc();
        let width = if short { 1 } else { 4 };
        if i.len() <= width {
            return Err(refusal);
        }
        let rel = slot as i64 - i.next_ip() as i64;
        let patched = if width == 1 {
            vec![i8::try_from(rel).map_err(|_| refusal.clone())? as u8]
        } else {
            i32::try_from(rel).map_err(|_| refusal.clone())?.to_le_bytes().to_vec()
        };
        let at = i.next_ip() - width as u64;
        retargets.push(Retarget { at, original: bytes[bytes.len() - width..].to_vec(), patched });
    }
    Ok((Hook { patch_at, displaced: len }, retargets))
}

/// Re-encode the displaced instructions so they run at another address.
///
/// The instructions are decoded from `original` at address `from`, exactly
/// `len` bytes, and re-encoded to run at address `to`, followed by a `jmp`
/// back to `from + len`. RIP-relative memory operands and relative calls and
/// jumps (short or near, conditional or not) are fixed up by iced-x86's
/// `BlockEncoder`; branch targets inside the displaced range are kept
/// pointing at the relocated copy. `loop`/`jrcxz` are refused unless their
/// target is inside the displaced range.
///
/// Out of rel32 range, the encoder turns branches into `jmp [rip+x]` with the
/// 8-byte target stored after the code (so the result is not all
/// instructions), and may encode a `RIP`-relative operand whose target lies
/// below 4 GiB as `[eip+disp32]`, which wraps to the same address. A
/// `RIP`-relative operand it cannot reach is a [`Refusal::RipTooFar`].
///
/// A relocated `call rel32` calls the same target but pushes a return address
/// inside the trampoline, so the callee returns into the relocated copy,
/// which then jumps back. That is correct, but an unwinder or a backtrace
/// taken inside that callee sees the trampoline as its caller.
///
/// Returns the bytes.
pub fn relocate(original: &[u8], from: u64, len: usize, to: u64) -> Result<Vec<u8>, Refusal> {
    relocate_mapped(original, from, len, to).map(|r| r.bytes)
}

/// Where the copy [`relocate`] makes at `to` has the instruction that
/// starts at `pc` in the original (`from..from+len`): a thread stopped
/// there can go on in the copy instead, the same instructions in the same
/// order, without a single step. None for a `pc` that starts no
/// instruction there.
pub fn relocated_pc(original: &[u8], from: u64, len: usize, to: u64, pc: u64) -> Option<u64> {
    let map = relocate_mapped(original, from, len, to).ok()?.map;
    map.into_iter().find(|&(ip, _)| ip == pc).map(|(_, at)| at)
}

/// [`relocate`], with where each instruction of the copy came from. An
/// unwinder in the copy takes each instruction for its original
/// (`crate::owncode`).
pub fn relocate_with_map(original: &[u8], from: u64, len: usize, to: u64) -> Result<(Vec<u8>, CopyMap), Refusal> {
    let Mapped { bytes, map, jmp, starts } = relocate_mapped(original, from, len, to)?;
    let back = from.wrapping_add(len as u64);
    let mut out = CopyMap::default();
    for &(ip, at) in &map {
        if starts.contains(&ip) {
            out.map.push((at, ip));
        } else {
            // The emulated call's instructions after its first.
            let (lo, _) = out.calling.get_or_insert((at, jmp));
            *lo = (*lo).min(at);
        }
    }
    out.map.push((jmp, back));
    out.map.sort_by_key(|m| m.0);
    Ok((bytes, out))
}

/// What [`relocate_mapped`] gives.
struct Mapped {
    /// The copy.
    bytes: Vec<u8>,
    /// (original address, copy's address) of each instruction encoded,
    /// the emulated call's several among them.
    map: Vec<(u64, u64)>,
    /// Where the jump back is.
    jmp: u64,
    /// The original instructions' addresses.
    starts: std::collections::HashSet<u64>,
}

/// [`relocate`], with each instruction's original address and its copy's,
/// and where the jump back is.
fn relocate_mapped(original: &[u8], from: u64, len: usize, to: u64) -> Result<Mapped, Refusal> {
    let bad = |why: String| Refusal::BadRange { from, len, why };
    if len == 0 {
        return Err(bad("the range is empty".to_string()));
    }
    if original.len() < len {
        return Err(bad(format!("only {} bytes were given", original.len())));
    }
    let mut instrs = Vec::new();
    let mut decoder = Decoder::with_ip(64, &original[..len], from, DecoderOptions::NONE);
    while decoder.can_decode() {
        let at = decoder.position() as u64;
        let ins = decoder.decode();
        if ins.is_invalid() {
            return Err(if decoder.last_error() == DecoderError::NoMoreBytes {
                bad(format!("the range ends inside the instruction at +{at:#x}"))
            } else {
                Refusal::Undecodable { offset: at }
            });
        }
        instrs.push(ins);
    }
    check_displaced(&instrs, from, len, from)?;
    let starts = instrs.iter().map(|i| i.ip()).collect();
    let instrs = call_from_the_original(instrs, from.wrapping_add(len as u64));

    let encoded = BlockEncoder::encode(
        64,
        InstructionBlock::new(&instrs, to),
        BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS,
    )
    .map_err(|e| classify_encode_error(&instrs, from, to, e.to_string()))?;
    let map: Vec<(u64, u64)> = instrs
        .iter()
        .zip(&encoded.new_instruction_offsets)
        .filter(|&(_, &off)| off != u32::MAX)
        .map(|(i, &off)| (i.ip(), to.wrapping_add(u64::from(off))))
        .collect();
    let mut bytes = encoded.code_buffer;

    // The jump back is appended by hand rather than given to the block
    // encoder: an instruction whose own address equals its target is encoded
    // as a jump to itself, and `from + len` is the natural address to give it.
    let back = from.wrapping_add(len as u64);
    let at = to.wrapping_add(bytes.len() as u64);
    match jump(at, back) {
        Some(jmp) => bytes.extend_from_slice(&jmp),
        None => {
            // Out of rel32 range: `jmp qword ptr [rip+0]` and the address.
            bytes.extend_from_slice(&[0xff, 0x25, 0, 0, 0, 0]);
            bytes.extend_from_slice(&back.to_le_bytes());
        }
    }
    Ok(Mapped { bytes, map, jmp: at, starts })
}

/// A call that ends the displaced instructions (`push rbx; call f` is a
/// common prologue) would push a return address in the trampoline: the
/// unwinder has no frame description for it, so a C++ exception thrown in
/// the callee would end the program, and backtraces would stop there. It
/// returns to `back`, original code the patch does not touch, so it becomes
/// a push of `back` and a jump: the callee sees exactly the stack the
/// original call gives it (its `ret` is mispredicted once per call, the
/// price of a return address the unwinder knows). Calls through memory
/// addressed from rsp, which the push would move, are left as they are.
fn call_from_the_original(mut instrs: Vec<Instruction>, back: u64) -> Vec<Instruction> {
    use iced_x86::{Code, MemoryOperand, Register};
    let Some(last) = instrs.last().copied() else { return instrs };
    if last.next_ip() != back || !matches!(last.mnemonic(), Mnemonic::Call) {
        return instrs;
    }
    let jump = match last.code() {
        Code::Call_rel32_64 => Instruction::with_branch(Code::Jmp_rel32_64, last.near_branch64()).ok(),
        Code::Call_rm64 if last.op0_kind() == OpKind::Register => {
            Instruction::with1(Code::Jmp_rm64, last.op0_register()).ok()
        }
        Code::Call_rm64 if last.memory_base() != Register::RSP && last.memory_index() != Register::RSP => {
            let mut j = last;
            j.set_code(Code::Jmp_rm64);
            Some(j)
        }
        _ => None,
    };
    let Some(jump) = jump else { return instrs };
    let rsp = |d: i64| MemoryOperand::with_base_displ(Register::RSP, d);
    let push = [
        Instruction::with2(Code::Lea_r64_m, Register::RSP, rsp(-8)),
        Instruction::with2(Code::Mov_rm32_imm32, rsp(0), back as u32),
        Instruction::with2(Code::Mov_rm32_imm32, rsp(4), (back >> 32) as u32),
    ];
    if push.iter().any(Result::is_err) {
        return instrs;
    }
    instrs.pop();
    // A branch among the displaced instructions to the call comes to the
    // push: it takes the call's address (the others take addresses inside
    // the call's bytes, which nothing else has).
    for (k, mut i) in push.into_iter().flatten().chain([jump]).enumerate() {
        i.set_ip(last.ip() + k as u64);
        instrs.push(i);
    }
    instrs
}

/// [`relocate_with_map`] at a function's entry (aarch64 may use scratch
/// registers there; x86_64 never needs them).
pub fn relocate_at_entry(original: &[u8], from: u64, len: usize, to: u64) -> Result<(Vec<u8>, CopyMap), Refusal> {
    relocate_with_map(original, from, len, to)
}

/// A jump placed within reach of a site whose trampoline is out of reach
/// (aarch64's veneers): None here. A code region is always within a
/// `jmp rel32` of the modules it serves (±2 GiB, [`REACH`]), and a
/// trampoline farther away could not relocate RIP-relative operands.
pub fn far_jump(_target: u64) -> Option<Vec<u8>> {
    None
}

/// `check`, the bytes of a Go function's stack-bound check as pass 2
/// found it (`artifact::GoSite::check`, in the live process): Ok when they
/// are still that check, instructions on R12, RSP and `[r14+0x10]` that
/// end with its `jbe` to `morestack` (the trampoline runs them, its own
/// branches going to their relocated copies).
pub fn go_check(check: &[u8]) -> Result<(), String> {
    let not = || "its entry is not the Go stack check pass 2 found there".to_string();
    let mut dec = Decoder::new(64, check, DecoderOptions::NONE);
    let mut ins = Instruction::default();
    while dec.can_decode() {
        dec.decode_out(&mut ins);
        let ok = match ins.mnemonic() {
            Mnemonic::Cmp => ins.memory_base() == Register::R14 && ins.memory_displacement64() == 0x10,
            Mnemonic::Lea | Mnemonic::Mov | Mnemonic::Sub => {
                ins.op0_register() == Register::R12 && !ins.is_ip_rel_memory_operand()
            }
            Mnemonic::Jb => dec.can_decode(),
            Mnemonic::Jbe => !dec.can_decode(),
            _ => false,
        };
        if !ok || ins.is_invalid() {
            return Err(not());
        }
    }
    (ins.mnemonic() == Mnemonic::Jbe).then_some(()).ok_or_else(not)
}

/// `bytes`, a Go function's epilogue as pass 2 found it
/// (`artifact::GoReturn`, in the live process): the instructions its
/// return trampoline runs first (all but the `ret`), when they are still
/// `mov rbp, [rsp+X]; add rsp, Y; ret`, with `nop`s before the `ret`.
pub fn go_epilogue(bytes: &[u8]) -> Result<Vec<u8>, String> {
    let not = || "it is not the Go epilogue pass 2 found there".to_string();
    let mut dec = Decoder::new(64, bytes, DecoderOptions::NONE);
    let (mov, add) = (dec.decode(), dec.decode());
    let mut ret = dec.decode();
    while ret.mnemonic() == Mnemonic::Nop {
        ret = dec.decode();
    }
    let frame = mov.mnemonic() == Mnemonic::Mov
        && mov.op0_register() == Register::RBP
        && mov.memory_base() == Register::RSP
        && mov.memory_index() == Register::None
        && add.mnemonic() == Mnemonic::Add
        && add.op0_register() == Register::RSP
        && matches!(add.op1_kind(), OpKind::Immediate8to64 | OpKind::Immediate32to64)
        && ret.mnemonic() == Mnemonic::Ret
        && ret.len() == 1
        && ret.next_ip() as usize == bytes.len();
    frame.then(|| bytes[..bytes.len() - 1].to_vec()).ok_or_else(not)
}

/// How a landing pad signs the return address (aarch64's pointer
/// authentication): never on x86_64.
pub fn signs_return(_pad: u32) -> i32 {
    0
}

/// The length of [`jump_anywhere`]'s code.
pub const JUMP_ANYWHERE_LEN: usize = 14;

/// `jmp qword ptr [rip+0]` and `target`: a jump anywhere (14 bytes), which
/// changes no register.
pub fn jump_anywhere(target: u64) -> [u8; JUMP_ANYWHERE_LEN] {
    let mut b = [0u8; JUMP_ANYWHERE_LEN];
    b[..6].copy_from_slice(&[0xff, 0x25, 0, 0, 0, 0]);
    b[6..].copy_from_slice(&target.to_le_bytes());
    b
}

/// How far a code region may be from the code that jumps to it: a `jmp
/// rel32`'s ±2 GiB, less room for the region itself.
pub const REACH: u64 = 3 << 29;

/// The patch jump: `jmp rel32` from `at` to `target` (5 bytes), or None
/// if out of ±2 GiB range.
pub fn jump(at: u64, target: u64) -> Option<[u8; JUMP_LEN]> {
    let next = i128::from(at) + JUMP_LEN as i128;
    let rel = i32::try_from(i128::from(target) - next).ok()?;
    let [a, b, c, d] = rel.to_le_bytes();
    Some([0xe9, a, b, c, d])
}

/// The shortest jump from `at` to `target` (`jmp rel8`, 2 bytes), or None
/// out of its ±127 bytes.
pub fn short_jump(at: u64, target: u64) -> Option<Vec<u8>> {
    let rel = i8::try_from(target as i64 - (at as i64 + 2)).ok()?;
    Some(vec![0xeb, rel as u8])
}

/// A direct call's length (`call rel32`).
pub const DIRECT_CALL_LEN: usize = 5;

/// A direct call (`call rel32`) from `at` to `target`, or None out of reach.
pub fn direct_call(at: u64, target: u64) -> Option<[u8; DIRECT_CALL_LEN]> {
    let mut call = jump(at, target)?;
    call[0] = 0xe8;
    Some(call)
}

/// Where the direct call `bytes` (at `at`, [`DIRECT_CALL_LEN`] bytes)
/// goes, or None if they are not one.
pub fn direct_call_target(bytes: &[u8], at: u64) -> Option<u64> {
    match bytes {
        [0xe8, a, b, c, d, ..] => {
            let next = at.wrapping_add(DIRECT_CALL_LEN as u64);
            Some(next.wrapping_add(i32::from_le_bytes([*a, *b, *c, *d]) as i64 as u64))
        }
        _ => None,
    }
}

/// A signal handler's entry that passes `region` as a fourth argument
/// (`rcx`) to `handler` (`rt_crash`): `movabs rcx, region; movabs rax,
/// handler; jmp rax`.
pub fn signal_stub(region: u64, handler: u64) -> Vec<u8> {
    let mut b = vec![0x48, 0xb9];
    b.extend_from_slice(&region.to_le_bytes());
    b.extend_from_slice(&[0x48, 0xb8]);
    b.extend_from_slice(&handler.to_le_bytes());
    b.extend_from_slice(&[0xff, 0xe0]);
    b
}

/// The `sa_restorer` of a handler installed with the raw `rt_sigaction`:
/// `mov eax, 15 (rt_sigreturn); syscall`.
pub const SIGRETURN: [u8; 7] = [0xb8, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05];

/// Checks what makes displaced instructions unrelocatable wherever the
/// trampoline is. `start..start+len` is the displaced range; offsets in the
/// refusal are from `base`.
fn check_displaced(instrs: &[Instruction], start: u64, len: usize, base: u64) -> Result<(), Refusal> {
    let end = start.wrapping_add(len as u64);
    for ins in instrs {
        let Some(target) = near_branch_target(ins) else { continue };
        let inside = target >= start && target < end;
        if inside {
            // The block encoder relinks a target only if it is the address of
            // one of the instructions it encodes.
            if !instrs.iter().any(|other| other.ip() == target) {
                return Err(Refusal::BranchIntoInstruction {
                    from: ins.ip().wrapping_sub(base),
                    to: target.wrapping_sub(base),
                });
            }
        } else if ins.is_loop() || ins.is_loopcc() || ins.is_jcx_short() {
            return Err(Refusal::ShortOnlyBranch {
                at: ins.ip().wrapping_sub(base),
                mnemonic: mnemonic_name(ins.mnemonic()),
                target,
            });
        }
    }
    Ok(())
}

/// Names the displaced instruction that the encoder could not place, if it is
/// a `RIP`-relative operand out of reach.
fn classify_encode_error(instrs: &[Instruction], from: u64, to: u64, message: String) -> Refusal {
    let limit = i128::from(i32::MAX) - RIP_SLACK;
    let farthest = instrs
        .iter()
        .filter(|ins| ins.is_ip_rel_memory_operand())
        .map(|ins| {
            let new_ip = i128::from(to) + i128::from(ins.ip().wrapping_sub(from));
            let target = ins.ip_rel_memory_address();
            ((i128::from(target) - new_ip).abs(), ins, target)
        })
        .max_by_key(|(distance, _, _)| *distance);
    match farthest {
        Some((distance, ins, target)) if distance > limit => {
            Refusal::RipTooFar { at: ins.ip().wrapping_sub(from), target, trampoline: to }
        }
        _ => Refusal::Encode { trampoline: to, message },
    }
}

/// Decodes the instruction at `offset` in `code` (which starts at `entry`).
fn decode_one(code: &[u8], entry: u64, offset: u64) -> Option<Instruction> {
    let rest = code.get(offset as usize..)?;
    if rest.is_empty() {
        return None;
    }
    let mut decoder = Decoder::with_ip(64, rest, entry.wrapping_add(offset), DecoderOptions::NONE);
    let ins = decoder.decode();
    (!ins.is_invalid()).then_some(ins)
}

/// Whether decoding at `offset` failed only because the bytes ran out.
fn end_of_bytes(code: &[u8], entry: u64, offset: u64) -> bool {
    let Some(rest) = code.get(offset as usize..) else { return true };
    let mut decoder = Decoder::with_ip(64, rest, entry.wrapping_add(offset), DecoderOptions::NONE);
    rest.is_empty() || {
        let _ = decoder.decode();
        decoder.last_error() == DecoderError::NoMoreBytes
    }
}

/// The absolute target of a relative branch (`jmp`, `jcc`, `call`, `loop`,
/// `jrcxz`, `xbegin`), if `ins` is one.
fn near_branch_target(ins: &Instruction) -> Option<u64> {
    match ins.op0_kind() {
        OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64 => Some(ins.near_branch_target()),
        _ => None,
    }
}

/// Alignment padding compilers and assemblers put between functions.
fn is_padding(ins: &Instruction) -> bool {
    matches!(ins.mnemonic(), Mnemonic::Int3 | Mnemonic::Nop)
}

fn mnemonic_name(mnemonic: Mnemonic) -> String {
    format!("{mnemonic:?}").to_lowercase()
}

#[cfg(test)]
mod tests {
    #[test]
    fn short_jumps_and_direct_calls() {
        use super::{direct_call, direct_call_target, short_jump};
        assert_eq!(short_jump(0x1000, 0x1010), Some(vec![0xeb, 0x0e]));
        assert_eq!(short_jump(0x1000, 0x0f82), Some(vec![0xeb, 0x80]));
        assert_eq!(short_jump(0x1000, 0x1082), None);
        for (at, to) in [(0x40_0000u64, 0x40_1000u64), (0x40_1000, 0x40_0000)] {
            let call = direct_call(at, to).expect("in reach");
            assert_eq!(call[0], 0xe8);
            assert_eq!(direct_call_target(&call, at), Some(to));
        }
        assert_eq!(direct_call_target(&[0xe9, 0, 0, 0, 0], 0x1000), None);
    }

    /// A call that ends the displaced instructions is emulated (push the
    /// return address, jump): its first instruction stands for the call,
    /// the rest are "under way", the jump back for the instruction after.
    #[test]
    fn a_final_call_is_mapped_as_under_way() {
        // push rbx; call +0x100
        let code = [0x53, 0xe8, 0x00, 0x01, 0x00, 0x00];
        let (_, m) = relocate_with_map(&code, 0x1000, 6, 0x9000).unwrap();
        assert_eq!(m.map[0], (0x9000, 0x1000));
        assert_eq!(m.map[1], (0x9001, 0x1001));
        let (lo, hi) = m.calling.expect("a call under way");
        let last = *m.map.last().unwrap();
        assert!(lo > 0x9001 && lo < hi && hi == last.0, "{m:?}");
        assert_eq!(last.1, 0x1006);
        // Without a call: nothing under way.
        let (_, m) = relocate_with_map(&[0x53, 0x48, 0x89, 0xe5, 0x90], 0x1000, 5, 0x9000).unwrap();
        assert_eq!(m.calling, None);
        assert_eq!(m.map.len(), 4);
    }

    use super::*;
    use iced_x86::{Code, FlowControl, Register};

    const ENTRY: u64 = 0x0040_1000;
    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    fn decode_all(bytes: &[u8], ip: u64) -> Vec<Instruction> {
        let mut decoder = Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE);
        let mut out = Vec::new();
        while decoder.can_decode() {
            let ins = decoder.decode();
            assert!(!ins.is_invalid(), "relocated bytes do not decode: {bytes:02x?}");
            out.push(ins);
        }
        out
    }

    /// Plans, relocates to `to` and decodes the result.
    fn hook_and_relocate(code: &[u8], size: u64, to: u64) -> (Hook, Vec<Instruction>) {
        let hook = plan(code, ENTRY, size).expect("hookable");
        let start = (hook.patch_at - ENTRY) as usize;
        let bytes = relocate(&code[start..], hook.patch_at, hook.displaced, to).expect("relocates");
        (hook, decode_all(&bytes, to))
    }

    fn assert_jumps_back(ins: &Instruction, target: u64) {
        assert_eq!(ins.mnemonic(), Mnemonic::Jmp);
        assert_eq!(ins.near_branch_target(), target);
    }

    #[test]
    fn the_signal_stub_passes_the_region_in_rcx() {
        let stub = signal_stub(0x1122_3344_5566_7788, 0x7f00_0000_1000);
        let ins = decode_all(&stub, 0x1000);
        let text: Vec<String> = ins.iter().map(|i| format!("{i}")).collect();
        assert_eq!(text, ["mov rcx,1122334455667788h", "mov rax,7F0000001000h", "jmp rax"]);
        let ret = decode_all(&SIGRETURN, 0);
        let text: Vec<String> = ret.iter().map(|i| format!("{i}")).collect();
        assert_eq!(text, ["mov eax,0Fh", "syscall"]);
    }

    #[test]
    fn a_trap_covers_the_first_instruction_only() {
        // ret, then the next function: no room for a jump.
        assert_eq!(plan_trap(&[0xc3, 0x55], 0x1000, 1), Ok(Hook { patch_at: 0x1000, displaced: 1 }));
        // After endbr64: mov eax, 1 (5 bytes), ret.
        let code = [0xf3, 0x0f, 0x1e, 0xfa, 0xb8, 1, 0, 0, 0, 0xc3];
        assert_eq!(plan_trap(&code, 0x1000, 10), Ok(Hook { patch_at: 0x1004, displaced: 5 }));
        // xor eax, eax; 1: add eax, 1; cmp eax, edi; jl 1b; ret: the loop
        // into +2 is past the trap's instruction.
        let looper = [0x31, 0xc0, 0x83, 0xc0, 0x01, 0x39, 0xf8, 0x7c, 0xf9, 0xc3];
        assert!(matches!(plan(&looper, 0x1000, 10), Err(Refusal::BranchIntoPatch { from: 7, to: 2 })));
        assert_eq!(plan_trap(&looper, 0x1000, 10), Ok(Hook { patch_at: 0x1000, displaced: 2 }));
    }

    #[test]
    fn a_trap_refuses_a_loop_to_its_site() {
        // 1: dec edi; jnz 1b; ret: every iteration would trap.
        let code = [0xff, 0xcf, 0x75, 0xfc, 0xc3];
        assert!(matches!(plan_trap(&code, 0x1000, 5), Err(Refusal::LoopToEntry { from: 2, to: 0 })));
    }

    #[test]
    fn plain_frame_prologue() {
        let code = [
            0x55, // push rbp
            0x48, 0x89, 0xe5, // mov rbp, rsp
            0x48, 0x83, 0xec, 0x10, // sub rsp, 0x10
            0x89, 0x7d, 0xfc, // mov [rbp-4], edi
            0x8b, 0x45, 0xfc, // mov eax, [rbp-4]
            0xc9, // leave
            0xc3, // ret
        ];
        let to = ENTRY + MIB;
        let (hook, relocated) = hook_and_relocate(&code, code.len() as u64, to);
        assert_eq!(hook, Hook { patch_at: ENTRY, displaced: 8 });
        let bytes = relocate(&code, ENTRY, 8, to).unwrap();
        assert_eq!(&bytes[..8], &code[..8], "position-independent code is copied as is");
        assert_eq!(relocated.len(), 4);
        assert_jumps_back(&relocated[3], ENTRY + 8);
    }

    #[test]
    fn endbr64_is_skipped() {
        let code = [
            0xf3, 0x0f, 0x1e, 0xfa, // endbr64
            0x55, // push rbp
            0x48, 0x89, 0xe5, // mov rbp, rsp
            0x5d, // pop rbp
            0xc3, // ret
        ];
        let (hook, relocated) = hook_and_relocate(&code, code.len() as u64, ENTRY - MIB);
        assert_eq!(hook, Hook { patch_at: ENTRY + 4, displaced: 5 });
        let mnemonics: Vec<_> = relocated.iter().map(|i| i.mnemonic()).collect();
        assert_eq!(mnemonics, [Mnemonic::Push, Mnemonic::Mov, Mnemonic::Pop, Mnemonic::Jmp]);
        assert_jumps_back(&relocated[3], ENTRY + 9);
    }

    #[test]
    fn rip_relative_operands_keep_their_targets() {
        let code = [
            0x48, 0x8b, 0x05, 0x34, 0x12, 0x00, 0x00, // mov rax, [rip+0x1234]
            0x48, 0x8d, 0x3d, 0x00, 0xf0, 0xff, 0xff, // lea rdi, [rip-0x1000]
            0xe8, 0x00, 0x01, 0x00, 0x00, // call +0x100
            0xc3, // ret
        ];
        let original = decode_all(&code, ENTRY);
        let to = ENTRY + MIB;
        let (hook, relocated) = hook_and_relocate(&code, code.len() as u64, to);
        assert_eq!(hook, Hook { patch_at: ENTRY, displaced: 7 });
        assert_eq!(relocated[0].ip_rel_memory_address(), ENTRY + 7 + 0x1234);
        assert_eq!(relocated[0].ip_rel_memory_address(), original[0].ip_rel_memory_address());
        assert_jumps_back(&relocated[1], ENTRY + 7);

        // All three at once, far (but reachable) the other way.
        let to = ENTRY + 0x7000_0000;
        let relocated = decode_all(&relocate(&code, ENTRY, 19, to).unwrap(), to);
        assert_eq!(relocated[0].ip_rel_memory_address(), original[0].ip_rel_memory_address());
        assert_eq!(relocated[1].mnemonic(), Mnemonic::Lea);
        assert_eq!(relocated[1].ip_rel_memory_address(), ENTRY + 14 - 0x1000);
        // The call ends the displaced bytes: it returns to the original
        // code (the return address is pushed, the callee jumped to).
        assert_calls_from_the_original(&relocated[2..6], ENTRY + 19);
        assert_eq!(relocated[5].near_branch_target(), ENTRY + 19 + 0x100);
        assert_jumps_back(&relocated[6], ENTRY + 19);
    }

    /// `lea rsp,[rsp-8]; mov dword [rsp],lo; mov dword [rsp+4],hi; jmp …`:
    /// a call whose return address is `back`.
    fn assert_calls_from_the_original(i: &[Instruction], back: u64) {
        assert_eq!(i[0].code(), Code::Lea_r64_m);
        assert_eq!(
            (i[0].op0_register(), i[0].memory_base(), i[0].memory_displacement64() as i64),
            (Register::RSP, Register::RSP, -8)
        );
        assert_eq!(
            (i[1].code(), i[1].memory_base(), i[1].memory_displacement64(), i[1].immediate32()),
            (Code::Mov_rm32_imm32, Register::RSP, 0, back as u32)
        );
        assert_eq!(
            (i[2].code(), i[2].memory_base(), i[2].memory_displacement64(), i[2].immediate32()),
            (Code::Mov_rm32_imm32, Register::RSP, 4, (back >> 32) as u32)
        );
        assert_eq!(i[3].mnemonic(), Mnemonic::Jmp);
    }

    #[test]
    fn a_call_ending_the_displaced_bytes_returns_to_the_original() {
        let code = [
            0x53, // push rbx
            0xe8, 0x00, 0x01, 0x00, 0x00, // call +0x100
            0x5b, // pop rbx
            0xc3, // ret
        ];
        let to = ENTRY + MIB;
        let (hook, relocated) = hook_and_relocate(&code, code.len() as u64, to);
        assert_eq!(hook, Hook { patch_at: ENTRY, displaced: 6 });
        assert_eq!(relocated[0].mnemonic(), Mnemonic::Push);
        assert_calls_from_the_original(&relocated[1..5], ENTRY + 6);
        assert_eq!(relocated[4].near_branch_target(), ENTRY + 6 + 0x100);
        // Through the GOT (-fno-plt) and through a register: jumps alike;
        // through memory addressed from rsp: left a call.
        for (call, jmp_len) in [(&[0xff, 0x15, 0x10, 0, 0, 0][..], 6), (&[0x41, 0xff, 0xd3][..], 3)] {
            let mut code = vec![0x53, 0x53, 0x53];
            code.extend_from_slice(call);
            let back = ENTRY + code.len() as u64;
            let relocated = decode_all(&relocate(&code, ENTRY, code.len(), to).unwrap(), to);
            assert_calls_from_the_original(&relocated[3..7], back);
            assert_eq!(relocated[6].code(), Code::Jmp_rm64, "{jmp_len}");
            if call[1] == 0x15 {
                assert_eq!(relocated[6].ip_rel_memory_address(), back + 0x10);
            } else {
                assert_eq!(relocated[6].op0_register(), Register::R11);
            }
        }
        let code = [0x53, 0x53, 0xff, 0x54, 0x24, 0x08]; // call [rsp+8]
        let relocated = decode_all(&relocate(&code, ENTRY, code.len(), to).unwrap(), to);
        assert_eq!(relocated[2].flow_control(), FlowControl::IndirectCall);
    }

    #[test]
    fn short_jcc_becomes_near_with_the_same_target() {
        let mut code = vec![
            0x85, 0xff, // test edi, edi
            0x74, 0x10, // je +0x14
            0x31, 0xc0, // xor eax, eax
        ];
        code.resize(0x14, 0x90); // nops up to the je target
        code.extend_from_slice(&[0xb8, 1, 0, 0, 0, 0xc3]); // mov eax, 1; ret
        let to = ENTRY + MIB;
        let (hook, relocated) = hook_and_relocate(&code, code.len() as u64, to);
        assert_eq!(hook, Hook { patch_at: ENTRY, displaced: 6 });
        assert_eq!(relocated[0].mnemonic(), Mnemonic::Test);
        assert_eq!(relocated[1].code(), Code::Je_rel32_64);
        assert_eq!(relocated[1].near_branch_target(), ENTRY + 0x14);
        assert_eq!(relocated[2].mnemonic(), Mnemonic::Xor);
        assert_jumps_back(&relocated[3], ENTRY + 6);
    }

    #[test]
    fn one_byte_ret_with_padding_is_hookable() {
        let mut code = vec![0xc3];
        code.extend_from_slice(&[0xcc; 15]);
        let (hook, relocated) = hook_and_relocate(&code, 1, ENTRY + MIB);
        assert_eq!(hook, Hook { patch_at: ENTRY, displaced: 5 });
        assert_eq!(relocated[0].mnemonic(), Mnemonic::Ret);
        assert_jumps_back(relocated.last().unwrap(), ENTRY + 5);
    }

    #[test]
    fn short_function_with_nop_padding_uses_whole_nops() {
        // mov eax, edi; ret; nop word [rax+rax]; ...
        let code = [0x89, 0xf8, 0xc3, 0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00, 0x90, 0x90];
        let hook = plan(&code, ENTRY, 3).unwrap();
        assert_eq!(hook, Hook { patch_at: ENTRY, displaced: 9 });
    }

    #[test]
    fn short_function_without_padding_is_refused() {
        // ret, then the next function's push rbp; mov rbp, rsp.
        let code = [0xc3, 0x55, 0x48, 0x89, 0xe5];
        let refusal = plan(&code, ENTRY, 1).unwrap_err();
        assert_eq!(
            refusal,
            Refusal::ShortFunction { size: 1, padding: 0, patch_offset: 0, last: Some((0, "ret".to_string())) }
        );
        let message = refusal.to_string();
        assert!(message.contains("1 bytes long and no padding follows it"), "{message}");
        assert!(message.contains("+0x0 (`ret`)"), "{message}");

        // mov eax, edi; ret; one nop; the next function.
        let code = [0x89, 0xf8, 0xc3, 0x90, 0x55, 0x48, 0x89, 0xe5];
        let message = plan(&code, ENTRY, 3).unwrap_err().to_string();
        assert!(message.contains("only 1 byte of padding follows it"), "{message}");
    }

    #[test]
    fn padding_past_the_next_16_byte_boundary_is_not_used() {
        // A `ret` at +0xf of a function at ENTRY: the nops after it belong to
        // the 16-byte slot of whatever follows.
        let mut code = vec![0x90; 15];
        code.push(0xc3);
        code.extend_from_slice(&[0x90; 8]);
        assert!(plan(&code, ENTRY, 16).is_ok(), "the nops at the start are the function's own");
        let ret_alone = &code[15..];
        let refusal = plan(ret_alone, ENTRY + 15, 1).unwrap_err();
        assert!(matches!(refusal, Refusal::ShortFunction { padding: 0, .. }), "{refusal}");
    }

    #[test]
    fn loops_back_to_the_patch_site_are_planned() {
        // A small loop: it moves into the relocated copy whole.
        let code = [
            0x01, 0xf8, // add eax, edi
            0x83, 0xef, 0x01, // sub edi, 1
            0x85, 0xff, // test edi, edi
            0x75, 0xf7, // jne entry
            0xc3, // ret
        ];
        assert_eq!(plan_loop(&code, ENTRY, code.len() as u64), Ok((Hook { patch_at: ENTRY, displaced: 9 }, vec![])));
        // A long loop: 10 bytes displaced, the branch retargeted to +5.
        let mut code = vec![0x01, 0xf8, 0x83, 0xef, 0x01, 0x85, 0xff, 0x8d, 0x40, 0x01]; // add; sub; test; lea eax,[rax+1]
        code.extend(std::iter::repeat_n(0x90, 40)); // nop x40
        code.extend([0x75, 0xcc, 0xc3]); // jne entry (-52); ret
        let (hook, r) = plan_loop(&code, ENTRY, code.len() as u64).unwrap();
        assert_eq!(hook, Hook { patch_at: ENTRY, displaced: 10 });
        assert_eq!(r, vec![Retarget { at: ENTRY + 51, original: vec![0xcc], patched: vec![(5i64 - 52) as i8 as u8] }]);
        // rel32 branches too.
        let mut code = vec![0x01, 0xf8, 0x83, 0xef, 0x01, 0x85, 0xff, 0x8d, 0x40, 0x01];
        code.extend(std::iter::repeat_n(0x90, 200));
        let back = -(210i32 + 6);
        code.extend([0x0f, 0x85]);
        code.extend(back.to_le_bytes());
        code.push(0xc3);
        let (hook, r) = plan_loop(&code, ENTRY, code.len() as u64).unwrap();
        assert_eq!(hook.displaced, 10);
        assert_eq!(r[0].at, ENTRY + 212);
        assert_eq!(r[0].patched, (back + 5).to_le_bytes().to_vec());
    }

    #[test]
    fn loop_back_to_entry_is_refused() {
        let code = [
            0x01, 0xf8, // add eax, edi
            0x83, 0xef, 0x01, // sub edi, 1
            0x85, 0xff, // test edi, edi
            0x75, 0xf7, // jne entry
            0xc3, // ret
        ];
        let refusal = plan(&code, ENTRY, code.len() as u64).unwrap_err();
        assert_eq!(refusal, Refusal::LoopToEntry { from: 7, to: 0 });
        assert!(refusal.to_string().contains("re-enter the probe"), "{refusal}");

        // With endbr64 the loop may go to the endbr64 or past it: both re-enter.
        let mut code = ENDBR64.to_vec();
        code.extend_from_slice(&[0x01, 0xf8, 0x83, 0xef, 0x01, 0x85, 0xff, 0x75, 0xf3, 0xc3]);
        assert_eq!(plan(&code, ENTRY, 14), Err(Refusal::LoopToEntry { from: 11, to: 0 }));
        code[12] = 0xf7;
        assert_eq!(plan(&code, ENTRY, 14), Err(Refusal::LoopToEntry { from: 11, to: 4 }));

        // A displaced jump back to the `endbr64` re-enters too; one back to
        // the patch site stays in the relocated copy.
        let mut code = ENDBR64.to_vec();
        code.extend_from_slice(&[0x85, 0xff, 0x75, 0xf8, 0x90, 0xc3]); // test; jne entry; nop; ret
        assert_eq!(plan(&code, ENTRY, 10), Err(Refusal::LoopToEntry { from: 6, to: 0 }));
        code[7] = 0xfc; // jne entry+4
        assert_eq!(plan(&code, ENTRY, 10), Ok(Hook { patch_at: ENTRY + 4, displaced: 5 }));
    }

    #[test]
    fn recursive_call_to_entry_is_fine() {
        let code = [
            0x48, 0x83, 0xec, 0x08, // sub rsp, 8
            0x90, // nop
            0xe8, 0xf6, 0xff, 0xff, 0xff, // call entry
            0x48, 0x83, 0xc4, 0x08, // add rsp, 8
            0xc3, // ret
        ];
        assert_eq!(plan(&code, ENTRY, 15), Ok(Hook { patch_at: ENTRY, displaced: 5 }));
    }

    #[test]
    fn branch_into_the_displaced_bytes_is_refused() {
        let code = [
            0x48, 0x89, 0xf8, // mov rax, rdi
            0x48, 0x01, 0xf0, // add rax, rsi
            0x48, 0xff, 0xc8, // dec rax
            0x75, 0xf8, // jne +0x3
            0xc3, // ret
        ];
        let refusal = plan(&code, ENTRY, code.len() as u64).unwrap_err();
        assert_eq!(refusal, Refusal::BranchIntoPatch { from: 9, to: 3 });
        assert_eq!(refusal.to_string(), "a branch at +0x9 jumps to +0x3, inside the bytes the jump replaces");
    }

    #[test]
    fn branch_within_the_displaced_bytes_is_relocated_with_them() {
        let code = [
            0x31, 0xc0, // xor eax, eax
            0x74, 0x00, // je +0x4 (the next instruction)
            0x75, 0xfc, // jne +0x2
            0xc3, // ret
        ];
        let to = ENTRY + MIB;
        let (hook, relocated) = hook_and_relocate(&code, code.len() as u64, to);
        assert_eq!(hook, Hook { patch_at: ENTRY, displaced: 6 });
        assert_eq!(relocated[1].near_branch_target(), relocated[2].ip());
        assert_eq!(relocated[2].near_branch_target(), relocated[1].ip());
        assert_jumps_back(&relocated[3], ENTRY + 6);

        // A displaced branch into the middle of a displaced instruction.
        let code = [0xeb, 0x01, 0x48, 0x89, 0xf8, 0xc3]; // jmp +0x3; mov rax, rdi; ret
        assert_eq!(plan(&code, ENTRY, 6), Err(Refusal::BranchIntoInstruction { from: 0, to: 3 }));
        assert_eq!(relocate(&code, ENTRY, 5, ENTRY + MIB), Err(Refusal::BranchIntoInstruction { from: 0, to: 3 }));
    }

    #[test]
    fn loop_leaving_the_displaced_bytes_is_refused() {
        let code = [
            0x90, // nop
            0xe2, 0x10, // loop +0x13
            0x90, 0x90, 0xc3, // nop; nop; ret
        ];
        let refusal = relocate(&code, ENTRY, 5, ENTRY + MIB).unwrap_err();
        assert_eq!(refusal, Refusal::ShortOnlyBranch { at: 1, mnemonic: "loop".into(), target: ENTRY + 0x13 });
        assert_eq!(plan(&code, ENTRY, 6), Err(refusal));
    }

    /// A PIE-like address: above 4 GiB, where iced-x86 cannot fall back to
    /// `[eip+disp32]` (which it uses when a target is below 4 GiB).
    const PIE_ENTRY: u64 = 0x5555_5555_5000;

    #[test]
    fn rip_relative_out_of_range_is_refused() {
        let code = [0x48, 0x8b, 0x05, 0x34, 0x12, 0x00, 0x00, 0xc3]; // mov rax, [rip+0x1234]; ret
        let hook = plan(&code, PIE_ENTRY, 8).unwrap();
        let to = PIE_ENTRY + 3 * GIB;
        let refusal = relocate(&code, hook.patch_at, hook.displaced, to).unwrap_err();
        assert_eq!(refusal, Refusal::RipTooFar { at: 0, target: PIE_ENTRY + 7 + 0x1234, trampoline: to });
        assert!(refusal.to_string().starts_with("RIP-relative operand at +0x0 refers to"));
        let to = PIE_ENTRY - 3 * GIB;
        assert!(matches!(relocate(&code, PIE_ENTRY, 7, to), Err(Refusal::RipTooFar { .. })));
    }

    #[test]
    fn far_branches_use_an_absolute_jump() {
        // Without RIP-relative operands a trampoline out of rel32 range still
        // works: the encoder turns `je` into `jne` over `jmp [rip+x]` with the
        // address stored after the code, and the jump back is `jmp [rip+0]`.
        let code = [0x74, 0x10, 0x48, 0x89, 0xf8, 0xc3]; // je +0x12; mov rax, rdi; ret
        let to = PIE_ENTRY + 3 * GIB;
        let bytes = relocate(&code, PIE_ENTRY, 5, to).unwrap();
        let first = decode_all(&bytes[..8], to);
        assert_eq!(first[0].mnemonic(), Mnemonic::Jne);
        assert_eq!(first[1].mnemonic(), Mnemonic::Jmp);
        assert_eq!(first[0].near_branch_target(), first[1].next_ip());
        let slot = (first[1].ip_rel_memory_address() - to) as usize;
        let stored = u64::from_le_bytes(bytes[slot..slot + 8].try_into().unwrap());
        assert_eq!(stored, PIE_ENTRY + 0x12);
        let tail = &bytes[bytes.len() - 14..];
        assert_eq!(&tail[..6], &[0xff, 0x25, 0, 0, 0, 0]);
        assert_eq!(tail[6..], (PIE_ENTRY + 5).to_le_bytes());
        assert!(jump(to, PIE_ENTRY).is_none());
    }

    #[test]
    fn undecodable_bytes_are_refused() {
        // 0x06 (push es) does not exist in 64-bit mode.
        let code = [0x31, 0xc0, 0x06, 0x90, 0x90, 0xc3];
        let refusal = plan(&code, ENTRY, 6).unwrap_err();
        assert_eq!(refusal, Refusal::Undecodable { offset: 2 });
        assert_eq!(refusal.to_string(), "undecodable instruction at +0x2");
        // Also when the bad bytes are after the displaced ones.
        let code = [0x48, 0x89, 0xf8, 0x48, 0x01, 0xf0, 0xff, 0xff, 0xc3];
        assert_eq!(plan(&code, ENTRY, 9), Err(Refusal::Undecodable { offset: 6 }));
    }

    #[test]
    fn sizes_that_do_not_fit_the_bytes_are_refused() {
        assert_eq!(plan(&[0xc3], ENTRY, 0), Err(Refusal::UnknownSize));
        assert_eq!(plan(&[0xc3], ENTRY, 4), Err(Refusal::Truncated { have: 1, size: 4 }));
        // mov rax, rdi; mov eax, 1 with a size that cuts the second one.
        let code = [0x48, 0x89, 0xf8, 0xb8, 1, 0, 0, 0, 0xcc, 0xcc];
        assert_eq!(plan(&code, ENTRY, 5), Err(Refusal::RunsPastEnd { offset: 3, size: 5 }));
        assert!(matches!(relocate(&code, ENTRY, 5, ENTRY + MIB), Err(Refusal::BadRange { .. })));
        assert!(matches!(relocate(&code, ENTRY, 0, ENTRY + MIB), Err(Refusal::BadRange { .. })));
        assert!(matches!(relocate(&code, ENTRY, 11, ENTRY + MIB), Err(Refusal::BadRange { .. })));
    }

    #[test]
    fn jump_range() {
        assert_eq!(jump(0x1000, 0x1005), Some([0xe9, 0, 0, 0, 0]));
        assert_eq!(jump(0x1000, 0x1000), Some([0xe9, 0xfb, 0xff, 0xff, 0xff]));
        let at = 0x1_0000_0000;
        assert_eq!(jump(at, at + 5 + i32::MAX as u64), Some([0xe9, 0xff, 0xff, 0xff, 0x7f]));
        assert_eq!(jump(at, at + 5 + i32::MAX as u64 + 1), None);
        assert_eq!(jump(at, at + 5 - (1 << 31)), Some([0xe9, 0, 0, 0, 0x80]));
        assert_eq!(jump(at, at + 4 - (1 << 31)), None);
        assert_eq!(jump(u64::MAX - 4, 0), None, "no wrapping around the address space");
    }

    /// A small deterministic generator, so the property tests need no crate.
    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
        fn signed(&mut self, magnitude: u64) -> i64 {
            self.below(2 * magnitude + 1) as i64 - magnitude as i64
        }
    }

    #[derive(Clone, Copy)]
    enum Kind {
        Nop,
        MovImm,
        AddReg,
        LeaRip,
        MovRip,
        JccShort,
        JccNear,
        JmpShort,
        JmpNear,
        CallNear,
    }

    impl Kind {
        const ALL: [Kind; 10] = [
            Kind::Nop,
            Kind::MovImm,
            Kind::AddReg,
            Kind::LeaRip,
            Kind::MovRip,
            Kind::JccShort,
            Kind::JccNear,
            Kind::JmpShort,
            Kind::JmpNear,
            Kind::CallNear,
        ];
        fn len(self) -> usize {
            match self {
                Kind::Nop => 1,
                Kind::MovImm => 5,
                Kind::AddReg => 3,
                Kind::LeaRip | Kind::MovRip => 7,
                Kind::JccShort | Kind::JmpShort => 2,
                Kind::JccNear => 6,
                Kind::JmpNear | Kind::CallNear => 5,
            }
        }
    }

    /// Random straight-line code from a small menu; a third of the branches
    /// target the start of one of the generated instructions.
    fn random_block(rng: &mut XorShift, from: u64) -> Vec<u8> {
        let kinds: Vec<Kind> = (0..1 + rng.below(8)).map(|_| Kind::ALL[rng.below(10) as usize]).collect();
        let mut starts = vec![0usize];
        for kind in &kinds {
            starts.push(starts.last().unwrap() + kind.len());
        }
        let total = *starts.last().unwrap();
        let mut bytes = Vec::new();
        for (i, kind) in kinds.iter().enumerate() {
            let next = (starts[i + 1]) as i64;
            // A displacement (relative to the next instruction) for a branch.
            let rel = |rng: &mut XorShift, short: bool| -> i64 {
                if rng.below(3) == 0 {
                    starts[rng.below(kinds.len() as u64) as usize] as i64 - next
                } else {
                    let rel = if short { rng.signed(127) } else { rng.signed(64 * MIB) };
                    let target = next + rel;
                    if target >= 0 && (target as usize) < total {
                        // Inside the block but maybe mid-instruction: aim at
                        // the block's first instruction instead.
                        -next
                    } else {
                        rel
                    }
                }
            };
            let cc = 0x70 + rng.below(16) as u8;
            match kind {
                Kind::Nop => bytes.push(0x90),
                Kind::MovImm => {
                    bytes.push(0xb8 + rng.below(8) as u8);
                    bytes.extend_from_slice(&(rng.next() as u32).to_le_bytes());
                }
                Kind::AddReg => bytes.extend_from_slice(&[0x48, 0x01, 0xc0 | rng.below(64) as u8]),
                Kind::LeaRip | Kind::MovRip => {
                    let op = if matches!(kind, Kind::LeaRip) { 0x8d } else { 0x8b };
                    let reg = rng.below(8) as u8;
                    bytes.extend_from_slice(&[0x48, op, 0x05 | reg << 3]);
                    let disp = rng.signed(256 * MIB) as i32;
                    bytes.extend_from_slice(&disp.to_le_bytes());
                }
                Kind::JccShort => bytes.extend_from_slice(&[cc, rel(rng, true) as i8 as u8]),
                Kind::JmpShort => bytes.extend_from_slice(&[0xeb, rel(rng, true) as i8 as u8]),
                Kind::JccNear => {
                    bytes.extend_from_slice(&[0x0f, cc + 0x10]);
                    bytes.extend_from_slice(&(rel(rng, false) as i32).to_le_bytes());
                }
                Kind::JmpNear | Kind::CallNear => {
                    bytes.push(if matches!(kind, Kind::JmpNear) { 0xe9 } else { 0xe8 });
                    bytes.extend_from_slice(&(rel(rng, false) as i32).to_le_bytes());
                }
            }
            assert_eq!(bytes.len(), starts[i + 1], "menu lengths at {from:#x}");
        }
        bytes
    }

    #[test]
    fn relocation_preserves_every_target() {
        let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
        for case in 0..2000 {
            let from = 0x5555_0000_0000 + rng.below(GIB);
            let to = from.wrapping_add_signed(rng.signed(GIB));
            let code = random_block(&mut rng, from);
            let original = decode_all(&code, from);
            let bytes = relocate(&code, from, code.len(), to)
                .unwrap_or_else(|e| panic!("case {case}: {code:02x?} at {from:#x}: {e}"));
            let mut relocated = decode_all(&bytes, to);
            let mut original = original;
            // Where each original instruction went (a transformed call: to
            // the first instruction of its replacement).
            let moved: Vec<(u64, u64)> = original.iter().zip(&relocated).map(|(o, r)| (o.ip(), r.ip())).collect();
            let new_ip = |old: u64| moved.iter().find(|m| m.0 == old).map(|m| m.1);
            // A call at the end returns to the original code: its return
            // address pushed, then a jump with the call's operand.
            if relocated.len() == original.len() + 4 {
                let k = original.len() - 1;
                let (call, jmp) = (original[k], relocated[k + 3]);
                assert_calls_from_the_original(&relocated[k..k + 4], from + code.len() as u64);
                assert_eq!(call.mnemonic(), Mnemonic::Call, "case {case}");
                if call.code() == Code::Call_rel32_64 {
                    // A target among the displaced instructions is their copy.
                    let t = call.near_branch_target();
                    let expected = new_ip(t).unwrap_or(t);
                    assert_eq!(
                        jmp.near_branch_target(),
                        expected,
                        "case {case}: {call} / {jmp} {from:#x} -> {to:#x} {code:02x?}"
                    );
                } else if call.is_ip_rel_memory_operand() {
                    assert_eq!(jmp.ip_rel_memory_address(), call.ip_rel_memory_address(), "case {case}");
                } else {
                    let operand = |i: &Instruction| {
                        (i.op0_kind(), i.op0_register(), i.memory_base(), i.memory_index(), i.memory_displacement64())
                    };
                    assert_eq!(operand(&jmp), operand(&call), "case {case}");
                }
                original.pop();
                relocated.drain(k..k + 4);
            }
            assert_eq!(relocated.len(), original.len() + 1, "case {case}: one-to-one");
            for (old, new) in original.iter().zip(&relocated) {
                assert_eq!(old.mnemonic(), new.mnemonic(), "case {case}");
                if let Some(target) = near_branch_target(old) {
                    let expected = new_ip(target).unwrap_or(target);
                    assert_eq!(new.near_branch_target(), expected, "case {case}: {code:02x?}");
                } else if old.is_ip_rel_memory_operand() {
                    assert_eq!(new.ip_rel_memory_address(), old.ip_rel_memory_address());
                } else {
                    let old_bytes = &code[(old.ip() - from) as usize..][..old.len()];
                    let new_bytes = &bytes[(new.ip() - to) as usize..][..new.len()];
                    assert_eq!(old_bytes, new_bytes, "case {case}");
                }
            }
            assert_jumps_back(relocated.last().unwrap(), from + code.len() as u64);
        }
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut rng = XorShift(0x2545_f491_4f6c_dd1d);
        for _ in 0..5000 {
            let mut code = vec![0u8; 8 + rng.below(40) as usize];
            for byte in &mut code {
                // Bias towards bytes that start branches and padding.
                *byte = match rng.below(4) {
                    0 => [0x74, 0xeb, 0xe8, 0xe9, 0xcc, 0x90, 0xc3, 0xe2][rng.below(8) as usize],
                    _ => rng.next() as u8,
                };
            }
            let size = 1 + rng.below(code.len() as u64);
            let entry = 0x7f00_0000_0000 + rng.below(1 << 20);
            if let Ok(hook) = plan(&code, entry, size) {
                assert!(hook.displaced >= JUMP_LEN);
                let start = (hook.patch_at - entry) as usize;
                assert!(start + hook.displaced <= code.len());
                let to = entry.wrapping_add_signed(rng.signed(GIB));
                let _ = relocate(&code[start..], hook.patch_at, hook.displaced, to);
            }
        }
    }
}

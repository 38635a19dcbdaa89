//! Prologue planning and relocation never panic, whatever the bytes, on
//! both architectures: `plan` refuses or plans; `relocate` of a plan
//! refuses or re-encodes (x86_64's, and aarch64's with and without the
//! scratch register).
//!
//!     RUSTC_BOOTSTRAP=1 cargo fuzz run relocate
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 10 {
        return;
    }
    // The first 8 bytes choose where the trampoline goes; the rest is code.
    let to_delta = u64::from_le_bytes(data[..8].try_into().unwrap_or([0; 8])) % (4 << 30);
    let code = &data[8..];
    let entry = 0x5555_5555_0000u64;
    let size = (code.len() as u64).saturating_sub(16).max(1);
    if let Ok(hook) = telco_runtime::arch::native::patch::plan(code, entry, size) {
        let start = (hook.patch_at - entry) as usize;
        if let Some(bytes) = code.get(start..start + hook.displaced) {
            let _ = telco_runtime::arch::native::patch::relocate(bytes, hook.patch_at, hook.displaced, entry.wrapping_sub(to_delta));
        }
    }
    use telco_runtime::arch::aarch64::patch as a64;
    let entry = entry & !3;
    if let Ok(hook) = a64::plan(code, entry, size) {
        let start = (hook.patch_at - entry) as usize;
        if let Some(bytes) = code.get(start..start + hook.displaced) {
            let word = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
            for scratch in [true, false] {
                let _ = a64::relocate_word(word, hook.patch_at, hook.patch_at.wrapping_sub(to_delta & !3), scratch);
            }
            let _ = a64::relocate_with_map(bytes, hook.patch_at, hook.displaced, hook.patch_at.wrapping_sub(to_delta & !3));
        }
    }
    // Any word at all, near and far.
    for w in code.chunks_exact(4).take(64) {
        let w = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
        let _ = a64::relocate_word(w, entry, entry.wrapping_add(to_delta & !3), to_delta & 1 == 1);
    }
});

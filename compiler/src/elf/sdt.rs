//! SystemTap SDT markers (USDT): the `.note.stapsdt` notes `<sys/sdt.h>`
//! leaves in a program (one per `DTRACE_PROBE`/`STAP_PROBE` site), and
//! their argument specs (`-4@%eax 8@16(%rbx,%rcx,8) 4@$5`).
//!
//! A note's description is (64-bit): the marker's address (a `nop`), the
//! link-time address of `.stapsdt.base`, the semaphore's address (0 for
//! none), then provider, name and argument text, each NUL-terminated. A
//! file whose `.stapsdt.base` moved after linking (prelink) is adjusted by
//! the difference.
//!
//! Pass 2 gives each marker its own probe body, in which `$argN` is read
//! where that marker's spec says (a constant, `register()` or a `user_*`
//! read, with the spec's size and sign), `$$name` and `$$provider` are
//! strings and `$$parms` a `sprintf` of the arguments. The probed marker's
//! semaphore, if it has one, is raised while the session runs
//! (runtime/src/session/arm.rs).
//!
//! An argument spec read is a [`MarkArg`] (the architecture layer's
//! vocabulary: each architecture's `sdt` parses its own operand syntax).

use crate::arch::MarkArg;

/// One marker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Marker {
    pub provider: String,
    pub name: String,
    /// Link-time address of the marker's instruction.
    pub addr: u64,
    /// Link-time address of its 16-bit semaphore (the program runs the
    /// marker only while it is non-zero), 0 when it has none.
    pub semaphore: u64,
    /// The argument specs as written.
    pub args: String,
}

/// The markers of an ELF file. `stapsdt_base` is the address of its
/// `.stapsdt.base` section (None when it has none).
pub fn parse_notes(desc_of_notes: &[&[u8]], stapsdt_base: Option<u64>, little_endian: bool) -> Vec<Marker> {
    let mut out = Vec::new();
    for desc in desc_of_notes {
        let word = |i: usize| -> Option<u64> {
            let b: [u8; 8] = desc.get(8 * i..8 * i + 8)?.try_into().ok()?;
            Some(if little_endian { u64::from_le_bytes(b) } else { u64::from_be_bytes(b) })
        };
        let (Some(pc), Some(base), Some(sem)) = (word(0), word(1), word(2)) else { continue };
        let mut strings = desc[24..].split(|&b| b == 0).map(|s| String::from_utf8_lossy(s).into_owned());
        let (Some(provider), Some(name)) = (strings.next(), strings.next()) else { continue };
        let args = strings.next().unwrap_or_default();
        let delta = stapsdt_base.map_or(0, |b| b.wrapping_sub(base));
        out.push(Marker {
            provider,
            name,
            addr: pc.wrapping_add(delta),
            semaphore: if sem == 0 { 0 } else { sem.wrapping_add(delta) },
            args,
        });
    }
    out
}

/// Parse a marker's argument text (the native architecture's operand
/// syntax).
pub fn parse_args(text: &str) -> Result<Vec<MarkArg>, String> {
    crate::arch::native::sdt::parse_args(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_adjust_for_a_moved_base() {
        let mut desc = Vec::new();
        for w in [0x1000u64, 0x2000, 0x3000] {
            desc.extend_from_slice(&w.to_le_bytes());
        }
        desc.extend_from_slice(b"python\0function__entry\08@%rbp -4@%eax\0");
        let m = parse_notes(&[&desc], Some(0x2100), true);
        assert_eq!(
            m,
            [Marker {
                provider: "python".into(),
                name: "function__entry".into(),
                addr: 0x1100,
                semaphore: 0x3100,
                args: "8@%rbp -4@%eax".into()
            }]
        );
    }
}

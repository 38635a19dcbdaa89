//! Where a module's DWARF is: its own `.debug_*` sections (zlib-compressed
//! ones, `SHF_COMPRESSED` or the older `.zdebug_*`, are inflated), or a
//! separate debug file, as gdb and SystemTap find it: by build-id
//! (`<root>/.build-id/xx/rest.debug`), then by `.gnu_debuglink` (beside the
//! module, in its `.debug/` folder, under `<root>/<module's folder>/`;
//! the link's CRC checked). `<root>` is `/usr/lib/debug`, or each folder of
//! `TELCO_DEBUGINFO_PATH` (colon-separated) when it is set.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use goblin::elf::section_header::{SHF_COMPRESSED, SHT_NOBITS};
use goblin::elf::Elf;

/// Inflated sections are bounded by what their headers claim, and that
/// by this (a hostile file must not make pass 2 allocate without limit).
const MAX_SECTION: u64 = 1 << 30;

/// A section's bytes: a range of the file, or inflated.
pub(super) enum Data {
    Range(usize, usize),
    Owned(Vec<u8>),
}

/// The `.debug_*` sections of a file, by name (`.zdebug_x` as `.debug_x`).
pub(super) fn sections(elf: &Elf<'_>, bytes: &[u8]) -> Result<HashMap<String, Data>, String> {
    let mut out = HashMap::new();
    for sh in &elf.section_headers {
        let Some(name) = elf.shdr_strtab.get_at(sh.sh_name) else { continue };
        if sh.sh_type == SHT_NOBITS || !(name.starts_with(".debug_") || name.starts_with(".zdebug_")) {
            continue;
        }
        let Some(data) = bytes.get(sh.sh_offset as usize..sh.sh_offset.saturating_add(sh.sh_size) as usize) else {
            return Err(format!("section {name} lies outside the file"));
        };
        let (name, data) = if let Some(rest) = name.strip_prefix(".zdebug_") {
            (format!(".debug_{rest}"), Data::Owned(zdebug(data).map_err(|e| format!("section {name}: {e}"))?))
        } else if sh.sh_flags & u64::from(SHF_COMPRESSED) != 0 {
            (name.to_string(), Data::Owned(compressed(data).map_err(|e| format!("section {name}: {e}"))?))
        } else {
            (name.to_string(), Data::Range(sh.sh_offset as usize, data.len()))
        };
        out.insert(name, data);
    }
    Ok(out)
}

/// `sections` of `bytes` with every range copied out.
pub(super) fn owned(sections: HashMap<String, Data>, bytes: &[u8]) -> HashMap<String, Data> {
    sections
        .into_iter()
        .map(|(name, d)| match d {
            Data::Range(at, len) => (name, Data::Owned(bytes.get(at..at + len).unwrap_or_default().to_vec())),
            owned => (name, owned),
        })
        .collect()
}

fn inflate(data: &[u8], size: u64) -> Result<Vec<u8>, String> {
    // zlib compresses at most about 1032:1: a larger claim is a lie.
    if size > MAX_SECTION || size > (data.len() as u64).saturating_mul(1032).max(1 << 16) {
        return Err(format!("claims {size} bytes uncompressed from {}", data.len()));
    }
    let out = miniz_oxide::inflate::decompress_to_vec_zlib_with_limit(data, size as usize)
        .map_err(|e| format!("zlib data does not inflate ({:?})", e.status))?;
    if out.len() as u64 != size {
        return Err(format!("inflates to {} bytes where its header says {size}", out.len()));
    }
    Ok(out)
}

/// `SHF_COMPRESSED`: an `Elf64_Chdr` (type, reserved, size, alignment),
/// then the stream.
fn compressed(data: &[u8]) -> Result<Vec<u8>, String> {
    let word = |at: usize, n: usize| -> Option<u64> {
        let b = data.get(at..at + n)?;
        let mut w = [0u8; 8];
        w[..n].copy_from_slice(b);
        Some(u64::from_le_bytes(w))
    };
    let (Some(kind), Some(size)) = (word(0, 4), word(8, 8)) else { return Err("truncated header".into()) };
    if kind != 1 {
        return Err(format!("compression type {kind} (only zlib, 1, is read)"));
    }
    inflate(data.get(24..).ok_or("truncated header")?, size)
}

/// `.zdebug_*`: "ZLIB", the size as 8 big-endian bytes, then the stream.
fn zdebug(data: &[u8]) -> Result<Vec<u8>, String> {
    let Some(size) = data.strip_prefix(b"ZLIB").and_then(|r| r.get(..8)) else {
        return Err("no ZLIB header".into());
    };
    let size = u64::from_be_bytes(size.try_into().map_err(|_| "truncated header")?);
    inflate(data.get(12..).ok_or("truncated header")?, size)
}

fn roots() -> Vec<PathBuf> {
    match std::env::var_os("TELCO_DEBUGINFO_PATH") {
        Some(p) => std::env::split_paths(&p).collect(),
        None => vec![PathBuf::from("/usr/lib/debug")],
    }
}

/// The separate debug file with GNU build id `id`, if one is installed
/// (`<root>/.build-id/xx/rest.debug`, below the same roots as
/// [`separate`]): its `.symtab` names what a stripped module's leaves out.
pub fn by_build_id(id: &[u8]) -> Option<PathBuf> {
    if id.len() < 2 {
        return None;
    }
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    roots()
        .into_iter()
        .map(|root| root.join(".build-id").join(&hex[..2]).join(format!("{}.debug", &hex[2..])))
        .find(|p| p.is_file())
}

/// The separate debug file of the module at `path`, with its sections.
pub(super) fn separate(
    path: &Path,
    elf: &Elf<'_>,
    bytes: &[u8],
) -> Result<Option<(PathBuf, std::sync::Arc<[u8]>, HashMap<String, Data>)>, String> {
    let mut candidates = Vec::new();
    if let Some(id) = build_id(elf, bytes) {
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        if hex.len() > 2 {
            for root in roots() {
                candidates.push((root.join(".build-id").join(&hex[..2]).join(format!("{}.debug", &hex[2..])), None));
            }
        }
    }
    if let Some((name, crc)) = debuglink(elf, bytes) {
        let dir = path.parent().unwrap_or(Path::new("/"));
        candidates.push((dir.join(&name), Some(crc)));
        candidates.push((dir.join(".debug").join(&name), Some(crc)));
        for root in roots() {
            candidates.push((root.join(dir.strip_prefix("/").unwrap_or(dir)).join(&name), Some(crc)));
        }
    }
    for (candidate, crc) in candidates {
        if candidate == path || !candidate.is_file() {
            continue;
        }
        let Ok(data) = crate::image::read(&candidate) else { continue };
        if crc.is_some_and(|c| crc32(&data) != c) {
            continue;
        }
        let parsed = match std::panic::catch_unwind(|| Elf::parse(&data).map_err(|e| e.to_string())) {
            Ok(Ok(e)) => e,
            _ => continue,
        };
        // A candidate that does not read is passed over for the next.
        let Ok(s) = sections(&parsed, &data) else { continue };
        if s.contains_key(".debug_info") {
            drop(parsed);
            return Ok(Some((candidate, data.into(), s)));
        }
    }
    Ok(None)
}

fn section<'a>(elf: &Elf<'_>, bytes: &'a [u8], name: &str) -> Option<&'a [u8]> {
    crate::image::section(elf, bytes, name).map(|(_, d)| d)
}

/// The GNU build-id note's bytes.
pub(crate) fn build_id(elf: &Elf<'_>, bytes: &[u8]) -> Option<Vec<u8>> {
    let n = section(elf, bytes, ".note.gnu.build-id")?;
    let word = |at: usize| n.get(at..at + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize);
    let (namesz, descsz, kind) = (word(0)?, word(4)?, word(8)?);
    if kind != 3 {
        return None;
    }
    let desc = 12 + namesz.div_ceil(4) * 4;
    n.get(desc..desc.checked_add(descsz)?).map(<[u8]>::to_vec)
}

/// `.gnu_debuglink`: a file name, padding to 4 bytes, a CRC-32.
fn debuglink(elf: &Elf<'_>, bytes: &[u8]) -> Option<(String, u32)> {
    let s = section(elf, bytes, ".gnu_debuglink")?;
    let end = s.iter().position(|&b| b == 0)?;
    let name = std::str::from_utf8(&s[..end]).ok()?;
    if name.is_empty() || name.contains('/') {
        return None;
    }
    let at = (end + 1).div_ceil(4) * 4;
    let crc = s.get(at..at + 4)?;
    Some((name.to_string(), u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]])))
}

/// CRC-32 (IEEE, as `.gnu_debuglink` uses it).
fn crc32(data: &[u8]) -> u32 {
    let mut table = [0u32; 256];
    for (i, t) in table.iter_mut().enumerate() {
        let mut c = i as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 { 0xedb8_8320 ^ (c >> 1) } else { c >> 1 };
        }
        *t = c;
    }
    let mut crc = !0u32;
    for &b in data {
        crc = table[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

#[cfg(test)]
mod tests {
    #[test]
    fn crc32_is_the_ieee_one() {
        assert_eq!(super::crc32(b"123456789"), 0xcbf4_3926);
    }
}

//! `/etc/ld.so.cache`, as glibc's `_dl_load_cache_lookup` reads it.
//!
//! Two formats exist. The old one (`ld.so-1.7.0`): a 16-byte header, then
//! `{i32 flags, u32 key, u32 value}` entries whose strings are offsets from the
//! end of the entry array. The new one (`glibc-ld.so.cache1.1`): a 48-byte
//! header, then `{i32 flags, u32 key, u32 value, u32 osversion, u64 hwcap}`
//! entries whose strings are offsets from the start of the new header. Older
//! ldconfigs wrote both: the old format first and the new one after its
//! entries, aligned to 8; glibc then uses the new one, and so do we. The file
//! is in host byte order. Anything out of bounds ends the parse or skips the
//! entry: the cache is only a hint, the directories are searched afterwards.

use std::path::Path;

const OLD_MAGIC: &[u8] = b"ld.so-1.7.0";
const OLD_HEADER: usize = 16;
const OLD_ENTRY: usize = 12;
const NEW_MAGIC: &[u8] = b"glibc-ld.so.cache1.1";
const NEW_HEADER: usize = 48;
const NEW_ENTRY: usize = 24;

pub(super) struct LdCache {
    data: Vec<u8>,
    layout: Layout,
}

#[derive(Clone, Copy)]
enum Layout {
    /// Entries at `entries`, strings relative to `strings`.
    Old {
        nlibs: usize,
        entries: usize,
        strings: usize,
    },
    New {
        nlibs: usize,
        entries: usize,
        strings: usize,
    },
}

/// One cache entry: a file name (`libc.so.6`) and the path it maps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Entry<'a> {
    pub key: &'a str,
    pub value: &'a str,
    /// Nonzero for libraries in a `glibc-hwcaps` subdirectory or a legacy
    /// hardware-capability directory (new format only).
    pub hwcap: u64,
}

impl LdCache {
    /// The cache at `path`, or `None` if it is missing or in neither format.
    pub(super) fn read(path: &Path) -> Option<LdCache> {
        LdCache::from_bytes(std::fs::read(path).ok()?)
    }

    pub(super) fn from_bytes(data: Vec<u8>) -> Option<LdCache> {
        let layout = if data.starts_with(OLD_MAGIC) {
            let nlibs = read_u32(&data, OLD_MAGIC.len() + 1)? as usize;
            let entries_end = nlibs.checked_mul(OLD_ENTRY)?.checked_add(OLD_HEADER)?;
            if entries_end > data.len() {
                return None;
            }
            let new_start = entries_end.checked_add(7)? & !7;
            match new_layout(&data, new_start) {
                Some(layout) => layout,
                None => Layout::Old { nlibs, entries: OLD_HEADER, strings: entries_end },
            }
        } else {
            new_layout(&data, 0)?
        };
        Some(LdCache { data, layout })
    }

    /// Every well-formed entry, in file order (the order glibc searches).
    pub(super) fn entries(&self) -> impl Iterator<Item = Entry<'_>> + '_ {
        let (nlibs, entries, strings, size) = match self.layout {
            Layout::Old { nlibs, entries, strings } => (nlibs, entries, strings, OLD_ENTRY),
            Layout::New { nlibs, entries, strings } => (nlibs, entries, strings, NEW_ENTRY),
        };
        let new = matches!(self.layout, Layout::New { .. });
        (0..nlibs).filter_map(move |i| {
            let at = entries + i * size;
            let key = read_u32(&self.data, at + 4)? as usize;
            let value = read_u32(&self.data, at + 8)? as usize;
            let hwcap = if new { read_u64(&self.data, at + 16)? } else { 0 };
            Some(Entry {
                key: read_str(&self.data, strings.checked_add(key)?)?,
                value: read_str(&self.data, strings.checked_add(value)?)?,
                hwcap,
            })
        })
    }
}

fn new_layout(data: &[u8], start: usize) -> Option<Layout> {
    if !data.get(start..)?.starts_with(NEW_MAGIC) {
        return None;
    }
    let nlibs = read_u32(data, start + NEW_MAGIC.len())? as usize;
    let entries = start + NEW_HEADER;
    let entries_end = nlibs.checked_mul(NEW_ENTRY)?.checked_add(entries)?;
    if entries_end > data.len() {
        return None;
    }
    Some(Layout::New { nlibs, entries, strings: start })
}

fn read_u32(data: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(data.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

fn read_u64(data: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(data.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

/// The NUL-terminated UTF-8 string at `at`.
fn read_str(data: &[u8], at: usize) -> Option<&str> {
    let rest = data.get(at..)?;
    let len = rest.iter().position(|&b| b == 0)?;
    std::str::from_utf8(&rest[..len]).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An old-format cache file of (key, value) entries.
    fn old_format(entries: &[(&str, &str)]) -> Vec<u8> {
        let mut strings = Vec::new();
        let mut table = Vec::new();
        for (k, v) in entries {
            let (ko, vo) = (strings.len() as u32, strings.len() + k.len() + 1);
            strings.extend_from_slice(k.as_bytes());
            strings.push(0);
            strings.extend_from_slice(v.as_bytes());
            strings.push(0);
            table.extend_from_slice(&3i32.to_ne_bytes());
            table.extend_from_slice(&ko.to_ne_bytes());
            table.extend_from_slice(&(vo as u32).to_ne_bytes());
        }
        let mut out = OLD_MAGIC.to_vec();
        out.push(0);
        out.extend_from_slice(&(entries.len() as u32).to_ne_bytes());
        out.extend(table);
        out.extend(strings);
        out
    }

    /// A new-format cache file of (key, value, hwcap) entries.
    fn new_format(entries: &[(&str, &str, u64)]) -> Vec<u8> {
        let strings_at = NEW_HEADER + entries.len() * NEW_ENTRY;
        let mut strings = Vec::new();
        let mut table = Vec::new();
        for (k, v, hwcap) in entries {
            let ko = (strings_at + strings.len()) as u32;
            strings.extend_from_slice(k.as_bytes());
            strings.push(0);
            let vo = (strings_at + strings.len()) as u32;
            strings.extend_from_slice(v.as_bytes());
            strings.push(0);
            table.extend_from_slice(&0x0303i32.to_ne_bytes());
            table.extend_from_slice(&ko.to_ne_bytes());
            table.extend_from_slice(&vo.to_ne_bytes());
            table.extend_from_slice(&0u32.to_ne_bytes());
            table.extend_from_slice(&hwcap.to_ne_bytes());
        }
        let mut out = NEW_MAGIC.to_vec();
        out.extend_from_slice(&(entries.len() as u32).to_ne_bytes());
        out.extend_from_slice(&(strings.len() as u32).to_ne_bytes());
        out.resize(NEW_HEADER, 0);
        out.extend(table);
        out.extend(strings);
        out
    }

    fn keys_values(cache: &LdCache) -> Vec<(String, String, u64)> {
        cache.entries().map(|e| (e.key.to_string(), e.value.to_string(), e.hwcap)).collect()
    }

    #[test]
    fn reads_the_old_format() {
        let data = old_format(&[("libfoo.so.1", "/opt/lib/libfoo.so.1"), ("libc.so.6", "/lib/libc.so.6")]);
        let cache = LdCache::from_bytes(data).expect("old format recognised");
        assert_eq!(
            keys_values(&cache),
            vec![
                ("libfoo.so.1".into(), "/opt/lib/libfoo.so.1".into(), 0),
                ("libc.so.6".into(), "/lib/libc.so.6".into(), 0)
            ]
        );
    }

    #[test]
    fn reads_the_new_format() {
        let data = new_format(&[
            ("libm.so.6", "/lib/glibc-hwcaps/x86-64-v3/libm.so.6", 1 << 62),
            ("libm.so.6", "/lib/libm.so.6", 0),
        ]);
        let cache = LdCache::from_bytes(data).expect("new format recognised");
        assert_eq!(
            keys_values(&cache),
            vec![
                ("libm.so.6".into(), "/lib/glibc-hwcaps/x86-64-v3/libm.so.6".into(), 1 << 62),
                ("libm.so.6".into(), "/lib/libm.so.6".into(), 0)
            ]
        );
    }

    #[test]
    fn prefers_the_new_format_in_a_combined_file() {
        let mut data = old_format(&[("libold.so.1", "/old/libold.so.1")]);
        // The new format starts after the old entries, aligned to 8; the old
        // format's strings (after its entries) are where the new part now is,
        // so only the new part is readable, as in glibc.
        let old_entries_end = OLD_HEADER + OLD_ENTRY;
        data.truncate(old_entries_end);
        data.resize((old_entries_end + 7) & !7, 0);
        data.extend(new_format(&[("libnew.so.2", "/new/libnew.so.2", 0)]));
        let cache = LdCache::from_bytes(data).expect("combined format recognised");
        assert_eq!(keys_values(&cache), vec![("libnew.so.2".into(), "/new/libnew.so.2".into(), 0)]);
    }

    #[test]
    fn garbage_is_not_a_cache_and_does_not_panic() {
        assert!(LdCache::from_bytes(Vec::new()).is_none());
        assert!(LdCache::from_bytes(b"not a cache at all".to_vec()).is_none());
        let mut data = new_format(&[("libx.so", "/x/libx.so", 0)]);
        // Claim more entries than the file holds.
        data[NEW_MAGIC.len()..NEW_MAGIC.len() + 4].copy_from_slice(&1000u32.to_ne_bytes());
        assert!(LdCache::from_bytes(data).is_none());
        let mut data = new_format(&[("libx.so", "/x/libx.so", 0)]);
        // A string offset past the end skips the entry.
        data[NEW_HEADER + 4..NEW_HEADER + 8].copy_from_slice(&u32::MAX.to_ne_bytes());
        let cache = LdCache::from_bytes(data).expect("header is fine");
        assert_eq!(cache.entries().count(), 0);
        for len in 0..old_format(&[("a", "b")]).len() {
            let data = old_format(&[("a", "b")])[..len].to_vec();
            if let Some(cache) = LdCache::from_bytes(data) {
                let _ = cache.entries().count();
            }
        }
    }
}

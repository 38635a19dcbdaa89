//! JSON exactly as Python's `json.dumps(obj)` writes it with its defaults:
//! Frida's itracer writes every message that way, so ours match it byte for
//! byte.

use serde::Serialize;
use std::io::{self, Write};

/// `", "` between items, `": "` after keys, and `ensure_ascii`: every
/// character outside `' '..='~'` is escaped (`\n`-style escapes for the
/// usual control characters, `\u00XX` for other control characters and
/// DEL, UTF-16 `\uXXXX` pairs for the rest).
struct PythonFormatter;

impl serde_json::ser::Formatter for PythonFormatter {
    fn begin_array_value<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }

    fn begin_object_key<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }

    fn begin_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        w.write_all(b": ")
    }

    // serde_json escapes `"`, `\` and control characters itself and hands
    // the rest over in fragments; only DEL and non-ASCII are left to us.
    fn write_string_fragment<W: ?Sized + Write>(&mut self, w: &mut W, fragment: &str) -> io::Result<()> {
        let mut plain = 0;
        for (i, c) in fragment.char_indices() {
            if (' '..='~').contains(&c) {
                continue;
            }
            w.write_all(&fragment.as_bytes()[plain..i])?;
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                write!(w, "\\u{:04x}", u)?;
            }
            plain = i + c.len_utf8();
        }
        w.write_all(&fragment.as_bytes()[plain..])
    }
}

/// Serialises `value` as Python's `json.dumps` would.
pub(crate) fn to_python_json<T: Serialize + ?Sized>(value: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    let mut ser = serde_json::Serializer::with_formatter(&mut out, PythonFormatter);
    // Serialising our own message structs into a Vec cannot fail: they
    // hold only strings, integers, sequences and maps with string keys.
    if value.serialize(&mut ser).is_err() {
        out.clear();
        out.extend_from_slice(b"{}");
    }
    out
}

/// `0x`-prefixed lower-case hex without padding, as Frida writes addresses
/// (`NativePointer.toJSON`, `g_strdup_printf("0x%" G_GINT64_MODIFIER "x")`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Hex(pub u64);

impl Serialize for Hex {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&format_args!("{:#x}", self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_python_json_dumps() {
        // python3 -c 'import json; print(json.dumps({"type": "a", "payload": [[0, 1], {"k": "é\x7f\n😀"}]}))'
        let v = serde_json::json!({"type": "a", "payload": [[0, 1], {"k": "é\u{7f}\n😀"}]});
        assert_eq!(
            String::from_utf8(to_python_json(&v)).unwrap(),
            r#"{"payload": [[0, 1], {"k": "\u00e9\u007f\n\ud83d\ude00"}], "type": "a"}"#
        );
        assert_eq!(to_python_json(&Hex(0x1f)), b"\"0x1f\"");
        assert_eq!(to_python_json(&Hex(0)), b"\"0x0\"");
    }
}

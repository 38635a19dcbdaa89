//! The tracer's own messages, made safe for the terminal that reads them.
//!
//! Warnings, errors, the session's summary, `-v` lines and crash reports
//! name things the tracer got from the traced process or from files it
//! does not own: paths (the target's maps, its executable), ELF symbol
//! names, thread names, `execname()`, messages a ring record carries.
//! Any of them can hold an escape sequence (`\x1b]...` retitles the
//! window, `\x1b[2J` clears the screen, `\x9b` is the same CSI for a
//! terminal that reads C1 controls) meant for the root user's terminal.
//! Every such line goes through [`escape`] before it is printed, as
//! `ls -b` or SystemTap's `text_str` would print it: C0 controls, DEL,
//! C1 controls and bytes that are not UTF-8 become backslash escapes;
//! everything else, other scripts included, is printed as it is.
//!
//! The script's own output (`printf`, `println`, the globals display) is
//! the user's data and is never escaped, as in SystemTap.

use std::borrow::Cow;
use std::fmt::Write;

/// `bytes` as printable text: a newline is `\n`, a tab `\t`, a carriage
/// return `\r`, any other C0 control or DEL `\xNN`, a C1 control (U+0080
/// to U+009F, decoded as UTF-8) `\u{NN}`, and each byte that is not part
/// of valid UTF-8 `\xNN`. Backslashes are not doubled: the point is a
/// terminal that shows what it is sent, not a reversible encoding.
/// Borrowed when there is nothing to escape.
pub fn escape(bytes: &[u8]) -> Cow<'_, str> {
    if let Ok(s) = std::str::from_utf8(bytes) {
        if !s.chars().any(needs_escape) {
            return Cow::Borrowed(s);
        }
    }
    let mut out = String::with_capacity(bytes.len() + 16);
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\n' => out.push_str("\\n"),
                '\t' => out.push_str("\\t"),
                '\r' => out.push_str("\\r"),
                c if (c as u32) < 0x20 || c == '\x7f' => {
                    let _ = write!(out, "\\x{:02x}", c as u32);
                }
                c if needs_escape(c) => {
                    let _ = write!(out, "\\u{{{:x}}}", c as u32);
                }
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    Cow::Owned(out)
}

/// A path as [`escape`] prints it (its bytes, not a lossy conversion).
pub fn escape_path(path: &std::path::Path) -> Cow<'_, str> {
    use std::os::unix::ffi::OsStrExt;
    escape(path.as_os_str().as_bytes())
}

fn needs_escape(c: char) -> bool {
    c.is_control()
}

/// One line of the tracer's own on standard error, escaped: what
/// [`eprintln_escaped!`](crate::eprintln_escaped) prints. A failed write
/// is ignored (a closed standard error ends nothing).
pub fn eprint_line(line: &str) {
    use std::io::Write;
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(escape(line.as_bytes()).as_bytes());
    let _ = err.write_all(b"\n");
}

/// A message of the tracer's own over several lines (a list: its line
/// breaks are the tracer's, whatever the target named in it was escaped
/// into it first, [`escape`]): each line escaped and printed.
pub fn eprint_lines(message: &str) {
    for line in message.split('\n') {
        eprint_line(line);
    }
}

/// `eprintln!` for the tracer's own messages: the line is formatted, then
/// escaped ([`text::escape`](crate::text::escape)) as a whole, so whatever
/// an argument brings (a path, a symbol, an error's text) is covered; the
/// line's own newline is the only control byte printed.
#[macro_export]
macro_rules! eprintln_escaped {
    ($($arg:tt)*) => {
        $crate::text::eprint_line(&::std::format!($($arg)*))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_escaped_and_the_rest_kept() {
        assert!(matches!(escape(b"plain text, caf\xc3\xa9"), Cow::Borrowed("plain text, café")));
        assert_eq!(escape(b"\x1b[31mred\x1b[0m"), "\\x1b[31mred\\x1b[0m");
        assert_eq!(escape(b"a\nb\tc\rd\x7f\x00"), "a\\nb\\tc\\rd\\x7f\\x00");
        // C1 CSI, as UTF-8, and as a lone byte (not UTF-8).
        assert_eq!(escape("x\u{9b}2J".as_bytes()), "x\\u{9b}2J");
        assert_eq!(escape(b"x\x9b2J\xff"), "x\\x9b2J\\xff");
        // Other scripts and symbols pass.
        assert_eq!(escape("日本 → ok".as_bytes()), "日本 → ok");
    }

    #[test]
    fn paths_keep_their_bytes() {
        use std::os::unix::ffi::OsStrExt;
        let p = std::path::Path::new(std::ffi::OsStr::from_bytes(b"/tmp/\x1b]0;pwn\x07\xfe"));
        assert_eq!(escape_path(p), "/tmp/\\x1b]0;pwn\\x07\\xfe");
    }
}

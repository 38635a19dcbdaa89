//! printf-style format strings, as SystemTap's: `%d %i %u %x %X %o %s %c %p %%`
//! with flags `-+ 0#`, width and precision (numbers or `*`).
//!
//! Pass 2 uses the parsed form to type and count `printf`/`sprintf`
//! arguments; the tracer uses it to format events.

/// One piece of a format string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Segment {
    Text(Vec<u8>),
    Conversion(Conversion),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConvKind {
    /// `%d`, `%i`
    Signed,
    /// `%u`
    Unsigned,
    /// `%x`
    HexLower,
    /// `%X`
    HexUpper,
    /// `%o`
    Octal,
    /// `%c`
    Char,
    /// `%p`
    Pointer,
    /// `%s`
    String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Count {
    None,
    Fixed(u32),
    /// `*`: taken from the next argument.
    FromArg,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conversion {
    pub kind: ConvKind,
    pub left: bool,
    pub plus: bool,
    pub space: bool,
    pub zero: bool,
    pub alt: bool,
    pub width: Count,
    pub precision: Count,
}

impl Conversion {
    /// Whether this conversion consumes a string argument (else a number).
    pub fn takes_string(&self) -> bool {
        self.kind == ConvKind::String
    }

    /// Arguments this conversion consumes: `*` width/precision, then the value.
    pub fn arg_count(&self) -> usize {
        1 + usize::from(self.width == Count::FromArg) + usize::from(self.precision == Count::FromArg)
    }
}

/// A format error and the byte offset in the format where it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FormatError {
    pub offset: usize,
    pub message: String,
}

/// Widths and precisions above this are refused (they would only waste
/// the output buffer).
pub const MAX_WIDTH: u32 = 4096;

pub fn parse(fmt: &[u8]) -> Result<Vec<Segment>, FormatError> {
    let mut out = Vec::new();
    let mut text = Vec::new();
    let mut i = 0;
    while i < fmt.len() {
        if fmt[i] != b'%' {
            text.push(fmt[i]);
            i += 1;
            continue;
        }
        let start = i;
        i += 1;
        // A `%` that ends the format is a literal `%`, as in SystemTap.
        if i == fmt.len() {
            text.push(b'%');
            continue;
        }
        if fmt.get(i) == Some(&b'%') {
            text.push(b'%');
            i += 1;
            continue;
        }
        let mut c = Conversion {
            kind: ConvKind::Signed,
            left: false,
            plus: false,
            space: false,
            zero: false,
            alt: false,
            width: Count::None,
            precision: Count::None,
        };
        while let Some(&f) = fmt.get(i) {
            match f {
                b'-' => c.left = true,
                b'+' => c.plus = true,
                b' ' => c.space = true,
                b'0' => c.zero = true,
                b'#' => c.alt = true,
                _ => break,
            }
            i += 1;
        }
        c.width = count(fmt, &mut i, start)?;
        if fmt.get(i) == Some(&b'.') {
            i += 1;
            c.precision = match count(fmt, &mut i, start)? {
                Count::None => Count::Fixed(0),
                n => n,
            };
        }
        // Length modifiers are accepted and ignored: every number is 64-bit.
        while matches!(fmt.get(i), Some(b'l' | b'h' | b'j' | b'z' | b't' | b'L')) {
            i += 1;
        }
        c.kind = match fmt.get(i) {
            Some(b'd' | b'i') => ConvKind::Signed,
            Some(b'u') => ConvKind::Unsigned,
            Some(b'x') => ConvKind::HexLower,
            Some(b'X') => ConvKind::HexUpper,
            Some(b'o') => ConvKind::Octal,
            Some(b'c') => ConvKind::Char,
            Some(b'p') => ConvKind::Pointer,
            Some(b's') => ConvKind::String,
            Some(&b) => {
                return Err(FormatError { offset: start, message: format!("unknown conversion `%{}`", b as char) })
            }
            None => return Err(FormatError { offset: start, message: "format ends inside a conversion".into() }),
        };
        i += 1;
        if !text.is_empty() {
            out.push(Segment::Text(std::mem::take(&mut text)));
        }
        out.push(Segment::Conversion(c));
    }
    if !text.is_empty() {
        out.push(Segment::Text(text));
    }
    Ok(out)
}

fn count(fmt: &[u8], i: &mut usize, start: usize) -> Result<Count, FormatError> {
    if fmt.get(*i) == Some(&b'*') {
        *i += 1;
        return Ok(Count::FromArg);
    }
    let mut n: u32 = 0;
    let mut any = false;
    while let Some(d) = fmt.get(*i).filter(|b| b.is_ascii_digit()) {
        n = n.saturating_mul(10).saturating_add(u32::from(d - b'0'));
        any = true;
        *i += 1;
    }
    if n > MAX_WIDTH {
        return Err(FormatError {
            offset: start,
            message: format!("width or precision {n} is larger than {MAX_WIDTH}"),
        });
    }
    Ok(if any { Count::Fixed(n) } else { Count::None })
}

/// The argument types a format wants, in order (`true` = string).
pub fn argument_kinds(segments: &[Segment]) -> Vec<bool> {
    let mut v = Vec::new();
    for s in segments {
        if let Segment::Conversion(c) = s {
            if c.width == Count::FromArg {
                v.push(false);
            }
            if c.precision == Count::FromArg {
                v.push(false);
            }
            v.push(c.takes_string());
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_conversions() {
        let s = parse(b"a%-08.3dx%s%%%*d%lu%#x").expect("valid");
        assert_eq!(argument_kinds(&s), vec![false, true, false, false, false, false]);
        assert_eq!(s.len(), 8);
        assert_eq!(s[0], Segment::Text(b"a".to_vec()));
        match &s[1] {
            Segment::Conversion(c) => {
                assert!(c.left && c.zero);
                assert_eq!(c.width, Count::Fixed(8));
                assert_eq!(c.precision, Count::Fixed(3));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn rejects_bad_formats() {
        assert_eq!(parse(b"%q").unwrap_err().message, "unknown conversion `%q`");
        assert_eq!(parse(b"ab%"), Ok(vec![Segment::Text(b"ab%".to_vec())]));
        assert_eq!(parse(b"ab%l").unwrap_err().offset, 2);
        assert!(parse(b"%99999d").is_err());
    }
}

//! The encoded form of a printf format: what `sprintf` reads inside a
//! handler and what the tracer uses to format `printf` events. Both call the
//! same formatter (`rt_format` in the compiled blob), so there is one
//! implementation of the conversions.
//!
//! Encoding, byte-packed, in the region's constants area:
//! * text: `FMT_TEXT`, `u16` length (little endian), the bytes;
//! * conversion: `FMT_CONV`, kind, flags, `i32` width, `i32` precision
//!   (little endian; [`COUNT_NONE`] or [`COUNT_ARG`] for `*`);
//! * `FMT_END`.

pub const FMT_END: u8 = 0;
pub const FMT_TEXT: u8 = 1;
pub const FMT_CONV: u8 = 2;

pub const CONV_SIGNED: u8 = 1;
pub const CONV_UNSIGNED: u8 = 2;
pub const CONV_HEX: u8 = 3;
pub const CONV_HEX_UPPER: u8 = 4;
pub const CONV_OCTAL: u8 = 5;
pub const CONV_CHAR: u8 = 6;
pub const CONV_POINTER: u8 = 7;
pub const CONV_STRING: u8 = 8;
/// `%p` as SystemTap printed it before 1.3 (`--compatible=1.2`): the
/// width defaults to 2 + 16 and the precision is the width less 2 (at
/// most 16 unless left-justified); the written precision is ignored.
pub const CONV_POINTER_LEGACY: u8 = 9;

pub const FLAG_LEFT: u8 = 1;
pub const FLAG_PLUS: u8 = 2;
pub const FLAG_SPACE: u8 = 4;
pub const FLAG_ZERO: u8 = 8;
pub const FLAG_ALT: u8 = 16;

pub const COUNT_NONE: i32 = -1;
pub const COUNT_ARG: i32 = -2;

/// One piece of a format, as the encoder takes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    Text(Vec<u8>),
    Conv { kind: u8, flags: u8, width: i32, precision: i32 },
}

impl Piece {
    /// Arguments the piece consumes, and whether the last one is a string.
    pub fn args(&self) -> (usize, bool) {
        match self {
            Piece::Text(_) => (0, false),
            Piece::Conv { kind, width, precision, .. } => {
                (1 + usize::from(*width == COUNT_ARG) + usize::from(*precision == COUNT_ARG), *kind == CONV_STRING)
            }
        }
    }
}

/// Encode a format. Text longer than 65535 bytes is split.
pub fn encode(pieces: &[Piece]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in pieces {
        match p {
            Piece::Text(t) => {
                for chunk in t.chunks(u16::MAX as usize) {
                    out.push(FMT_TEXT);
                    out.extend_from_slice(&(chunk.len() as u16).to_le_bytes());
                    out.extend_from_slice(chunk);
                }
            }
            Piece::Conv { kind, flags, width, precision } => {
                out.push(FMT_CONV);
                out.push(*kind);
                out.push(*flags);
                out.extend_from_slice(&width.to_le_bytes());
                out.extend_from_slice(&precision.to_le_bytes());
            }
        }
    }
    out.push(FMT_END);
    out
}

/// For each argument of a format, in order: is it a string?
pub fn argument_kinds(pieces: &[Piece]) -> Vec<bool> {
    let mut v = Vec::new();
    for p in pieces {
        let (n, s) = p.args();
        for i in 0..n {
            v.push(s && i + 1 == n);
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_text_and_conversions() {
        let e = encode(&[
            Piece::Text(b"ab".to_vec()),
            Piece::Conv { kind: CONV_SIGNED, flags: FLAG_LEFT, width: 5, precision: COUNT_NONE },
        ]);
        assert_eq!(e, vec![1, 2, 0, b'a', b'b', 2, 1, 1, 5, 0, 0, 0, 255, 255, 255, 255, 0]);
        let k = argument_kinds(&[Piece::Conv { kind: CONV_STRING, flags: 0, width: COUNT_ARG, precision: 3 }]);
        assert_eq!(k, vec![false, true]);
    }
}

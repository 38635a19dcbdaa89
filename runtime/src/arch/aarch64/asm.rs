//! A small assembler for aarch64 (one word per instruction, labels for
//! branches and literal loads): what the trampolines and the block tracer
//! (`blocks.rs`) emit. Every encoding is written out where it is used,
//! with the instruction in a comment; the helpers here are the ones both
//! need.

/// Why a trampoline could not be assembled.
#[derive(Debug, thiserror::Error)]
pub enum AsmError {
    #[error("{0}")]
    Unsupported(&'static str),
    #[error("a branch in a trampoline is out of reach")]
    Reach,
}

pub(super) const X0: u32 = 0;
pub(super) const X1: u32 = 1;
pub(super) const X2: u32 = 2;
pub(super) const X3: u32 = 3;
pub(super) const X4: u32 = 4;
pub(super) const X16: u32 = 16;
pub(super) const X17: u32 = 17;
pub(super) const LR: u32 = 30;
/// Register 31 as a base: sp; as data: the zero register.
pub(super) const SP: u32 = 31;
pub(super) const ZR: u32 = 31;

/// A label: the instruction index it marks once bound, and the branches
/// waiting for it.
#[derive(Default)]
pub(super) struct Label {
    at: Option<usize>,
    uses: Vec<(usize, Kind)>,
}

#[derive(Clone, Copy)]
pub(super) enum Kind {
    /// `b`: imm26 at bit 0.
    B26,
    /// `cbz`/`cbnz`/`b.cond`: imm19 at bit 5.
    Imm19,
    /// `adr`: a byte offset, immlo at bit 29, immhi at bit 5.
    Adr,
    /// `tbz`/`tbnz`: imm14 at bit 5.
    Imm14,
}

/// Instructions being assembled (one word each).
#[derive(Default)]
pub(super) struct Asm {
    words: Vec<u32>,
    labels: Vec<Label>,
}

impl Asm {
    pub(super) fn emit(&mut self, w: u32) {
        self.words.push(w);
    }

    pub(super) fn label(&mut self) -> usize {
        self.labels.push(Label::default());
        self.labels.len() - 1
    }

    /// Words emitted so far (the next word's index).
    pub(super) fn len(&self) -> usize {
        self.words.len()
    }

    /// A 64-bit literal (two words, little-endian).
    pub(super) fn quad(&mut self, v: u64) {
        self.emit(v as u32);
        self.emit((v >> 32) as u32);
    }

    /// A `nop` if needed so that the next word is 8-byte aligned (the
    /// code starts 8-byte aligned).
    pub(super) fn align8(&mut self) {
        if self.words.len() % 2 == 1 {
            self.emit(super::patch::NOP);
        }
    }

    /// The word label `l` is bound to, once it is.
    pub(super) fn labels_at(&self, l: usize) -> Option<usize> {
        self.labels.get(l).and_then(|l| l.at)
    }

    pub(super) fn bind(&mut self, l: usize) {
        self.labels[l].at = Some(self.words.len());
    }

    pub(super) fn branch(&mut self, w: u32, l: usize, kind: Kind) {
        self.labels[l].uses.push((self.words.len(), kind));
        self.emit(w);
    }

    pub(super) fn finish(mut self) -> Result<Vec<u8>, AsmError> {
        for l in std::mem::take(&mut self.labels) {
            let at = l.at.ok_or(AsmError::Unsupported("internal error: an unbound label"))?;
            for (from, kind) in l.uses {
                let d = at as i64 - from as i64;
                // The field's reach, in words (adr's in bytes).
                let (bits, by) = match kind {
                    Kind::B26 => (26, d),
                    Kind::Imm19 => (19, d),
                    Kind::Imm14 => (14, d),
                    Kind::Adr => (21, 4 * d),
                };
                if !(-(1i64 << (bits - 1))..1i64 << (bits - 1)).contains(&by) {
                    return Err(AsmError::Reach);
                }
                self.words[from] |= match kind {
                    Kind::B26 => (d as u32) & 0x03ff_ffff,
                    Kind::Imm19 => ((d as u32) & 0x7ffff) << 5,
                    Kind::Imm14 => ((d as u32) & 0x3fff) << 5,
                    Kind::Adr => {
                        let b = (4 * d) as u32;
                        (b & 3) << 29 | ((b >> 2) & 0x7ffff) << 5
                    }
                };
            }
        }
        Ok(self.words.iter().flat_map(|w| w.to_le_bytes()).collect())
    }

    /// `str xt, [xn, #off]` (off a multiple of 8, < 32 KiB).
    pub(super) fn str64(&mut self, rt: u32, rn: u32, off: u32) {
        debug_assert!(off.is_multiple_of(8) && off < 32768);
        self.emit(0xf900_0000 | (off / 8) << 10 | rn << 5 | rt);
    }

    pub(super) fn ldr64(&mut self, rt: u32, rn: u32, off: u32) {
        debug_assert!(off.is_multiple_of(8) && off < 32768);
        self.emit(0xf940_0000 | (off / 8) << 10 | rn << 5 | rt);
    }

    /// `stp xt, xt2, [xn, #off]` (off a multiple of 8, < 512).
    pub(super) fn stp64(&mut self, rt: u32, rt2: u32, rn: u32, off: u32) {
        debug_assert!(off.is_multiple_of(8) && off < 512);
        self.emit(0xa900_0000 | (off / 8) << 15 | rt2 << 10 | rn << 5 | rt);
    }

    pub(super) fn ldp64(&mut self, rt: u32, rt2: u32, rn: u32, off: u32) {
        debug_assert!(off.is_multiple_of(8) && off < 512);
        self.emit(0xa940_0000 | (off / 8) << 15 | rt2 << 10 | rn << 5 | rt);
    }

    /// `str wt, [xn, #off]` (off a multiple of 4, < 16 KiB).
    pub(super) fn str32(&mut self, rt: u32, rn: u32, off: u32) {
        debug_assert!(off.is_multiple_of(4) && off < 16384);
        self.emit(0xb900_0000 | (off / 4) << 10 | rn << 5 | rt);
    }

    pub(super) fn ldr32(&mut self, rt: u32, rn: u32, off: u32) {
        debug_assert!(off.is_multiple_of(4) && off < 16384);
        self.emit(0xb940_0000 | (off / 4) << 10 | rn << 5 | rt);
    }

    /// `add xd, xn, #imm` / `sub` (xn or xd may be sp), imm < 16 MiB.
    pub(super) fn add_imm(&mut self, rd: u32, rn: u32, imm: u32, sub: bool) {
        debug_assert!(imm < 1 << 24);
        let op = if sub { 0xd100_0000 } else { 0x9100_0000 };
        let (hi, lo) = (imm >> 12, imm & 0xfff);
        let mut src = rn;
        if hi != 0 {
            self.emit(op | 1 << 22 | (hi & 0xfff) << 10 | src << 5 | rd);
            src = rd;
        }
        if lo != 0 || hi == 0 {
            self.emit(op | lo << 10 | src << 5 | rd);
        }
    }

    /// xd = v (`movz`, then `movk` for each further non-zero half-word).
    pub(super) fn mov64(&mut self, rd: u32, v: u64) {
        self.emit(0xd280_0000 | ((v & 0xffff) as u32) << 5 | rd);
        for hw in 1..4u32 {
            let h = ((v >> (16 * hw)) & 0xffff) as u32;
            if h != 0 {
                self.emit(0xf280_0000 | hw << 21 | h << 5 | rd);
            }
        }
    }

    /// wd = v.
    pub(super) fn mov32(&mut self, rd: u32, v: u32) {
        self.emit(0x5280_0000 | (v & 0xffff) << 5 | rd);
        if v >> 16 != 0 {
            self.emit(0x72a0_0000 | (v >> 16) << 5 | rd);
        }
    }

    /// Call the function at `f` (through x16).
    pub(super) fn call(&mut self, f: u64) {
        self.mov64(X16, f);
        self.emit(0xd63f_0000 | X16 << 5); // blr x16
    }
}

//! What both architectures' clobber analyses share (`x86_64/clobber.rs`,
//! `aarch64/clobber.rs`): the registers a call to a function of the blob
//! may change are its own and those of every function it calls or
//! branches to, memoised per function. Each architecture decodes one
//! function ([`Isa::decode`]); "unknown" (None) anywhere makes the answer
//! unknown.

use std::collections::{BTreeSet, HashMap};
use std::ops::BitOr;
use telco_abi::artifact::Symbol;

/// One function of the blob, as an architecture's decoder reads it.
pub struct Function<'a> {
    /// Its bytes, at offsets `lo..hi` of the blob.
    pub bytes: &'a [u8],
    pub lo: u64,
    pub hi: u64,
    symbols: &'a [Symbol],
}

impl Function<'_> {
    /// A branch to `target` outside the function, as a call (or tail call)
    /// of the function starting there; None when no function starts there.
    pub fn callee(&self, target: u64) -> Option<u32> {
        let t = u32::try_from(target).ok()?;
        self.symbols.iter().any(|s| s.offset == t).then_some(t)
    }
}

/// An architecture's reading of one function.
pub trait Isa {
    /// A set of registers (telco-abi's `RegMask`).
    type Mask: Copy + Default + BitOr<Output = Self::Mask>;
    /// The registers the function itself may change and the functions it
    /// branches to; None when that cannot be known.
    fn decode(f: &Function) -> Option<(Self::Mask, Vec<u32>)>;
}

/// Memoised clobber sets of the functions of one blob.
pub struct Clobbers<'a, I: Isa> {
    code: &'a [u8],
    symbols: &'a [Symbol],
    own: HashMap<u32, Option<(I::Mask, Vec<u32>)>>,
}

impl<'a, I: Isa> Clobbers<'a, I> {
    pub fn new(code: &'a [u8], symbols: &'a [Symbol]) -> Self {
        Clobbers { code, symbols, own: HashMap::new() }
    }

    /// The registers a call to the function at `start` may change, with
    /// everything it calls; None when that cannot be known.
    pub fn of(&mut self, start: u32) -> Option<I::Mask> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![start];
        let mut mask = I::Mask::default();
        while let Some(f) = todo.pop() {
            if !seen.insert(f) {
                continue;
            }
            let (m, callees) = self.function(f)?;
            mask = mask | m;
            todo.extend(callees.iter().copied());
        }
        Some(mask)
    }

    /// One function's own registers and the functions it branches to (a
    /// start no non-empty symbol names: unknown).
    fn function(&mut self, start: u32) -> Option<(I::Mask, Vec<u32>)> {
        if let Some(r) = self.own.get(&start) {
            return r.clone();
        }
        let r = self.symbols.iter().find(|s| s.offset == start && s.size > 0).and_then(|sym| {
            let (lo, hi) = (u64::from(sym.offset), u64::from(sym.offset) + u64::from(sym.size));
            let bytes = self.code.get(lo as usize..hi as usize)?;
            I::decode(&Function { bytes, lo, hi, symbols: self.symbols })
        });
        self.own.insert(start, r.clone());
        r
    }
}

//! Unwind rows for code without CFI (our own in the target: trampolines,
//! handlers, the runtime library): at each offset, where the frame's `E`
//! (its stack pointer at the call), the frame pointer and the return
//! address are. The architectures produce them (`arch::native::frames`),
//! `owncode` keeps them by piece and steps out of them.

/// Where `E` is, from the registers at an instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cfa {
    /// Not known: the unwinder stops here.
    Unknown,
    /// E = sp + k.
    Sp(i64),
    /// E = register (a [`telco_abi::arch::native`] index) + k: only where
    /// the registers are the sample's own (its first frame).
    Reg(usize, i64),
    /// E = the word at sp + a, + k.
    Deref(i64, i64),
    /// E = the frame pointer + k (a function whose stack pointer moves by
    /// an amount only known when it runs: `alloca`).
    Fp(i64),
    /// The probed call returned into its trampoline: the frame is the
    /// caller's, at sp + k, and the return address is the one its shadow
    /// stack recorded for the trampoline.
    Returned(i64),
}

/// Where the frame's own frame pointer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fp {
    /// In the frame-pointer register still.
    Same,
    /// Saved at E + k.
    At(i64),
}

/// Where the frame's return address is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ra {
    /// At E + k (x86_64: always E - 8; aarch64: where the code saved x30).
    At(i64),
    /// In the link register still (aarch64: known in a sample's first
    /// frame only).
    Lr,
    /// The one the thread's shadow stack holds for this return
    /// trampoline (aarch64's, until it has the address in x30): the
    /// profiler finds it by the trampoline's address, as it does for a
    /// return address that names a return trampoline.
    Shadow,
    Unknown,
}

/// From `off` (bytes into its piece) to the next row's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Row {
    pub off: u32,
    pub cfa: Cfa,
    pub fp: Fp,
    pub ra: Ra,
}

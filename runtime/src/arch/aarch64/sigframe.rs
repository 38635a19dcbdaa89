//! The signal frame `rt_sigreturn` reads (arch/arm64's `struct
//! rt_sigframe`): where the registers, the signal mask and the FP/SIMD
//! record lie in it. The remote-operation stub (`stub.rs`) and the block
//! tracer's way out of its code cache (`blocks.rs`) both end with
//! `rt_sigreturn` over such a frame, to put every register back at once.

/// The signal frame's layout (arch/arm64's `struct rt_sigframe`).
pub const UC: usize = 128;
/// `uc_stack` (a `stack_t`: sp, flags, size), which `rt_sigreturn` gives
/// `sigaltstack`: zero, it changes nothing.
pub const UC_STACK: usize = UC + 16;
pub const SIGMASK: usize = UC + 40;
pub const MCONTEXT: usize = UC + 176;
pub const REGS: usize = MCONTEXT + 8;
pub const RESERVED: usize = MCONTEXT + 288;
pub const FPSIMD_MAGIC: u32 = 0x4650_8001;
pub const FPSIMD_SIZE: usize = 528;
pub const FRAME: usize = RESERVED + FPSIMD_SIZE + 16;
/// The whole `struct rt_sigframe` (`__reserved` is 4096 bytes):
/// `rt_sigreturn` refuses a frame whose full size does not fit below the
/// top of the address space (`access_ok`), which a frame built on a stack
/// near that top would not, though only `FRAME` bytes of it are read.
pub const KERNEL_FRAME: usize = RESERVED + 4096;

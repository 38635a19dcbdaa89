//! Frida's ITRC instruction-trace format (Frida's `frida-itrace` backend
//! and `frida-tools/itracer.py` write it), as laid out below.
//!
//! # The file
//!
//! ```text
//! "ITRC"                                   4-byte magic
//! record*                                  until end of file
//!   u32be 1 (MESSAGE)  u32be len  JSON[len]  u32be data_len  data[data_len]
//!   u32be 2 (CHUNK)    u32be len  bytes[len]
//! ```
//!
//! The JSON of a message is what Frida's Python side writes with
//! `json.dumps` (`", "` and `": "` separators, non-ASCII escaped), so our
//! messages are byte-identical to Frida's for the same content:
//!
//! * `{"type": "itrace:start", "payload": [{"name": "rip", "size": 8}, …]}`,
//!   data = the initial value of every register, in list order, each
//!   `size` bytes, little-endian;
//! * `{"type": "itrace:compile", "payload": {"writes": [[block_offset,
//!   register_index], …], "address": "0x…", "size": n, "compiled":
//!   {"address": "0x…", "size": n}, "name": "module!0xoff", "module": {"path":
//!   …, "base": "0x…"}}}` (no `module` when the block is in none);
//! * `{"type": "itrace:lost", "payload": {"lost": n}}`: `n` is the
//!   *cumulative* number of block records dropped so far;
//! * `{"type": "itrace:end"}`: the end point was reached.
//!
//! The bytes of all CHUNK records concatenate into one stream of block
//! records: `u64 block_address` (little-endian) followed by one value per
//! entry of the block's `writes`, each as wide as its register, with no
//! padding. A record may straddle two chunks (Frida cuts its ring buffer
//! anywhere); ours are cut at record boundaries unless one record is larger
//! than a chunk.
//!
//! Frida's `writes` start with `[0, lr]`: the link register at block
//! entry. Frida records no writes for a block's last (branch) instruction,
//! because it stores the record before that instruction runs.
//!
//! # x86_64 (ours; Frida only ever wrote arm64)
//!
//! * Registers ([`x64::REGISTERS`]): Frida's x64 `GumCpuContext` order `rip,
//!   r15 … r8, rdi, rsi, rbp, rsp, rbx, rdx, rcx, rax`, then `rflags`, then
//!   one pseudo-register `ra` (index [`x64::RA`]), all 8 bytes, then the
//!   vector registers `ymm0` … `ymm15` ([`x64::VECTORS`], 32 bytes each, as
//!   Frida's arm64 list ends with `v0` … `v31`, 16 bytes each). x86_64 has no
//!   link register; `ra` is its stand-in: the return address of the function
//!   the block belongs to (see [`Recorder`]). Every block's first write is
//!   `[0, 18]` (`ra` at block entry), as Frida's is `[0, 33]` (`lr`).
//! * A write of `eax`, `ax`, `al` or `ah` is a write of `rax`; an instruction
//!   that modifies any flag writes `rflags` (Frida's arm64 backend records
//!   `nzcv` the same way). A write of `xmmN`, `ymmN` or `zmmN` (N < 16) is a
//!   write of `ymmN`, recorded whole (without AVX its upper half is 0);
//!   `xmm16` up, mask and segment registers are not in the list.
//! * Unlike Frida, the block's last instruction's writes are recorded too
//!   (`rsp` after `call`/`ret`, `rax`/`rcx`/`r11` after `syscall`): we
//!   record after the instruction ran, so the values exist, and without
//!   them the stack pointer could not be followed across calls.
//! * Extension: the data of an `itrace:compile` message is the block's code
//!   bytes (Frida's is empty), so a reader can disassemble. Readers that
//!   expect Frida's empty data skip it; [`RecorderConfig::embed_code`]
//!   turns it off.
//!
//! # Modules
//!
//! [`Writer`] writes records; [`x64`] and [`a64`] (Frida's own arm64
//! layout, for telco-stap on aarch64) decode blocks and know their
//! register lists; [`Recorder`] (x86_64) and [`A64Recorder`] turn single
//! steps into records; [`Reader`] parses any
//! ITRC file (ours and Frida's arm64 ones); [`dump`] and [`chrome`] render a
//! file for `telco-stap itrc-dump`.
//!
//! **Boundary:** a file format, no process access: target memory reaches
//! the [`Recorder`] only through the closure its caller passes, and a
//! malformed file is a [`ReadError`], never a panic.

pub mod a64;
pub mod chrome;
pub mod dump;
mod isa;
mod json;
mod reader;
mod recorder;
mod writer;
pub mod x64;

pub use isa::Isa;
pub use reader::{Arch, Block, Event, ReadError, Reader, Record, RegisterSpec, Value, WriteValue};
pub use recorder::{A64Recorder, IsaRecorder, ModuleInfo, RecordError, Recorder, RecorderConfig, RecorderStats, X64};
pub use writer::{BlockSpec, Writer};

/// The 4-byte magic every ITRC file starts with.
pub const MAGIC: &[u8; 4] = b"ITRC";
/// Record type of a MESSAGE (JSON + data).
pub const RECORD_MESSAGE: u32 = 1;
/// Record type of a CHUNK (bytes of the block-record stream).
pub const RECORD_CHUNK: u32 = 2;

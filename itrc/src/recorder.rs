//! Turns the single steps of one traced thread into an ITRC file.
//!
//! Driven by a single-step loop (the tracer's `.itrace`:
//! runtime/src/itrace.rs): [`Recorder::start`] with the registers and the
//! traced function's return address, [`Recorder::step`] after every
//! instruction, then [`Recorder::end`] (the call returned) or
//! [`Recorder::finish`] (stopped before, without `itrace:end`). Each block
//! is decoded and compiled once (`x64::read_block`, `itrace:compile`);
//! every execution of it is one record: its address, `ra`, then each
//! write's value, taken after its instruction ran.
//!
//! **Invariants:** every block's first write is `[0, ra]`; a record always
//! has exactly one value per declared write (a block left early gets the
//! registers' current values for the writes that did not happen); nothing is
//! dropped silently: past [`RecorderConfig::max_bytes`] records are counted
//! and the file gets `itrace:lost` with the total. **Boundary:** target
//! memory only through the `read` closure given to `step`.

use crate::isa::Isa;
use crate::reader::RegisterSpec;
use crate::writer::{compile_json, BlockSpec, Writer};
use crate::x64::{self, Flow, Insn, X64Block, X64Regs, RA};
use std::collections::HashMap;
use std::io::{self, Write};

/// x86_64.
pub struct X64;

impl Isa for X64 {
    type Regs = X64Regs;

    fn specs() -> Vec<RegisterSpec> {
        x64::register_specs()
    }

    fn start_values(regs: &X64Regs, link: u64) -> Vec<u8> {
        let mut values = Vec::with_capacity(8 * x64::REGISTERS.len());
        for v in regs.to_array().into_iter().chain([link]) {
            values.extend_from_slice(&v.to_le_bytes());
        }
        for v in &regs.ymm {
            values.extend_from_slice(v);
        }
        values
    }

    fn pc(regs: &X64Regs) -> u64 {
        regs.rip
    }

    fn put(regs: &X64Regs, index: u32, out: &mut Vec<u8>) {
        regs.put(index, out)
    }

    fn value_size(index: u32) -> usize {
        x64::value_size(index)
    }

    fn read_block(pc: u64, read: &mut dyn FnMut(u64, &mut [u8]) -> usize) -> X64Block {
        x64::read_block(pc, read)
    }

    fn opaque_block(pc: u64, regs_after: &X64Regs, code: Vec<u8>) -> X64Block {
        opaque_block(pc, regs_after, code)
    }

    fn link_register(_regs: &X64Regs) -> Option<u64> {
        None
    }
}

/// How a [`Recorder`] writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecorderConfig {
    /// Upper bound of the chunk buffer, in bytes (records are gathered
    /// until the next one would not fit). Default 64 KiB.
    pub chunk_size: usize,
    /// Byte budget of the whole file. A record or `itrace:compile` that
    /// would take the file past it is not written, and from then on every
    /// block record is dropped and counted; the count goes out as
    /// `itrace:lost` before the file ends (that message and `itrace:end`,
    /// under 100 bytes together, may exceed the budget). `None`: no limit.
    pub max_bytes: Option<u64>,
    /// Put each block's code bytes in its `itrace:compile` message's data
    /// (our extension; Frida's is empty). Default true: `itrc-dump
    /// --disasm` needs them.
    pub embed_code: bool,
}

impl Default for RecorderConfig {
    fn default() -> Self {
        RecorderConfig { chunk_size: 64 << 10, max_bytes: None, embed_code: true }
    }
}

/// A mapped module, for naming blocks `name!0xoffset` as Frida does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModuleInfo {
    /// File name, e.g. `libc.so.6`.
    pub name: String,
    /// Full path.
    pub path: String,
    /// Load address (where offset 0 of the file is mapped).
    pub base: u64,
    /// Size of the mapped range starting at `base`.
    pub size: u64,
}

/// Counters of a recording.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecorderStats {
    /// Steps seen.
    pub steps: u64,
    /// Distinct blocks (each one `itrace:compile`).
    pub blocks: u64,
    /// Block records written.
    pub records: u64,
    /// Block records dropped because of [`RecorderConfig::max_bytes`].
    pub lost: u64,
    /// Records of blocks that execution left before their last instruction
    /// (written; see [`Recorder`]).
    pub partial: u64,
    /// Bytes in the file so far.
    pub bytes: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("writing the ITRC file failed: {0}")]
    Io(#[from] io::Error),
    #[error("Recorder::{0} called before Recorder::start")]
    NotStarted(&'static str),
    #[error("Recorder::start called twice")]
    AlreadyStarted,
}

struct Known {
    block: X64Block,
    /// Bytes of the values in the block's records (writes incl. `ra`).
    values: usize,
    /// Whether its `itrace:compile` is in the file.
    written: bool,
}

/// The block execution is in.
struct Open {
    address: u64,
    /// Index of the next instruction expected to execute.
    next: usize,
    /// Values so far: `ra` at entry, then one per write of each executed
    /// instruction.
    values: Vec<u8>,
}

/// Deepest return-address stack kept (deeper calls forget their oldest
/// frames; `ra` is then 0 after returning past them).
const MAX_RA_DEPTH: usize = 1 << 16;

/// Records one thread's execution, driven by a single-stepping loop.
///
/// Call [`start`](Recorder::start) with the registers at the first
/// instruction, [`step`](Recorder::step) after every single step, and
/// [`end`](Recorder::end) (the end point was reached: `itrace:end`) or
/// [`finish`](Recorder::finish) (tracing stopped otherwise). The recorder
/// never touches the process: memory comes through the `read` closure.
///
/// * **Blocks.** Execution entering an address that is not the next
///   instruction of the current block enters the block starting there; the
///   first time, it is decoded ([`x64::read_block`]) and an
///   `itrace:compile` written. A jump into the middle of a known block is a
///   different block, as in Frida's Stalker.
/// * **Values.** After each instruction, the registers it writes are taken
///   from `regs_after`. When the block's last instruction has run, the
///   record (`address`, `ra`, values) goes into the chunk buffer.
/// * **`ra`** (the link-register stand-in) is the return address of the
///   innermost function being executed: the one given to `start`, pushed
///   on each `call` (the address after it), popped on each `ret` (down to
///   the frame returned to, so `longjmp`-style unwinding re-synchronises;
///   0 once the traced function has returned and nothing is known).
/// * **Leaving a block early** (a signal handler runs, the tracer stops
///   mid-block): the record is still written with exactly one value per
///   declared write. Writes of instructions that did not run get the
///   register's value when execution left the block, which is what the
///   register holds there, so replaying a file's writes always gives the
///   true register state at every record boundary. Such records are
///   counted in [`RecorderStats::partial`].
/// * **`rep` string instructions** single-step once per iteration; their
///   writes are taken when the instruction finishes (the step after which
///   `rip` moved on).
/// * **Undecodable code** (unreadable, invalid): the instruction becomes a
///   one-instruction block whose writes are every register, so no state
///   change is missed. Its size is how far `rip` moved (1 if it branched).
///
/// # Example: the ptrace loop
///
/// ```
/// use telco_itrc::{x64::X64Regs, Recorder, RecorderConfig};
///
/// // The traced function at 0x1000: `mov eax, 1; ret`.
/// let code = [0xb8, 1, 0, 0, 0, 0xc3];
/// // process_vm_readv in the tracer; here a slice.
/// let mut read = |addr: u64, buf: &mut [u8]| {
///     let at = addr.wrapping_sub(0x1000) as usize;
///     let n = buf.len().min(code.len().saturating_sub(at));
///     buf[..n].copy_from_slice(&code[at..at + n]);
///     n
/// };
///
/// let mut rec = Recorder::new(Vec::new(), RecorderConfig::default())?;
/// // Stopped at the function's entry: PTRACE_GETREGS gives the registers
/// // (`X64Regs::from(&user_regs)`), the u64 at rsp is the return address.
/// let mut regs = X64Regs { rip: 0x1000, rsp: 0x7ff0, ..Default::default() };
/// rec.start(&regs, 0x4242)?;
/// // Loop: PTRACE_SINGLESTEP, waitpid, PTRACE_GETREGS, then `step`;
/// // stop after the step that returned (rip == 0x4242, rsp above entry).
/// let pc = regs.rip;
/// regs.rip = 0x1005;
/// regs.rax = 1;
/// rec.step(pc, &regs, &mut read)?;
/// let pc = regs.rip;
/// regs.rip = 0x4242;
/// regs.rsp += 8;
/// rec.step(pc, &regs, &mut read)?;
/// let (file, stats) = rec.end()?;
/// assert_eq!((stats.blocks, stats.records, stats.lost), (1, 1, 0));
/// assert!(file.starts_with(b"ITRC"));
/// # Ok::<(), telco_itrc::RecordError>(())
/// ```
pub struct IsaRecorder<W: Write, I: Isa> {
    writer: Writer<W>,
    config: RecorderConfig,
    modules: Vec<ModuleInfo>,
    blocks: HashMap<u64, Known>,
    open: Option<Open>,
    ra: Vec<u64>,
    /// The registers after the last step (or at start).
    last: I::Regs,
    started: bool,
    /// The byte budget ran out: nothing but `itrace:lost`/`itrace:end`
    /// is written any more.
    exhausted: bool,
    lost_written: u64,
    stats: RecorderStats,
    /// [`Recorder::replay`]: the last block ended in `ret`; what it knew of
    /// the last block it was given.
    returned: bool,
    replayed: Option<Replayed>,
}

/// A replayed block's facts, kept for the next record of the same block.
#[derive(Clone, Copy)]
struct Replayed {
    address: u64,
    values: usize,
    written: bool,
    flow: Flow,
    /// The address after its last instruction.
    after: u64,
    insns: u64,
}

/// The x86_64 recorder.
pub type Recorder<W> = IsaRecorder<W, X64>;
/// The aarch64 recorder.
pub type A64Recorder<W> = IsaRecorder<W, crate::a64::A64>;

impl<W: Write, I: Isa> IsaRecorder<W, I> {
    /// Writes the magic.
    pub fn new(out: W, config: RecorderConfig) -> Result<Self, RecordError> {
        let writer = Writer::new(out, config.chunk_size)?;
        Ok(IsaRecorder {
            writer,
            config,
            modules: Vec::new(),
            blocks: HashMap::new(),
            open: None,
            ra: Vec::new(),
            last: I::Regs::default(),
            started: false,
            exhausted: false,
            lost_written: 0,
            stats: RecorderStats::default(),
            returned: false,
            replayed: None,
        })
    }

    /// Makes blocks in `module` be named `name!0xoffset` and carry the
    /// module's path and base. Call before the blocks are first entered.
    pub fn add_module(&mut self, module: ModuleInfo) {
        self.modules.push(module);
    }

    /// `itrace:start`: the register list and `regs` (the thread about to
    /// execute `regs.rip`). `return_address` is the traced function's
    /// return address (at a function entry, the `u64` at `regs.rsp`); it is
    /// the initial `ra`. Pass 0 if unknown.
    pub fn start(&mut self, regs: &I::Regs, return_address: u64) -> Result<(), RecordError> {
        if self.started {
            return Err(RecordError::AlreadyStarted);
        }
        self.started = true;
        self.ra = vec![return_address];
        self.last = *regs;
        let values = I::start_values(regs, return_address);
        self.writer.start(&I::specs(), &values)?;
        self.stats.bytes = self.writer.len();
        Ok(())
    }

    /// One single-stepped instruction: `pc_before` is where it was,
    /// `regs_after` the registers after it. `read(addr, buf)` copies target
    /// memory at `addr` into `buf` and returns how many bytes it copied; it
    /// is called only when execution enters a block seen for the first time.
    pub fn step(
        &mut self,
        pc_before: u64,
        regs_after: &I::Regs,
        read: &mut dyn FnMut(u64, &mut [u8]) -> usize,
    ) -> Result<(), RecordError> {
        if !self.started {
            return Err(RecordError::NotStarted("step"));
        }
        self.stats.steps += 1;
        if self.open.as_ref().is_some_and(|o| self.expected_pc(o) != pc_before) {
            self.close_early()?;
        }
        if self.open.is_none() {
            self.enter(pc_before, regs_after, read)?;
        }
        // `enter` opened one (or failed above).
        let Some(open) = self.open.as_mut() else { return Ok(()) };
        let known = &self.blocks[&open.address];
        let insn: &Insn = &known.block.insns[open.next];
        if I::pc(regs_after) == pc_before && insn.flow == Flow::Next {
            // One iteration of a `rep` instruction; it is not done yet.
            self.last = *regs_after;
            return Ok(());
        }
        for &w in &insn.writes {
            I::put(regs_after, w, &mut open.values);
        }
        match insn.flow {
            Flow::Call => {
                if self.ra.len() == MAX_RA_DEPTH {
                    self.ra.remove(0);
                }
                self.ra.push(pc_before.wrapping_add(insn.len as u64));
            }
            Flow::Return => match self.ra.iter().rposition(|&a| a == I::pc(regs_after)) {
                Some(i) => self.ra.truncate(i),
                None => {
                    self.ra.pop();
                }
            },
            _ => {}
        }
        open.next += 1;
        let done = open.next == known.block.insns.len();
        self.last = *regs_after;
        if done {
            if let Some(open) = self.open.take() {
                self.emit(open.address, &open.values)?;
            }
        }
        Ok(())
    }

    /// Writes the records gathered so far as a chunk, then `itrace:lost` if
    /// records were dropped since the last one, and flushes the writer.
    pub fn flush(&mut self) -> Result<(), RecordError> {
        self.writer.flush_chunk()?;
        self.write_lost()?;
        self.writer.flush()?;
        self.stats.bytes = self.writer.len();
        Ok(())
    }

    /// Counters so far.
    pub fn stats(&self) -> RecorderStats {
        self.stats
    }

    /// The end point was reached: closes the open block (see "leaving a
    /// block early"), writes the last chunk, `itrace:lost` if records were
    /// dropped, and `itrace:end`.
    pub fn end(self) -> Result<(W, RecorderStats), RecordError> {
        self.close(true)
    }

    /// Tracing stopped before the end point (thread exited, detach, time
    /// limit): as [`end`](Recorder::end) but without `itrace:end`, as Frida
    /// writes none then.
    pub fn finish(self) -> Result<(W, RecorderStats), RecordError> {
        self.close(false)
    }

    fn close(mut self, reached_end: bool) -> Result<(W, RecorderStats), RecordError> {
        if self.open.is_some() {
            self.close_early()?;
        }
        self.writer.flush_chunk()?;
        self.write_lost()?;
        if reached_end {
            self.writer.end()?;
        }
        self.stats.bytes = self.writer.len();
        Ok((self.writer.finish()?, self.stats))
    }

    fn expected_pc(&self, open: &Open) -> u64 {
        let known = &self.blocks[&open.address];
        open.address.wrapping_add(known.block.insns[open.next].offset as u64)
    }

    /// Execution enters the block at `pc`.
    fn enter(
        &mut self,
        pc: u64,
        regs_after: &I::Regs,
        read: &mut dyn FnMut(u64, &mut [u8]) -> usize,
    ) -> Result<(), RecordError> {
        if let std::collections::hash_map::Entry::Vacant(slot) = self.blocks.entry(pc) {
            let mut block = I::read_block(pc, read);
            if block.insns.is_empty() {
                block = I::opaque_block(pc, regs_after, block.code);
            }
            let values = record_bytes::<I>(&block);
            slot.insert(Known { block, values, written: false });
            self.stats.blocks += 1;
        }
        self.compile(pc)?;
        let values_len = self.blocks[&pc].values;
        let mut values = Vec::with_capacity(values_len);
        // The link register at block entry: the machine's (before the
        // block's first instruction ran), or the tracked return address.
        let link = I::link_register(&self.last).unwrap_or_else(|| self.ra.last().copied().unwrap_or(0));
        values.extend_from_slice(&link.to_le_bytes());
        self.open = Some(Open { address: pc, next: 0, values });
        Ok(())
    }

    /// The known block at `pc`'s `itrace:compile`, once.
    fn compile(&mut self, pc: u64) -> Result<(), RecordError> {
        let known = &self.blocks[&pc];
        if !known.written && !self.exhausted {
            let spec = self.spec(&known.block);
            let data: &[u8] = if self.config.embed_code { &known.block.code } else { &[] };
            let json = compile_json(&spec);
            if self.fits(Writer::<W>::message_cost(json.len(), data.len())) {
                self.writer.message(&json, data)?;
                if let Some(k) = self.blocks.get_mut(&pc) {
                    k.written = true;
                }
            } else {
                self.exhausted = true;
            }
            self.stats.bytes = self.writer.len();
        }
        Ok(())
    }

    /// One whole execution of `block`, recorded elsewhere (the in-target
    /// block tracer): `values` are its writes' values in
    /// [`X64Block::writes`] order without the first (`ra`, which the
    /// recorder keeps as in [`step`](Recorder::step): a block ending in a
    /// call pushes its return address, one ending in `ret` pops down to the
    /// next block's address). Missing values are 0, extra ones ignored.
    pub fn replay(&mut self, block: &X64Block, values: &[u64]) -> Result<(), RecordError> {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.replay_raw(block, &bytes)
    }

    /// [`Recorder::replay`] with the values as they lie in memory (`u64`s,
    /// little-endian), copied into the record as they are. Where the link
    /// register is a machine register ([`Isa::LINK_IN_RECORD`]) the values
    /// start with its value at the block's entry: every write's value.
    pub fn replay_raw(&mut self, block: &X64Block, values: &[u8]) -> Result<(), RecordError> {
        if !self.started {
            return Err(RecordError::NotStarted("replay"));
        }
        if self.open.is_some() {
            self.close_early()?;
        }
        let pc = block.address;
        if std::mem::take(&mut self.returned) {
            match self.ra.iter().rposition(|&a| a == pc) {
                Some(i) => self.ra.truncate(i),
                None => {
                    self.ra.pop();
                }
            }
        }
        // The same block again (a loop): what the last one found.
        let last = match self.replayed {
            Some(r) if r.address == pc => r,
            _ => {
                if let std::collections::hash_map::Entry::Vacant(slot) = self.blocks.entry(pc) {
                    let values = record_bytes::<I>(block);
                    slot.insert(Known { block: block.clone(), values, written: false });
                    self.stats.blocks += 1;
                }
                self.compile(pc)?;
                let k = &self.blocks[&pc];
                let (flow, after) = k
                    .block
                    .insns
                    .last()
                    .map_or((Flow::Other, pc), |l| (l.flow, pc.wrapping_add(u64::from(l.offset + l.len))));
                let r = Replayed {
                    address: pc,
                    values: k.values,
                    written: k.written,
                    flow,
                    after,
                    insns: k.block.insns.len() as u64,
                };
                self.replayed = Some(r);
                r
            }
        };
        self.stats.steps += last.insns;
        let len = 8 + last.values;
        if self.exhausted || !last.written || !self.fits(self.writer.record_cost(len)) {
            self.exhausted = true;
            self.stats.lost += 1;
        } else {
            let mut head = [0u8; 16];
            head[..8].copy_from_slice(&pc.to_le_bytes());
            head[8..].copy_from_slice(&self.ra.last().copied().unwrap_or(0).to_le_bytes());
            let (head, want) =
                if I::LINK_IN_RECORD { (&head[..8], last.values) } else { (&head[..], last.values.saturating_sub(8)) };
            if values.len() >= want {
                self.writer.record_parts(&[head, &values[..want]])?;
            } else {
                let pad = vec![0u8; want - values.len()];
                self.writer.record_parts(&[head, values, &pad])?;
            }
            self.stats.records += 1;
            self.stats.bytes = self.writer.len();
        }
        match last.flow {
            Flow::Call => {
                if self.ra.len() == MAX_RA_DEPTH {
                    self.ra.remove(0);
                }
                self.ra.push(last.after);
            }
            Flow::Return => self.returned = true,
            _ => {}
        }
        Ok(())
    }

    /// The code at `address` changed (self-modifying code): the next
    /// block recorded there is decoded and compiled anew.
    pub fn forget_block(&mut self, address: u64) {
        self.blocks.remove(&address);
        if self.replayed.is_some_and(|r| r.address == address) {
            self.replayed = None;
        }
    }

    /// Execution left the open block before its last instruction: fill the
    /// writes that did not happen with the registers' current values.
    fn close_early(&mut self) -> Result<(), RecordError> {
        let Some(mut open) = self.open.take() else { return Ok(()) };
        let known = &self.blocks[&open.address];
        for insn in &known.block.insns[open.next..] {
            for &w in &insn.writes {
                I::put(&self.last, w, &mut open.values);
            }
        }
        self.stats.partial += 1;
        self.emit(open.address, &open.values)
    }

    fn emit(&mut self, address: u64, values: &[u8]) -> Result<(), RecordError> {
        let known = &self.blocks[&address];
        debug_assert_eq!(values.len(), known.values);
        let len = 8 + values.len();
        if self.exhausted || !known.written || !self.fits(self.writer.record_cost(len)) {
            self.exhausted = true;
            self.stats.lost += 1;
            return Ok(());
        }
        self.writer.record_parts(&[&address.to_le_bytes(), values])?;
        self.stats.records += 1;
        self.stats.bytes = self.writer.len();
        Ok(())
    }

    fn fits(&self, cost: u64) -> bool {
        self.config.max_bytes.is_none_or(|max| self.writer.len() + cost <= max)
    }

    fn write_lost(&mut self) -> Result<(), RecordError> {
        if self.stats.lost > self.lost_written {
            self.writer.lost(self.stats.lost)?;
            self.lost_written = self.stats.lost;
        }
        Ok(())
    }

    fn spec(&self, block: &X64Block) -> BlockSpec {
        let address = block.address;
        let module = self.modules.iter().find(|m| address.wrapping_sub(m.base) < m.size);
        BlockSpec {
            address,
            size: block.size(),
            name: match module {
                Some(m) => format!("{}!{:#x}", m.name, address - m.base),
                None => format!("{address:#x}"),
            },
            writes: block.writes(),
            compiled: (address, block.size()),
            module: module.map(|m| (m.path.clone(), m.base)),
        }
    }
}

/// Bytes of a block's record values (the link and its writes).
fn record_bytes<I: Isa>(block: &X64Block) -> usize {
    block.writes().iter().map(|&(_, r)| I::value_size(r)).sum()
}

/// A block for code that could not be decoded: one instruction, as long as
/// `rip` moved (1 if it went elsewhere), writing every register.
fn opaque_block(pc: u64, regs_after: &X64Regs, code: Vec<u8>) -> X64Block {
    let moved = regs_after.rip.wrapping_sub(pc);
    let len = if (1..=15).contains(&moved) { moved as u32 } else { 1 };
    X64Block {
        address: pc,
        insns: vec![Insn { offset: 0, len, flow: Flow::Other, writes: (1..RA).collect() }],
        code,
        end: x64::BlockEnd::Invalid,
        link: RA,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reader::{Event, Reader};
    use crate::x64::{RFLAGS, RSP};
    use iced_x86::code_asm::*;

    /// A tiny x86_64 "machine" good enough for the instructions below:
    /// enough to drive the recorder with the register values a real CPU
    /// would produce.
    struct Sim {
        code: Vec<u8>,
        base: u64,
        regs: X64Regs,
    }

    impl Sim {
        fn read(&self) -> impl FnMut(u64, &mut [u8]) -> usize + '_ {
            move |addr, buf| {
                let Some(at) = addr.checked_sub(self.base).map(|a| a as usize) else { return 0 };
                let n = buf.len().min(self.code.len().saturating_sub(at));
                buf[..n].copy_from_slice(&self.code[at..at + n]);
                n
            }
        }
    }

    fn assemble(base: u64, f: impl FnOnce(&mut CodeAssembler) -> Result<(), IcedError>) -> Vec<u8> {
        let mut a = CodeAssembler::new(64).unwrap();
        f(&mut a).unwrap();
        a.assemble(base).unwrap()
    }

    fn events(bytes: &[u8]) -> Vec<Event> {
        Reader::new(bytes).unwrap().collect::<Result<_, _>>().unwrap()
    }

    fn records(ev: &[Event]) -> Vec<String> {
        ev.iter()
            .filter_map(|e| match e {
                Event::Record(r) => Some(format!(
                    "{:#x}: {}",
                    r.address(),
                    r.writes().map(|w| format!("+{} {}={}", w.offset, w.name, w.value)).collect::<Vec<_>>().join(" ")
                )),
                _ => None,
            })
            .collect()
    }

    /// f: `push rbp; mov eax, 7; call g; pop rbp; ret` and g: `add eax, 1; ret`.
    fn program() -> Sim {
        let base = 0x1000;
        let code = assemble(base, |a| {
            a.push(rbp)?; // 0x1000
            a.mov(eax, 7)?; // 0x1001
            a.call(0x1020)?; // 0x1006
            a.pop(rbp)?; // 0x100b
            a.ret()?; // 0x100c
            for _ in 0x100d..0x1020 {
                a.int3()?;
            }
            a.add(eax, 1)?; // 0x1020 (iced-x86 picks `add eax, imm32`)
            a.ret() // 0x1025
        });
        Sim { code, base, regs: X64Regs { rip: 0x1000, rsp: 0x8000, rbp: 0x5555, rflags: 0x202, ..Default::default() } }
    }

    /// Runs `program` by hand; returns the recorder's output.
    fn run(config: RecorderConfig, steps: usize) -> (Vec<u8>, RecorderStats) {
        let mut sim = program();
        let mut rec = Recorder::new(Vec::new(), config).unwrap();
        rec.add_module(ModuleInfo { name: "prog".into(), path: "/bin/prog".into(), base: 0x1000, size: 0x1000 });
        rec.start(&sim.regs, 0x9999).unwrap();
        let effects: [&dyn Fn(&mut X64Regs); 7] = [
            &|r| {
                r.rsp -= 8;
                r.rip = 0x1001
            },
            &|r| {
                r.rax = 7;
                r.rip = 0x1006
            },
            &|r| {
                r.rsp -= 8;
                r.rip = 0x1020
            },
            &|r| {
                r.rax = 8;
                r.rflags = 0x206;
                r.rip = 0x1025
            },
            &|r| {
                r.rsp += 8;
                r.rip = 0x100b
            },
            &|r| {
                r.rsp += 8;
                r.rbp = 0x5555;
                r.rip = 0x100c
            },
            &|r| {
                r.rsp += 8;
                r.rip = 0x9999
            },
        ];
        for effect in &effects[..steps] {
            let pc = sim.regs.rip;
            effect(&mut sim.regs);
            let regs = sim.regs;
            rec.step(pc, &regs, &mut sim.read()).unwrap();
        }
        if steps == effects.len() {
            rec.end().unwrap()
        } else {
            rec.finish().unwrap()
        }
    }

    #[test]
    fn records_calls_returns_and_ra() {
        let (file, stats) = run(RecorderConfig::default(), 7);
        assert_eq!(
            stats,
            RecorderStats { steps: 7, blocks: 3, records: 3, lost: 0, partial: 0, bytes: file.len() as u64 }
        );
        let ev = events(&file);
        assert_eq!(
            records(&ev),
            [
                "0x1000: +0 ra=0x9999 +1 rsp=0x7ff8 +6 rax=0x7 +11 rsp=0x7ff0",
                "0x1020: +0 ra=0x100b +5 rax=0x8 +5 rflags=0x206 +6 rsp=0x7ff8",
                "0x100b: +0 ra=0x9999 +1 rbp=0x5555 +1 rsp=0x8000 +2 rsp=0x8008",
            ]
        );
        assert!(matches!(ev.last(), Some(Event::End)));
        let Event::Compile(b) = &ev[1] else { panic!("{ev:?}") };
        assert_eq!((b.name.as_str(), b.module.clone()), ("prog!0x0", Some(("/bin/prog".into(), 0x1000))));
        assert_eq!(b.code.as_deref(), Some(&program().code[..11]));
        assert_eq!(b.writes, [(0, RA), (1, RSP), (6, 16), (11, RSP)]);
    }

    #[test]
    fn a_trace_ending_mid_block_fills_the_remaining_writes() {
        // Stops after `push rbp; mov eax, 7`: the `call`'s rsp write did not
        // happen; the record carries rsp as it is.
        let (file, stats) = run(RecorderConfig::default(), 2);
        assert_eq!((stats.records, stats.partial), (1, 1));
        let ev = events(&file);
        assert_eq!(records(&ev), ["0x1000: +0 ra=0x9999 +1 rsp=0x7ff8 +6 rax=0x7 +11 rsp=0x7ff8"]);
        assert!(!ev.iter().any(|e| matches!(e, Event::End)), "finish writes no itrace:end");
    }

    #[test]
    fn over_budget_records_are_counted_and_reported_as_lost() {
        let full = run(RecorderConfig::default(), 7).0.len() as u64;
        // Room for the start and the first block, not for everything.
        let (file, stats) = run(RecorderConfig { max_bytes: Some(full - 100), ..Default::default() }, 7);
        assert!(stats.lost > 0, "{stats:?}");
        assert_eq!(stats.records + stats.lost, 3);
        let ev = events(&file);
        let lost: Vec<u64> = ev.iter().filter_map(|e| if let Event::Lost(n) = e { Some(*n) } else { None }).collect();
        assert_eq!(lost, [stats.lost]);
        assert!(matches!(ev.last(), Some(Event::End)));
        assert!(file.len() as u64 <= full - 100 + 100);
    }

    #[test]
    fn rep_iterations_are_one_instruction() {
        let base = 0x2000;
        let code = assemble(base, |a| {
            a.rep().movsb()?;
            a.ret()
        });
        let sim = Sim { code, base, regs: X64Regs { rip: base, rcx: 2, rsp: 0x100, ..Default::default() } };
        let mut rec = Recorder::new(Vec::new(), RecorderConfig::default()).unwrap();
        rec.start(&sim.regs, 0).unwrap();
        let mut r = sim.regs;
        for (count, rip) in [(1, base), (0, base + 2)] {
            r.rcx = count;
            r.rsi += 1;
            r.rdi += 1;
            r.rip = rip;
            rec.step(base, &r, &mut sim.read()).unwrap();
        }
        r.rsp += 8;
        r.rip = 0;
        rec.step(base + 2, &r, &mut sim.read()).unwrap();
        let (file, stats) = rec.end().unwrap();
        assert_eq!((stats.records, stats.partial), (1, 0));
        let rec = &records(&events(&file))[0];
        assert!(rec.contains("rcx=0x0") && rec.contains("rsi=0x2") && rec.contains("rsp=0x108"), "{rec}");
    }

    #[test]
    fn unreadable_code_records_every_register() {
        let mut rec = Recorder::new(Vec::new(), RecorderConfig::default()).unwrap();
        let regs = X64Regs { rip: 0x5000, ..Default::default() };
        rec.start(&regs, 0).unwrap();
        let after = X64Regs { rip: 0x5003, rax: 1, rflags: 0x46, ..regs };
        rec.step(0x5000, &after, &mut |_, _| 0).unwrap();
        let (file, stats) = rec.end().unwrap();
        assert_eq!(stats.records, 1);
        let ev = events(&file);
        let Some(Event::Record(r)) = ev.iter().find(|e| matches!(e, Event::Record(_))) else { panic!() };
        assert_eq!(r.block.size, 3);
        assert_eq!(r.values.len(), 18);
        assert_eq!(r.writes().find(|w| w.register == RFLAGS).unwrap().value.as_u64(), Some(0x46));
    }

    #[test]
    fn step_before_start_is_an_error() {
        let mut rec = Recorder::new(Vec::new(), RecorderConfig::default()).unwrap();
        let err = rec.step(0, &X64Regs::default(), &mut |_, _| 0).unwrap_err();
        assert_eq!(err.to_string(), "Recorder::step called before Recorder::start");
    }
}

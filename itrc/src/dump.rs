//! The text form of an ITRC file (`telco-stap itrc-dump`): one line per
//! message and per executed block.
//!
//! ```text
//! itrc: x86_64, 35 registers
//! start:
//!     rip=0x1000              r15=0x0                 r14=0x0               …
//! compile 0x1000 prog!0x0: 11 bytes, writes +0 ra, +1 rsp, +6 rax, +11 rsp
//!     0x1000  55                  push rbp                 ; rsp
//! exec #1 0x1000 prog!0x0: +0 ra=0x9999  +1 rsp=0x7ff8  +6 rax=0x7  +11 rsp=0x7ff0
//! lost: 2 block records dropped so far
//! end
//! summary: 3 blocks compiled, 3 blocks executed, 0 lost, end reached
//! ```
//!
//! `+N reg=value`: after the instruction ending N bytes into the block, the
//! register holds value (`+0` is the value at block entry: `ra` or `lr`).

use crate::reader::{Arch, Block, Event};
use crate::x64;
use std::io::{self, Write};

/// What to print.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DumpOptions {
    /// Print each compiled block's instructions.
    pub disasm: bool,
}

/// Counts of what was read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub blocks: u64,
    pub records: u64,
    /// The last `itrace:lost` count.
    pub lost: u64,
    /// Whether `itrace:end` was seen.
    pub ended: bool,
}

/// Prints events as they are read.
pub struct TextDump<W: Write> {
    out: W,
    opts: DumpOptions,
    names: Vec<String>,
    arch: Option<Arch>,
    summary: Summary,
    said_no_code: bool,
    /// Events before `itrace:start` (Frida writes the first block's
    /// compile first), printed right after the start so that register
    /// names are known.
    held: Vec<Event>,
    started: bool,
}

impl<W: Write> TextDump<W> {
    pub fn new(out: W, opts: DumpOptions) -> Self {
        TextDump {
            out,
            opts,
            names: Vec::new(),
            arch: None,
            summary: Summary::default(),
            said_no_code: false,
            held: Vec::new(),
            started: false,
        }
    }

    pub fn event(&mut self, e: &Event) -> io::Result<()> {
        match e {
            Event::Start { .. } if !self.started => {
                self.started = true;
                self.print(e)?;
                for e in std::mem::take(&mut self.held) {
                    self.print(&e)?;
                }
                Ok(())
            }
            Event::Compile(_) if !self.started => {
                self.held.push(e.clone());
                Ok(())
            }
            _ => self.print(e),
        }
    }

    fn print(&mut self, e: &Event) -> io::Result<()> {
        let out = &mut self.out;
        match e {
            Event::Start { registers, values } => {
                let arch = Arch::of(registers);
                self.arch = Some(arch);
                self.names = registers.iter().map(|r| r.name.clone()).collect();
                writeln!(out, "itrc: {arch}, {} registers", registers.len())?;
                writeln!(out, "start:")?;
                // The 8-byte registers in columns, the wider ones (vector
                // registers) a line each.
                let cells: Vec<String> = registers
                    .iter()
                    .zip(values.iter())
                    .filter(|(r, _)| r.size <= 8)
                    .map(|(r, v)| format!("{}={v}", r.name))
                    .collect();
                print_cells(out, &cells)?;
                for (r, v) in registers.iter().zip(values.iter()).filter(|(r, _)| r.size > 8) {
                    writeln!(out, "    {}={v}", r.name)?;
                }
            }
            Event::Compile(b) => {
                self.summary.blocks += 1;
                let writes: Vec<String> =
                    b.writes.iter().map(|&(off, reg)| format!("+{off} {}", reg_name(&self.names, reg))).collect();
                writeln!(
                    out,
                    "compile {:#x}{}: {} bytes, writes {}",
                    b.address,
                    name_suffix(b),
                    b.size,
                    if writes.is_empty() { "none".to_string() } else { writes.join(", ") }
                )?;
                if self.opts.disasm {
                    self.disasm(b)?;
                }
            }
            Event::Record(r) => {
                self.summary.records += 1;
                let writes: Vec<String> = r.writes().map(|w| format!("+{} {}={}", w.offset, w.name, w.value)).collect();
                writeln!(
                    out,
                    "exec #{} {:#x}{}: {}",
                    self.summary.records,
                    r.address(),
                    name_suffix(&r.block),
                    writes.join("  ")
                )?;
            }
            Event::Lost(n) => {
                self.summary.lost = *n;
                writeln!(out, "lost: {n} block records dropped so far")?;
            }
            Event::End => {
                self.summary.ended = true;
                writeln!(out, "end")?;
            }
            Event::Message { kind, json, data } => {
                writeln!(out, "message {kind}: {json} ({} data bytes)", data.len())?;
            }
        }
        Ok(())
    }

    fn disasm(&mut self, b: &Block) -> io::Result<()> {
        let out = &mut self.out;
        let Some(code) = &b.code else {
            if self.said_no_code {
                writeln!(out, "    (no code bytes)")?;
            } else {
                self.said_no_code = true;
                writeln!(
                    out,
                    "    (no code bytes in this file, so no disassembly: Frida's itracer does not record them)"
                )?;
            }
            return Ok(());
        };
        match self.arch {
            Some(Arch::X86_64) => {
                for (addr, bytes, text) in x64::disassemble(b.address, code) {
                    let end = (addr - b.address) as u32 + bytes.len() as u32;
                    let regs: Vec<String> = b
                        .writes
                        .iter()
                        .filter(|&&(off, _)| off == end)
                        .map(|&(_, reg)| reg_name(&self.names, reg))
                        .collect();
                    let hex: String = bytes.iter().map(|x| format!("{x:02x}")).collect();
                    let note = if regs.is_empty() { String::new() } else { format!("; {}", regs.join(" ")) };
                    let line = format!("    {addr:#x}  {hex:<20}  {text:<32} {note}");
                    writeln!(out, "{}", line.trim_end())?;
                }
            }
            Some(Arch::Arm64) => {
                writeln!(out, "    (arm64 instruction words; this build has no arm64 disassembler)")?;
                for (i, w) in code.chunks(4).enumerate() {
                    let mut word = [0u8; 4];
                    word[..w.len()].copy_from_slice(w);
                    writeln!(out, "    {:#x}  .inst {:#010x}", b.address + 4 * i as u64, u32::from_le_bytes(word))?;
                }
            }
            Some(Arch::Unknown) => writeln!(out, "    (cannot disassemble: unknown architecture)")?,
            None => writeln!(out, "    (cannot disassemble yet: this block comes before itrace:start)")?,
        }
        Ok(())
    }

    /// Flushes what was printed (after a read error, instead of `finish`).
    pub fn flush(&mut self) -> io::Result<()> {
        for e in std::mem::take(&mut self.held) {
            self.print(&e)?;
        }
        self.out.flush()
    }

    /// Prints the summary line and returns the counts.
    pub fn finish(mut self) -> io::Result<Summary> {
        for e in std::mem::take(&mut self.held) {
            self.print(&e)?;
        }
        let s = self.summary;
        writeln!(
            self.out,
            "summary: {} blocks compiled, {} blocks executed, {} lost, {}",
            s.blocks,
            s.records,
            s.lost,
            if s.ended { "end reached" } else { "no itrace:end" }
        )?;
        self.out.flush()?;
        Ok(s)
    }
}

/// The register's name, or `#index` before `itrace:start` named them
/// (Frida writes the first block's compile before the start).
fn reg_name(names: &[String], reg: u32) -> String {
    names.get(reg as usize).cloned().unwrap_or_else(|| format!("#{reg}"))
}

fn name_suffix(b: &Block) -> String {
    if b.name == format!("{:#x}", b.address) {
        String::new()
    } else {
        format!(" {}", b.name)
    }
}

fn print_cells(out: &mut dyn Write, cells: &[String]) -> io::Result<()> {
    let width = cells.iter().map(String::len).max().unwrap_or(0) + 2;
    let per_line = (100 / width).max(1);
    for line in cells.chunks(per_line) {
        let text: Vec<String> = line.iter().map(|c| format!("{c:<width$}")).collect();
        writeln!(out, "    {}", text.concat().trim_end())?;
    }
    Ok(())
}

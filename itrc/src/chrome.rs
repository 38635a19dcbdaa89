//! ITRC to Chrome Trace Event JSON (`itrc-dump --chrome OUT`), for Perfetto,
//! chrome://tracing and speedscope.
//!
//! ITRC has no clock, so time is synthetic: **1 µs per instruction
//! executed**. Every executed block is a complete event (`"ph": "X"`,
//! category `block`) lasting as many "µs" as it has instructions (decoded
//! from the code bytes on x86_64; `size / 4` on arm64; 1 when unknown).
//! Around them, every function call is a complete event (category
//! `function`) named after the block the call entered (`module!0xoffset`):
//! the timeline is the thread's call tree, a flame chart in instructions.
//!
//! Calls and returns are found from the block that ran before: on x86_64
//! with code, its last instruction (`call`, `ret`); otherwise from the
//! link register (the first write at offset 0, `lr`/`ra`): a block entered
//! with it equal to the end of the previous block is a call, and entering
//! the address a frame will return to is that frame's return (and of any
//! frames above it, as after `longjmp`). `itrace:lost` and `itrace:end`
//! become instant events. Everything is on pid 1, tid 1.

use crate::reader::{Arch, Block, Event, Record};
use crate::x64::{self, Flow};
use serde_json::json;
use std::collections::HashMap;
use std::io::{self, Write};
use std::sync::Arc;

struct Frame {
    name: String,
    start: u64,
    /// Where this call returns to, if known.
    returns_to: Option<u64>,
}

/// What the converter knows about a block.
#[derive(Clone, Copy)]
struct Shape {
    instructions: u64,
    /// How its last instruction leaves it, when the code is known.
    last: Option<Flow>,
}

/// Streams Chrome JSON as events are read; always leaves valid JSON after
/// [`ChromeTrace::finish`].
pub struct ChromeTrace<W: Write> {
    out: W,
    arch: Arch,
    /// Synthetic time: instructions so far.
    ts: u64,
    stack: Vec<Frame>,
    prev: Option<(Arc<Block>, Shape)>,
    shapes: HashMap<u64, Shape>,
    first: bool,
}

impl<W: Write> ChromeTrace<W> {
    /// Writes the header and metadata naming the process `title`.
    pub fn new(mut out: W, title: &str) -> io::Result<Self> {
        out.write_all(b"{\"traceEvents\":[\n")?;
        let mut t = ChromeTrace {
            out,
            arch: Arch::Unknown,
            ts: 0,
            stack: Vec::new(),
            prev: None,
            shapes: HashMap::new(),
            first: true,
        };
        t.emit(&json!({"name": "process_name", "ph": "M", "pid": 1, "tid": 1, "args": {"name": title}}))?;
        t.emit(&json!({"name": "thread_name", "ph": "M", "pid": 1, "tid": 1, "args": {"name": "traced thread"}}))?;
        Ok(t)
    }

    pub fn event(&mut self, e: &Event) -> io::Result<()> {
        match e {
            Event::Start { registers, .. } => self.arch = Arch::of(registers),
            Event::Record(r) => self.record(r)?,
            Event::Lost(n) => self.instant("itrace:lost", json!({"lost": n}))?,
            Event::End => self.instant("itrace:end", json!({}))?,
            Event::Compile(_) | Event::Message { .. } => {}
        }
        Ok(())
    }

    fn shape(&mut self, b: &Block) -> Shape {
        if let Some(s) = self.shapes.get(&b.address) {
            return *s;
        }
        let s = match (self.arch, &b.code) {
            (Arch::X86_64, Some(code)) => {
                let d = x64::decode_block(b.address, code);
                Shape { instructions: (d.insns.len() as u64).max(1), last: d.insns.last().map(|i| i.flow) }
            }
            (Arch::Arm64, _) => Shape { instructions: (b.size as u64 / 4).max(1), last: None },
            _ => Shape { instructions: 1, last: None },
        };
        self.shapes.insert(b.address, s);
        s
    }

    fn record(&mut self, r: &Record) -> io::Result<()> {
        let shape = self.shape(&r.block);
        // The link register at block entry, when the block declares it.
        let link = r.writes().next().filter(|w| w.offset == 0 && matches!(w.name, "lr" | "ra"));
        let link = link.and_then(|w| w.value.as_u64());
        match self.prev.take() {
            None => {}
            Some((prev, prev_shape)) => {
                let prev_end = prev.address + prev.size as u64;
                let is_call = match prev_shape.last {
                    Some(flow) => flow == Flow::Call,
                    None => link == Some(prev_end) && r.address() != prev_end,
                };
                let returned_to = self.stack.iter().rposition(|f| f.returns_to == Some(r.address()));
                if is_call {
                    self.stack.push(Frame { name: r.block.name.clone(), start: self.ts, returns_to: Some(prev_end) });
                } else if let Some(i) = returned_to.filter(|_| prev_shape.last.is_none_or(|f| f == Flow::Return)) {
                    while self.stack.len() > i {
                        self.close_frame()?;
                    }
                } else if prev_shape.last == Some(Flow::Return) && !self.stack.is_empty() {
                    // A return we cannot match: assume one frame ended.
                    self.close_frame()?;
                }
            }
        }
        if self.stack.is_empty() {
            // The first block, or execution after the traced function
            // returned: a new root frame.
            self.stack.push(Frame { name: r.block.name.clone(), start: self.ts, returns_to: link });
        }
        let (ts, dur) = (self.ts, shape.instructions);
        self.emit(&json!({
            "name": r.block.name, "cat": "block", "ph": "X", "ts": ts, "dur": dur, "pid": 1, "tid": 1,
            "args": {"address": format!("{:#x}", r.address())},
        }))?;
        self.ts += dur;
        self.prev = Some((r.block.clone(), shape));
        Ok(())
    }

    fn close_frame(&mut self) -> io::Result<()> {
        if let Some(f) = self.stack.pop() {
            let (ts, dur) = (f.start, self.ts - f.start);
            self.emit(
                &json!({"name": f.name, "cat": "function", "ph": "X", "ts": ts, "dur": dur, "pid": 1, "tid": 1}),
            )?;
        }
        Ok(())
    }

    fn instant(&mut self, name: &str, args: serde_json::Value) -> io::Result<()> {
        let ts = self.ts;
        self.emit(&json!({"name": name, "ph": "i", "s": "t", "ts": ts, "pid": 1, "tid": 1, "args": args}))
    }

    fn emit(&mut self, v: &serde_json::Value) -> io::Result<()> {
        if !self.first {
            self.out.write_all(b",\n")?;
        }
        self.first = false;
        serde_json::to_writer(&mut self.out, v).map_err(io::Error::other)
    }

    /// Closes the frames still open and the JSON.
    pub fn finish(mut self) -> io::Result<W> {
        while !self.stack.is_empty() {
            self.close_frame()?;
        }
        self.out.write_all(b"\n],\"otherData\":{\"clock\":\"1 us = 1 instruction\"}}\n")?;
        self.out.flush()?;
        Ok(self.out)
    }
}

//! Streaming ITRC writer: messages go out at once, block records are
//! gathered into one chunk buffer of bounded size.

use crate::json::{to_python_json, Hex};
use crate::reader::RegisterSpec;
use crate::{MAGIC, RECORD_CHUNK, RECORD_MESSAGE};
use serde::Serialize;
use std::io::{self, Write};

/// What an `itrace:compile` message says about a block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockSpec {
    /// Address of the block's first instruction.
    pub address: u64,
    /// Size of the block in bytes.
    pub size: u32,
    /// `module!0xoffset`, or the address in hex when no module holds it.
    pub name: String,
    /// `(block_offset, register_index)` per value in the block's records.
    pub writes: Vec<(u32, u32)>,
    /// Where the executed copy of the block lives (Frida: Stalker's
    /// recompiled code). Single-stepped code runs in place, so ours is
    /// `(address, size)`.
    pub compiled: (u64, u32),
    /// `(path, base)` of the module holding the block.
    pub module: Option<(String, u64)>,
}

#[derive(Serialize)]
struct Message<'a, P: Serialize> {
    #[serde(rename = "type")]
    kind: &'a str,
    payload: P,
}

#[derive(Serialize)]
struct TypeOnly<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
}

#[derive(Serialize)]
struct RegisterJson<'a> {
    name: &'a str,
    size: u32,
}

#[derive(Serialize)]
struct CompiledJson {
    address: Hex,
    size: u32,
}

#[derive(Serialize)]
struct ModuleJson<'a> {
    path: &'a str,
    base: Hex,
}

// Field order is Frida's: the backend's JsonBuilder emits writes, address,
// size, compiled, name, module, and both JSON.parse and Python keep it.
#[derive(Serialize)]
struct CompileJson<'a> {
    writes: &'a [(u32, u32)],
    address: Hex,
    size: u32,
    compiled: CompiledJson,
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    module: Option<ModuleJson<'a>>,
}

#[derive(Serialize)]
struct LostJson {
    lost: u64,
}

/// Writes an ITRC file to any [`Write`]. Memory use is bounded by the chunk
/// size: block records are buffered until a chunk is full.
///
/// Messages are written immediately and do not flush the chunk buffer, so
/// an `itrace:compile` lands before the chunk holding its block's first
/// record; [`Writer::end`] and [`Writer::lost`] flush it first, so they
/// follow every record written before them.
pub struct Writer<W: Write> {
    out: W,
    chunk: Vec<u8>,
    chunk_size: usize,
    /// Bytes handed to `out` so far.
    written: u64,
}

impl<W: Write> Writer<W> {
    /// Writes the magic. `chunk_size` (at least 64) bounds the chunk buffer.
    pub fn new(mut out: W, chunk_size: usize) -> io::Result<Self> {
        out.write_all(MAGIC)?;
        let chunk_size = chunk_size.max(64);
        Ok(Writer { out, chunk: Vec::with_capacity(chunk_size.min(1 << 20)), chunk_size, written: 4 })
    }

    /// Bytes the file holds once pending records are flushed.
    pub fn len(&self) -> u64 {
        self.written + if self.chunk.is_empty() { 0 } else { 8 + self.chunk.len() as u64 }
    }

    /// Never empty: the magic is written by [`Writer::new`].
    pub fn is_empty(&self) -> bool {
        false
    }

    /// How many bytes [`Writer::len`] grows by if a record of `n` bytes is
    /// appended now.
    pub fn record_cost(&self, n: usize) -> u64 {
        let n = n as u64;
        let cs = self.chunk_size as u64;
        if !self.chunk.is_empty() && self.chunk.len() as u64 + n <= cs {
            n
        } else {
            n + 8 * n.div_ceil(cs).max(1)
        }
    }

    /// Bytes a MESSAGE record with this JSON and data takes.
    pub fn message_cost(json_len: usize, data_len: usize) -> u64 {
        12 + json_len as u64 + data_len as u64
    }

    /// A MESSAGE record with raw JSON bytes.
    pub fn message(&mut self, json: &[u8], data: &[u8]) -> io::Result<()> {
        let len = u32_len(json.len())?;
        let data_len = u32_len(data.len())?;
        self.out.write_all(&RECORD_MESSAGE.to_be_bytes())?;
        self.out.write_all(&len.to_be_bytes())?;
        self.out.write_all(json)?;
        self.out.write_all(&data_len.to_be_bytes())?;
        self.out.write_all(data)?;
        self.written += Self::message_cost(json.len(), data.len());
        Ok(())
    }

    /// `itrace:start`: the register list and every register's initial value
    /// (`values` holds them in list order, each `size` bytes).
    pub fn start(&mut self, registers: &[RegisterSpec], values: &[u8]) -> io::Result<()> {
        let payload: Vec<RegisterJson> =
            registers.iter().map(|r| RegisterJson { name: &r.name, size: r.size }).collect();
        self.message(&start_json(&payload), values)
    }

    /// `itrace:compile` for one block; `data` is empty in Frida's files (ours
    /// carry the block's code bytes).
    pub fn compile(&mut self, block: &BlockSpec, data: &[u8]) -> io::Result<()> {
        self.message(&compile_json(block), data)
    }

    /// `itrace:lost` with the cumulative number of records dropped. Flushes
    /// the pending chunk first.
    pub fn lost(&mut self, lost: u64) -> io::Result<()> {
        self.flush_chunk()?;
        self.message(&to_python_json(&Message { kind: "itrace:lost", payload: LostJson { lost } }), &[])
    }

    /// `itrace:end`. Flushes the pending chunk first.
    pub fn end(&mut self) -> io::Result<()> {
        self.flush_chunk()?;
        self.message(&to_python_json(&TypeOnly { kind: "itrace:end" }), &[])
    }

    /// Appends one block record (`u64` address + values) to the chunk
    /// stream. A record that does not fit in the pending chunk starts a new
    /// one; only a record larger than a whole chunk is split.
    pub fn record(&mut self, bytes: &[u8]) -> io::Result<()> {
        if self.chunk.len() + bytes.len() > self.chunk_size {
            self.flush_chunk()?;
        }
        for piece in bytes.chunks(self.chunk_size) {
            if self.chunk.len() + piece.len() > self.chunk_size {
                self.flush_chunk()?;
            }
            self.chunk.extend_from_slice(piece);
        }
        Ok(())
    }

    /// [`Writer::record`] of the concatenation of `parts` (no copy made
    /// first).
    pub fn record_parts(&mut self, parts: &[&[u8]]) -> io::Result<()> {
        let n: usize = parts.iter().map(|p| p.len()).sum();
        if self.chunk.len() + n <= self.chunk_size {
            for p in parts {
                self.chunk.extend_from_slice(p);
            }
            return Ok(());
        }
        self.record(&parts.concat())
    }

    /// Writes the pending records as one CHUNK (nothing if there are none).
    pub fn flush_chunk(&mut self) -> io::Result<()> {
        if self.chunk.is_empty() {
            return Ok(());
        }
        let len = u32_len(self.chunk.len())?;
        self.out.write_all(&RECORD_CHUNK.to_be_bytes())?;
        self.out.write_all(&len.to_be_bytes())?;
        self.out.write_all(&self.chunk)?;
        self.written += 8 + self.chunk.len() as u64;
        self.chunk.clear();
        Ok(())
    }

    /// Flushes the chunk buffer and the underlying writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.flush_chunk()?;
        self.out.flush()
    }

    /// Flushes everything and returns the underlying writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.flush()?;
        Ok(self.out)
    }
}

fn u32_len(n: usize) -> io::Result<u32> {
    u32::try_from(n).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "ITRC record longer than 4 GiB"))
}

fn start_json(payload: &[RegisterJson]) -> Vec<u8> {
    to_python_json(&Message { kind: "itrace:start", payload })
}

/// The JSON of an `itrace:compile` message (also used to price it).
pub(crate) fn compile_json(block: &BlockSpec) -> Vec<u8> {
    to_python_json(&Message {
        kind: "itrace:compile",
        payload: CompileJson {
            writes: &block.writes,
            address: Hex(block.address),
            size: block.size,
            compiled: CompiledJson { address: Hex(block.compiled.0), size: block.compiled.1 },
            name: &block.name,
            module: block.module.as_ref().map(|(path, base)| ModuleJson { path, base: Hex(*base) }),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn regs() -> Vec<RegisterSpec> {
        vec![RegisterSpec { name: "pc".into(), size: 8 }, RegisterSpec { name: "v0".into(), size: 16 }]
    }

    #[test]
    fn messages_are_laid_out_as_frida_writes_them() {
        let mut w = Writer::new(Vec::new(), 64).unwrap();
        w.start(&regs(), &[0xaa; 24]).unwrap();
        let block = BlockSpec {
            address: 0x1000,
            size: 8,
            name: "a.out!0x1000".into(),
            writes: vec![(0, 1), (4, 0)],
            compiled: (0x1000, 8),
            module: Some(("/bin/a.out".into(), 0)),
        };
        w.compile(&block, &[]).unwrap();
        w.end().unwrap();
        let out = w.finish().unwrap();

        let mut expect = b"ITRC".to_vec();
        let msg = |expect: &mut Vec<u8>, json: &str, data: &[u8]| {
            expect.extend_from_slice(&1u32.to_be_bytes());
            expect.extend_from_slice(&(json.len() as u32).to_be_bytes());
            expect.extend_from_slice(json.as_bytes());
            expect.extend_from_slice(&(data.len() as u32).to_be_bytes());
            expect.extend_from_slice(data);
        };
        msg(
            &mut expect,
            r#"{"type": "itrace:start", "payload": [{"name": "pc", "size": 8}, {"name": "v0", "size": 16}]}"#,
            &[0xaa; 24],
        );
        msg(
            &mut expect,
            concat!(
                r#"{"type": "itrace:compile", "payload": {"writes": [[0, 1], [4, 0]], "address": "0x1000", "#,
                r#""size": 8, "compiled": {"address": "0x1000", "size": 8}, "name": "a.out!0x1000", "#,
                r#""module": {"path": "/bin/a.out", "base": "0x0"}}}"#
            ),
            &[],
        );
        msg(&mut expect, r#"{"type": "itrace:end"}"#, &[]);
        assert_eq!(out, expect);
    }

    #[test]
    fn chunks_are_bounded_and_cut_at_record_boundaries() {
        let mut w = Writer::new(Vec::new(), 64).unwrap();
        let rec = [7u8; 24];
        let mut expected_len = 4;
        for _ in 0..5 {
            expected_len += w.record_cost(rec.len());
            w.record(&rec).unwrap();
            assert_eq!(w.len(), expected_len);
        }
        // A record larger than a chunk is split across chunks.
        expected_len += w.record_cost(150);
        w.record(&[9u8; 150]).unwrap();
        w.lost(3).unwrap();
        let lost = r#"{"type": "itrace:lost", "payload": {"lost": 3}}"#;
        expected_len += Writer::<Vec<u8>>::message_cost(lost.len(), 0);
        assert_eq!(w.len(), expected_len);
        let out = w.finish().unwrap();
        assert_eq!(out.len() as u64, expected_len);

        // 24+24 | 24+24 | 24 | 64 | 64 | 22, then the lost message.
        let mut at = 4;
        let mut sizes = Vec::new();
        while u32::from_be_bytes(out[at..at + 4].try_into().unwrap()) == 2 {
            let n = u32::from_be_bytes(out[at + 4..at + 8].try_into().unwrap()) as usize;
            sizes.push(n);
            at += 8 + n;
        }
        assert_eq!(sizes, [48, 48, 24, 64, 64, 22]);
        assert_eq!(&out[at + 8..at + 8 + lost.len()], lost.as_bytes());
    }
}

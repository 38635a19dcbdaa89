//! Reads any ITRC file: ours (x86_64) and Frida's (arm64), with whatever
//! register list and register sizes its `itrace:start` declares.

use crate::{MAGIC, RECORD_CHUNK, RECORD_MESSAGE};
use serde_json::Value as Json;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::io::{self, Read};
use std::sync::Arc;

/// One entry of the `itrace:start` register list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegisterSpec {
    pub name: String,
    /// Size in bytes of the register's values in the file.
    pub size: u32,
}

/// Register sizes above this are refused as nonsense (arm64's vector
/// registers, the widest Frida writes, are 16 bytes).
const MAX_REGISTER_SIZE: u32 = 256;

/// The architecture a register list belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// Ours: `rip, r15, …` (see [`crate::x64::REGISTERS`]).
    X86_64,
    /// Frida's: `pc, sp, nzcv, x0 … x28, fp, lr, v0 … v31`.
    Arm64,
    Unknown,
}

impl Arch {
    pub fn of(registers: &[RegisterSpec]) -> Arch {
        match registers.first().map(|r| r.name.as_str()) {
            Some("rip") => Arch::X86_64,
            Some("pc") => Arch::Arm64,
            _ => Arch::Unknown,
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(match self {
            Arch::X86_64 => "x86_64",
            Arch::Arm64 => "arm64",
            Arch::Unknown => "unknown architecture",
        })
    }
}

/// A register value as stored in the file (little-endian, the register's
/// size).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// A register of at most 8 bytes, zero-extended.
    U64(u64),
    /// A wider register (arm64 `v0`…`v31`): its bytes, least significant
    /// first.
    Wide(Box<[u8]>),
}

impl Value {
    fn from_le(bytes: &[u8]) -> Value {
        if bytes.len() <= 8 {
            let mut b = [0u8; 8];
            b[..bytes.len()].copy_from_slice(bytes);
            Value::U64(u64::from_le_bytes(b))
        } else {
            Value::Wide(bytes.into())
        }
    }

    /// The value if it fits in 64 bits.
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Value::U64(v) => Some(*v),
            Value::Wide(b) => b.iter().skip(8).all(|&x| x == 0).then(|| {
                let mut v = [0u8; 8];
                v.copy_from_slice(&b[..8]);
                u64::from_le_bytes(v)
            }),
        }
    }
}

impl fmt::Display for Value {
    /// `0x…` without padding for up to 8 bytes; wide values print every
    /// digit (`0x` + two per byte), most significant first.
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Value::U64(v) => write!(f, "{v:#x}"),
            Value::Wide(b) => {
                f.write_str("0x")?;
                b.iter().rev().try_for_each(|x| write!(f, "{x:02x}"))
            }
        }
    }
}

/// A block declared by `itrace:compile`.
#[derive(Clone, Debug, PartialEq)]
pub struct Block {
    pub address: u64,
    pub size: u32,
    pub name: String,
    /// `(block_offset, register_index)`, one per value in its records.
    pub writes: Vec<(u32, u32)>,
    /// `(path, base)` when the block lies in a module.
    pub module: Option<(String, u64)>,
    /// The block's code bytes when the message carries them (ours do;
    /// Frida's do not).
    pub code: Option<Vec<u8>>,
    /// The message's whole payload, for fields not modelled here.
    pub payload: Json,
}

/// One executed block: its values, one per entry of `block.writes`.
#[derive(Clone, Debug)]
pub struct Record {
    pub block: Arc<Block>,
    pub registers: Arc<[RegisterSpec]>,
    pub values: Vec<Value>,
    /// Offset of the record in the concatenated chunk stream.
    pub stream_offset: u64,
}

/// One value of a record with what it belongs to.
#[derive(Clone, Copy, Debug)]
pub struct WriteValue<'a> {
    /// Offset in the block after which the register holds `value`.
    pub offset: u32,
    /// Index into the register list.
    pub register: u32,
    pub name: &'a str,
    pub value: &'a Value,
}

impl Record {
    pub fn address(&self) -> u64 {
        self.block.address
    }

    /// The values with their block offsets and register names.
    pub fn writes(&self) -> impl Iterator<Item = WriteValue<'_>> {
        self.block.writes.iter().zip(&self.values).map(|(&(offset, register), value)| WriteValue {
            offset,
            register,
            name: &self.registers[register as usize].name,
            value,
        })
    }
}

/// What a file says, in file order.
#[derive(Clone, Debug)]
pub enum Event {
    /// `itrace:start`: the register list and the initial values.
    Start { registers: Arc<[RegisterSpec]>, values: Vec<Value> },
    /// `itrace:compile`.
    Compile(Arc<Block>),
    /// One executed block, decoded from the chunk stream.
    Record(Record),
    /// `itrace:lost`: cumulative number of records dropped so far.
    Lost(u64),
    /// `itrace:end`: the end point was reached.
    End,
    /// Any other message.
    Message { kind: String, json: Json, data: Vec<u8> },
}

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("reading the ITRC file failed at byte {offset}: {source}")]
    Io { offset: u64, source: io::Error },
    #[error("not an ITRC file: it starts with {found}, not \"ITRC\"")]
    BadMagic { found: String },
    #[error("the file is truncated: it ends inside the {what} at byte {offset} ({missing} more bytes expected)")]
    Truncated { what: &'static str, offset: u64, missing: u64 },
    #[error("unknown record type {kind} at byte {offset} (1 is MESSAGE, 2 is CHUNK)")]
    UnknownRecord { kind: u32, offset: u64 },
    #[error("malformed JSON in the message at byte {offset}: {source}")]
    Json { offset: u64, source: serde_json::Error },
    #[error("invalid {kind} message at byte {offset}: {reason}")]
    BadMessage { kind: String, offset: u64, reason: String },
    #[error("the block record at stream offset {offset} is for block {address:#x}, which no itrace:compile declared")]
    UnknownBlock { address: u64, offset: u64 },
    #[error("block {address:#x} writes register index {index}, but itrace:start declares {count} registers")]
    BadRegister { address: u64, index: u32, count: usize },
    #[error("the chunk stream ends inside a block record ({left} bytes left over at stream offset {offset})")]
    TrailingBytes { left: usize, offset: u64 },
    #[error("the file has block records but no itrace:start message (register sizes unknown)")]
    NoStart,
}

/// Reads events from an ITRC file with bounded memory (one record, one
/// chunk and the declared blocks at a time). After an error it yields
/// nothing more.
pub struct Reader<R: Read> {
    input: R,
    /// File offset of the next byte.
    pos: u64,
    registers: Option<Arc<[RegisterSpec]>>,
    blocks: HashMap<u64, Arc<Block>>,
    /// Chunk-stream bytes not decoded yet, and the stream offset of the
    /// first of them.
    stream: Vec<u8>,
    stream_pos: u64,
    queue: VecDeque<Event>,
    done: bool,
}

impl<R: Read> Reader<R> {
    /// Checks the magic.
    pub fn new(mut input: R) -> Result<Self, ReadError> {
        let mut magic = [0u8; 4];
        let n = read_full(&mut input, &mut magic).map_err(|source| ReadError::Io { offset: 0, source })?;
        if n < 4 || &magic != MAGIC {
            let found = if n == 0 { "nothing (empty file)".to_string() } else { format!("{:?}", ByteStr(&magic[..n])) };
            return Err(ReadError::BadMagic { found });
        }
        Ok(Reader {
            input,
            pos: 4,
            registers: None,
            blocks: HashMap::new(),
            stream: Vec::new(),
            stream_pos: 0,
            queue: VecDeque::new(),
            done: false,
        })
    }

    /// The register list, once `itrace:start` has been read.
    pub fn registers(&self) -> Option<&Arc<[RegisterSpec]>> {
        self.registers.as_ref()
    }

    /// The block declared at `address`, if any.
    pub fn block(&self, address: u64) -> Option<&Arc<Block>> {
        self.blocks.get(&address)
    }

    /// The next event, `None` at a clean end of file.
    pub fn next_event(&mut self) -> Result<Option<Event>, ReadError> {
        loop {
            if let Some(e) = self.queue.pop_front() {
                return Ok(Some(e));
            }
            if self.done {
                return Ok(None);
            }
            if let Err(e) = self.read_record() {
                self.done = true;
                self.queue.clear();
                return Err(e);
            }
        }
    }

    /// Reads one record (or notices the end of the file) and queues what it
    /// yields.
    fn read_record(&mut self) -> Result<(), ReadError> {
        let at = self.pos;
        let mut head = [0u8; 4];
        let n = self.read_exact_or_eof(&mut head, "record type")?;
        if n == 0 {
            self.done = true;
            if !self.stream.is_empty() {
                if self.registers.is_none() {
                    return Err(ReadError::NoStart);
                }
                return Err(ReadError::TrailingBytes { left: self.stream.len(), offset: self.stream_pos });
            }
            return Ok(());
        }
        match u32::from_be_bytes(head) {
            RECORD_MESSAGE => {
                let len = self.read_u32("message length")?;
                let json = self.read_bytes(len, "message JSON")?;
                let data_len = self.read_u32("message data length")?;
                let data = self.read_bytes(data_len, "message data")?;
                let json: Json =
                    serde_json::from_slice(&json).map_err(|source| ReadError::Json { offset: at, source })?;
                self.message(at, json, data)
            }
            RECORD_CHUNK => {
                let len = self.read_u32("chunk length")?;
                let bytes = self.read_bytes(len, "chunk")?;
                self.stream.extend_from_slice(&bytes);
                self.decode_stream()
            }
            kind => Err(ReadError::UnknownRecord { kind, offset: at }),
        }
    }

    fn message(&mut self, at: u64, json: Json, data: Vec<u8>) -> Result<(), ReadError> {
        let Some(kind) = json.get("type").and_then(Json::as_str).map(str::to_string) else {
            return Err(ReadError::BadMessage {
                kind: "an untyped".into(),
                offset: at,
                reason: "the JSON is not an object with a string \"type\"".into(),
            });
        };
        let bad = |reason: String| ReadError::BadMessage { kind: kind.clone(), offset: at, reason };
        let payload = json.get("payload").cloned().unwrap_or(Json::Null);
        match kind.as_str() {
            "itrace:start" => {
                let registers: Arc<[RegisterSpec]> = parse_registers(&payload).map_err(bad)?.into();
                let need: usize = registers.iter().map(|r| r.size as usize).sum();
                if data.len() != need {
                    return Err(bad(format!(
                        "its data holds {} bytes of register values, but the {} registers it declares need {need}",
                        data.len(),
                        registers.len()
                    )));
                }
                let mut values = Vec::with_capacity(registers.len());
                let mut p = 0;
                for r in registers.iter() {
                    values.push(Value::from_le(&data[p..p + r.size as usize]));
                    p += r.size as usize;
                }
                self.registers = Some(registers.clone());
                self.queue.push_back(Event::Start { registers, values });
                // Chunks that came before the start can be decoded now.
                self.decode_stream()
            }
            "itrace:compile" => {
                let block = Arc::new(parse_block(payload, data).map_err(bad)?);
                // A later compile of the same address replaces the earlier.
                self.blocks.insert(block.address, block.clone());
                self.queue.push_back(Event::Compile(block));
                Ok(())
            }
            "itrace:lost" => {
                let lost = payload
                    .get("lost")
                    .and_then(Json::as_u64)
                    .ok_or_else(|| bad("its payload has no \"lost\" count (expected {\"lost\": N})".into()))?;
                self.queue.push_back(Event::Lost(lost));
                Ok(())
            }
            "itrace:end" => {
                self.queue.push_back(Event::End);
                Ok(())
            }
            _ => {
                self.queue.push_back(Event::Message { kind, json, data });
                Ok(())
            }
        }
    }

    /// Decodes every complete record in the pending stream bytes.
    fn decode_stream(&mut self) -> Result<(), ReadError> {
        let Some(registers) = self.registers.clone() else { return Ok(()) };
        let mut p = 0;
        while self.stream.len() - p >= 8 {
            let offset = self.stream_pos + p as u64;
            let mut word = [0u8; 8];
            word.copy_from_slice(&self.stream[p..p + 8]);
            let address = u64::from_le_bytes(word);
            let block = self.blocks.get(&address).cloned().ok_or(ReadError::UnknownBlock { address, offset })?;
            let mut len = 8;
            for &(_, index) in &block.writes {
                let r = registers.get(index as usize).ok_or(ReadError::BadRegister {
                    address,
                    index,
                    count: registers.len(),
                })?;
                len += r.size as usize;
            }
            if self.stream.len() - p < len {
                break;
            }
            let mut q = p + 8;
            let mut values = Vec::with_capacity(block.writes.len());
            for &(_, index) in &block.writes {
                let size = registers[index as usize].size as usize;
                values.push(Value::from_le(&self.stream[q..q + size]));
                q += size;
            }
            self.queue.push_back(Event::Record(Record {
                block,
                registers: registers.clone(),
                values,
                stream_offset: offset,
            }));
            p += len;
        }
        self.stream.drain(..p);
        self.stream_pos += p as u64;
        Ok(())
    }

    fn read_exact_or_eof(&mut self, buf: &mut [u8], what: &'static str) -> Result<usize, ReadError> {
        let n = read_full(&mut self.input, buf).map_err(|source| ReadError::Io { offset: self.pos, source })?;
        if n != 0 && n < buf.len() {
            return Err(ReadError::Truncated { what, offset: self.pos, missing: (buf.len() - n) as u64 });
        }
        self.pos += n as u64;
        Ok(n)
    }

    fn read_u32(&mut self, what: &'static str) -> Result<u32, ReadError> {
        let mut b = [0u8; 4];
        if self.read_exact_or_eof(&mut b, what)? == 0 {
            return Err(ReadError::Truncated { what, offset: self.pos, missing: 4 });
        }
        Ok(u32::from_be_bytes(b))
    }

    /// Reads `len` bytes; memory grows only as bytes actually arrive, so a
    /// corrupt length does not allocate gigabytes.
    fn read_bytes(&mut self, len: u32, what: &'static str) -> Result<Vec<u8>, ReadError> {
        let mut v = Vec::new();
        let n = (&mut self.input)
            .take(len as u64)
            .read_to_end(&mut v)
            .map_err(|source| ReadError::Io { offset: self.pos, source })?;
        if n < len as usize {
            return Err(ReadError::Truncated { what, offset: self.pos, missing: (len as usize - n) as u64 });
        }
        self.pos += n as u64;
        Ok(v)
    }
}

impl<R: Read> Iterator for Reader<R> {
    type Item = Result<Event, ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_event().transpose()
    }
}

fn read_full(input: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match input.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

struct ByteStr<'a>(&'a [u8]);

impl fmt::Debug for ByteStr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "\"{}\"", self.0.escape_ascii())
    }
}

fn parse_registers(payload: &Json) -> Result<Vec<RegisterSpec>, String> {
    let list = payload.as_array().ok_or("its payload is not a list of {\"name\", \"size\"} registers")?;
    if list.is_empty() {
        return Err("it declares no registers".into());
    }
    list.iter()
        .enumerate()
        .map(|(i, r)| {
            let name = r.get("name").and_then(Json::as_str).ok_or(format!("register {i} has no \"name\""))?;
            let size = r.get("size").and_then(Json::as_u64).ok_or(format!("register {name} has no \"size\""))?;
            if size == 0 || size > MAX_REGISTER_SIZE as u64 {
                return Err(format!("register {name} has size {size} (expected 1 to {MAX_REGISTER_SIZE})"));
            }
            Ok(RegisterSpec { name: name.to_string(), size: size as u32 })
        })
        .collect()
}

/// An address written as `"0x…"` (Frida) or as a plain number.
fn parse_address(v: Option<&Json>) -> Option<u64> {
    match v? {
        Json::String(s) => u64::from_str_radix(s.strip_prefix("0x").or_else(|| s.strip_prefix("0X"))?, 16).ok(),
        n => n.as_u64(),
    }
}

fn parse_block(payload: Json, data: Vec<u8>) -> Result<Block, String> {
    let address = parse_address(payload.get("address")).ok_or("its payload has no \"address\" (\"0x…\")")?;
    let size = payload.get("size").and_then(Json::as_u64).ok_or("its payload has no \"size\"")?;
    let size = u32::try_from(size).map_err(|_| format!("block size {size} is too large"))?;
    let writes = payload
        .get("writes")
        .and_then(Json::as_array)
        .ok_or("its payload has no \"writes\" list")?
        .iter()
        .map(|w| {
            let pair = w.as_array().filter(|p| p.len() == 2);
            let num = |i: usize| pair.and_then(|p| p[i].as_u64()).and_then(|n| u32::try_from(n).ok());
            match (num(0), num(1)) {
                (Some(off), Some(reg)) => Ok((off, reg)),
                _ => Err(format!("write {w} is not a [block_offset, register_index] pair")),
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    let name = match payload.get("name").and_then(Json::as_str) {
        Some(n) => n.to_string(),
        None => format!("{address:#x}"),
    };
    let module = payload.get("module").and_then(|m| {
        let path = m.get("path").and_then(Json::as_str)?;
        Some((path.to_string(), parse_address(m.get("base")).unwrap_or(0)))
    });
    let code = (!data.is_empty()).then_some(data);
    Ok(Block { address, size, name, writes, module, code, payload })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(out: &mut Vec<u8>, json: &str, data: &[u8]) {
        out.extend_from_slice(&1u32.to_be_bytes());
        out.extend_from_slice(&(json.len() as u32).to_be_bytes());
        out.extend_from_slice(json.as_bytes());
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        out.extend_from_slice(data);
    }

    fn chunk(out: &mut Vec<u8>, bytes: &[u8]) {
        out.extend_from_slice(&2u32.to_be_bytes());
        out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
        out.extend_from_slice(bytes);
    }

    fn read_all(bytes: &[u8]) -> Result<Vec<Event>, ReadError> {
        Reader::new(bytes)?.collect()
    }

    /// A small file: two registers (8 and 16 bytes), compile *before*
    /// start (as Frida's files have it), one record straddling two chunks.
    fn small() -> Vec<u8> {
        let mut f = b"ITRC".to_vec();
        message(
            &mut f,
            r#"{"type": "itrace:compile", "payload": {"writes": [[0, 0], [4, 1]], "address": "0x1000", "size": 8, "name": "x"}}"#,
            &[],
        );
        let mut start = 0x1000u64.to_le_bytes().to_vec();
        start.extend_from_slice(&[0x11; 16]);
        message(
            &mut f,
            r#"{"type": "itrace:start", "payload": [{"name": "pc", "size": 8}, {"name": "v0", "size": 16}]}"#,
            &start,
        );
        let mut rec = 0x1000u64.to_le_bytes().to_vec();
        rec.extend_from_slice(&0x1004u64.to_le_bytes());
        rec.extend_from_slice(&(1u128 << 100).to_le_bytes());
        chunk(&mut f, &rec[..13]);
        chunk(&mut f, &rec[13..]);
        message(&mut f, r#"{"type": "itrace:end"}"#, &[]);
        f
    }

    #[test]
    fn reads_records_that_straddle_chunks() {
        let ev = read_all(&small()).unwrap();
        assert!(matches!(ev[0], Event::Compile(_)));
        let Event::Start { values, .. } = &ev[1] else { panic!("{ev:?}") };
        assert_eq!(values[0], Value::U64(0x1000));
        assert_eq!(values[1].to_string(), format!("0x{}", "11".repeat(16)));
        let Event::Record(r) = &ev[2] else { panic!("{ev:?}") };
        let w: Vec<_> = r.writes().map(|w| format!("+{} {}={}", w.offset, w.name, w.value)).collect();
        assert_eq!(w, ["+0 pc=0x1004".to_string(), format!("+4 v0=0x{:032x}", 1u128 << 100)]);
        assert!(matches!(ev[3], Event::End));
        assert_eq!(ev.len(), 4);
    }

    #[test]
    fn every_truncation_is_an_error_not_a_panic() {
        let f = small();
        for n in 0..f.len() {
            let r = read_all(&f[..n]);
            // Cutting exactly at a record boundary before the last chunk
            // leaves a valid (shorter) file, or trailing stream bytes.
            if let Err(e) = r {
                let s = e.to_string();
                assert!(
                    s.contains("truncated") || s.contains("left over") || s.contains("not an ITRC file"),
                    "{n}: {s}"
                );
            }
        }
        assert!(matches!(read_all(&f[..f.len() - 1]), Err(ReadError::Truncated { .. })));
    }

    #[test]
    fn malformed_inputs() {
        let err = |f: &[u8]| read_all(f).unwrap_err().to_string();
        assert_eq!(err(b""), "not an ITRC file: it starts with nothing (empty file), not \"ITRC\"");
        assert_eq!(err(b"\x7fELF\x02"), "not an ITRC file: it starts with \"\\x7fELF\", not \"ITRC\"");
        let mut f = b"ITRC".to_vec();
        f.extend_from_slice(&3u32.to_be_bytes());
        assert_eq!(err(&f), "unknown record type 3 at byte 4 (1 is MESSAGE, 2 is CHUNK)");
        let mut f = b"ITRC".to_vec();
        message(&mut f, "{\"type\": ", &[]);
        assert!(err(&f).starts_with("malformed JSON in the message at byte 4"), "{}", err(&f));
        let mut f = b"ITRC".to_vec();
        message(&mut f, r#"{"type": "itrace:start", "payload": [{"name": "pc", "size": 8}]}"#, &[0; 7]);
        assert_eq!(
            err(&f),
            "invalid itrace:start message at byte 4: its data holds 7 bytes of register values, \
             but the 1 registers it declares need 8"
        );
        let mut f = b"ITRC".to_vec();
        message(&mut f, r#"{"type": "itrace:start", "payload": [{"name": "pc", "size": 8}]}"#, &[0; 8]);
        chunk(&mut f, &0x2000u64.to_le_bytes());
        assert_eq!(
            err(&f),
            "the block record at stream offset 0 is for block 0x2000, which no itrace:compile declared"
        );
        let mut f = b"ITRC".to_vec();
        message(
            &mut f,
            r#"{"type": "itrace:compile", "payload": {"writes": [[0, 5]], "address": "0x10", "size": 4}}"#,
            &[],
        );
        message(&mut f, r#"{"type": "itrace:start", "payload": [{"name": "pc", "size": 8}]}"#, &[0; 8]);
        chunk(&mut f, &[0x10, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(err(&f), "block 0x10 writes register index 5, but itrace:start declares 1 registers");
        let mut f = b"ITRC".to_vec();
        chunk(&mut f, &[1, 2, 3]);
        assert_eq!(err(&f), "the file has block records but no itrace:start message (register sizes unknown)");
        // A huge declared length on a short file: an error, no huge allocation.
        let mut f = b"ITRC".to_vec();
        f.extend_from_slice(&2u32.to_be_bytes());
        f.extend_from_slice(&u32::MAX.to_be_bytes());
        f.extend_from_slice(&[0; 10]);
        assert_eq!(
            err(&f),
            "the file is truncated: it ends inside the chunk at byte 12 (4294967285 more bytes expected)"
        );
    }
}

//! Where everything lives in the shared region (telco-abi's `region`
//! module defines the types; this decides the offsets for one program).
//!
//! Order: header, event ring, the per-thread counter shards and the rows'
//! owners, the `thread_indent` table, the probe table, the `.itrace`
//! request slots and the `--chrome` span stages (when used), the globals,
//! the per-thread statistic copies (`Layout::shard_stats`), then the
//! constants (string literals, formats, statistic descriptors, the symbol
//! table), which grow while pass 3 runs, and last (with a symbol table) the
//! late-symbols area the tracer fills for libraries loaded later. Thread slots and shadow stacks are
//! not in the region: the runtime maps them privately in each target.
//!
//! [`Layout::storage`] is the one answer to "where does this global live"
//! (a plain or sharded counter, a string, a plain or sharded statistic, a
//! table), used by every load, store and update and by the display table.
//! Arrays have a fixed capacity and `2 × capacity` slots (rounded up to a
//! power of two).

use crate::program::{linear_buckets, GlobalKind, Point, Program, Ty};
use std::collections::HashMap;
use telco_abi::artifact::Limits;
use telco_abi::region::*;

/// One histogram a statistic collects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HistKey {
    Log,
    Linear {
        lo: i64,
        hi: i64,
        step: i64,
    },
    /// Not a histogram: the script reads `@variance` of the statistic,
    /// with this bit shift (always after the histograms in a list).
    Variance(u8),
}

#[derive(Clone, Debug)]
pub enum Slot {
    Long { off: u64 },
    Str { off: u64 },
    Stat { off: u64, desc: u64, hists: Vec<HistKey> },
    Table(Table),
}

#[derive(Clone, Debug)]
pub struct Table {
    pub off: u64,
    pub keys: Vec<Ty>,
    pub value: Ty,
    pub key_off: Vec<u32>,
    pub value_off: u32,
    pub capacity: u32,
    /// `name%`: full, an insertion drops the oldest element.
    pub wrap: bool,
    pub desc: u64,
    pub hists: Vec<HistKey>,
}

/// Where a global lives, as every load, store and update of it must treat
/// it: the one answer (`Layout::storage`) pass 3 and the display table use.
#[derive(Clone, Debug)]
pub enum Storage {
    /// A long at `off`, updated atomically.
    Long {
        off: u64,
    },
    /// A counter sharded per thread: column `col` of the shard rows at
    /// `shards_off` (`row_bytes` a row), plus the tracer's share at `off`.
    ShardedLong {
        off: u64,
        col: u32,
        shards_off: u64,
        row_bytes: u32,
    },
    Str {
        off: u64,
    },
    /// A statistic at `off`; its descriptor (histograms) at `desc`.
    Stat {
        off: u64,
        desc: u64,
        hists: Vec<HistKey>,
    },
    /// A statistic with per-thread copies at `copies` in each row of
    /// `row` bytes (the tracer's share at `off`).
    ShardedStat {
        off: u64,
        desc: u64,
        hists: Vec<HistKey>,
        copies: u64,
        row: u32,
    },
    Table(Table),
}

impl Storage {
    /// A statistic's or statistics array's descriptor and histograms.
    pub fn stat_desc(&self) -> Option<(u64, &[HistKey])> {
        match self {
            Storage::Stat { desc, hists, .. } | Storage::ShardedStat { desc, hists, .. } => Some((*desc, hists)),
            Storage::Table(t) => Some((t.desc, &t.hists)),
            _ => None,
        }
    }
}

pub struct Layout {
    pub limits: Limits,
    pub ring_off: u64,
    /// `.itrace` request slots.
    pub itrace_off: u64,
    pub itrace_slots: u32,
    /// `--chrome` span stages (`Header::spans_off`).
    pub spans_off: u64,
    pub span_batch: u32,
    pub span_stride: u32,
    /// `--flight-recorder`'s history (`Header::flight_off`): chunks of a
    /// stage's size, none without it.
    pub flight_off: u64,
    pub flight_chunks: u32,
    pub flight_stride: u32,
    /// The symbol table (`telco_abi::region::SymTable`, a constant placed on
    /// first use by `usymname()`/`print_ubacktrace()`; 0: none) and its
    /// modules.
    pub symtab_off: u64,
    pub symtab_modules: Vec<telco_abi::artifact::SymModule>,
    /// Bytes reserved after the constants for the symbols of libraries
    /// loaded later (`Artifact::symtab_late`; 0 without a symbol table).
    pub late_syms_size: u64,
    pub ring_size: u64,
    /// Thread slots and shadow stacks are mapped privately in the target
    /// (`Header::threads_at`), not laid out here.
    pub nthreads: u32,
    pub frame_size: u32,
    pub shadow_depth: u32,
    pub shards_off: u64,
    /// Sharded counters: global id → column.
    pub shards: HashMap<u32, u32>,
    /// Sharded statistics: global id → offset in a thread's row; the rows
    /// (one per thread slot, `stat_row` bytes each) start at `stat_shards_off`.
    pub stat_shards: HashMap<u32, u32>,
    pub stat_shards_off: u64,
    pub stat_row: u32,
    pub indent_off: u64,
    /// `Header::row_owners_off`: a u32 per row.
    pub row_owners_off: u64,
    pub probes_off: u64,
    pub nprobes: u64,
    pub globals: Vec<Slot>,
    pub consts_off: u64,
    pub consts: Vec<u8>,
    const_map: HashMap<Vec<u8>, u64>,
    /// A zeroed block: the value of an absent array element.
    pub zero_off: u64,
    pub init: Vec<(u64, Vec<u8>)>,
}

/// A power of two: the runtime library masks with it.
pub const THREAD_SLOTS: u32 = 256;
const _: () = assert!(THREAD_SLOTS.is_power_of_two());
// The trampolines' slot hash takes log2(THREAD_SLOTS) bits of a 32-bit
// product, times the 64-byte slot (runtime/src/arch/x86_64/trampoline.rs find_slot).
const _: () = assert!(THREAD_SLOTS <= 1 << 26);
/// Threads that may wait at once to be instruction-traced (`.itrace`).
pub const ITRACE_SLOTS: u32 = 16;
/// `--chrome` calls a thread stages before it moves them into the ring.
pub const SPAN_BATCH: u32 = 64;

impl Layout {
    /// Where global `g` lives.
    pub fn storage(&self, g: u32) -> Storage {
        match &self.globals[g as usize] {
            Slot::Long { off } => match self.shards.get(&g) {
                Some(&col) => Storage::ShardedLong {
                    off: *off,
                    col,
                    shards_off: self.shards_off,
                    row_bytes: 8 * self.shards.len() as u32,
                },
                None => Storage::Long { off: *off },
            },
            Slot::Str { off } => Storage::Str { off: *off },
            Slot::Stat { off, desc, hists } => match self.stat_shards.get(&g) {
                Some(&col) => Storage::ShardedStat {
                    off: *off,
                    desc: *desc,
                    hists: hists.clone(),
                    copies: self.stat_shards_off + u64::from(col),
                    row: self.stat_row,
                },
                None => Storage::Stat { off: *off, desc: *desc, hists: hists.clone() },
            },
            Slot::Table(t) => Storage::Table(t.clone()),
        }
    }

    /// Lay out the fixed parts and the globals. `hists[g]` lists the
    /// histograms statistic global `g` must collect.
    /// `entry_save` is the largest `@entry` save area of any return probe;
    /// `returns` says whether there are return probes at all.
    pub fn new(
        program: &Program,
        limits: Limits,
        hists: &HashMap<u32, Vec<HistKey>>,
        nprobes: u64,
        returns: bool,
        entry_save: u32,
        sharded: &[u32],
    ) -> Layout {
        let cap = u64::from(limits.maxstringlen);
        let mut off = align_up(HEADER_SIZE as u64, PART_ALIGN);
        let ring_off = off;
        off = align_up(ring_off + core::mem::size_of::<RingHeader>() as u64, PART_ALIGN);
        let ring_data = off;
        off += limits.ring_size;
        let frame_size = align_up(SHADOW_FRAME_HEADER as u64 + u64::from(entry_save), 16) as u32;
        // Return-probe frames per thread (`Limits::maxreturndepth`,
        // 100,000 by default: any real recursion), in a private mapping
        // reserved without commitment and touched only as deep as used.
        let shadow_depth = if returns { limits.maxreturndepth } else { 0 };
        let shards_off = align_up(off, PART_ALIGN);
        off = shards_off + u64::from(THREAD_SLOTS) * 8 * sharded.len() as u64;
        let row_owners_off = align_up(off, PART_ALIGN);
        off = row_owners_off + 4 * u64::from(THREAD_SLOTS);
        let indent_off = align_up(off, PART_ALIGN);
        off = indent_off + (INDENT_SLOTS * core::mem::size_of::<IndentSlot>()) as u64;
        let probes_off = align_up(off, PART_ALIGN);
        off = probes_off + telco_abi::region::PROBE_ROW_SIZE as u64 * nprobes;
        let itrace =
            program.probes.iter().any(|p| p.points.iter().any(|pt| matches!(pt, Point::Function(f) if f.itrace)));
        let itrace_slots = if itrace { ITRACE_SLOTS } else { 0 };
        let itrace_off = align_up(off, PART_ALIGN);
        off = itrace_off + u64::from(itrace_slots) * core::mem::size_of::<telco_abi::region::ItraceSlot>() as u64;
        // A stage per thread slot, each on its own cache lines (as the
        // flight recorder's chunks: a header, then a stage's calls).
        let span_batch = if program.has_chrome_spans() { SPAN_BATCH } else { 0 };
        let calls_after = |header: usize| {
            align_up((header + telco_abi::region::SPAN_ENTRY_SIZE * span_batch as usize) as u64, 64) as u32
        };
        let span_stride = if span_batch == 0 { 0 } else { calls_after(telco_abi::region::SPAN_STAGE_HEADER) };
        let spans_off = align_up(off, PART_ALIGN);
        off = spans_off + u64::from(THREAD_SLOTS) * u64::from(span_stride);
        // The flight recorder's chunks, each a full stage's calls, on
        // their own cache lines: as many as `--flight-size` holds (at
        // least two per thread slot, so a thread writing one never finds
        // the whole history taken by the others).
        let flight_stride = if span_batch == 0 || program.flight_size == 0 {
            0
        } else {
            calls_after(telco_abi::region::FLIGHT_CHUNK_HEADER)
        };
        let flight_chunks = if flight_stride == 0 {
            0
        } else {
            (program.flight_size / u64::from(flight_stride))
                .clamp(2 * u64::from(THREAD_SLOTS), u64::from(u32::MAX >> 1)) as u32
        };
        let flight_off = align_up(off, 4096);
        off = flight_off + u64::from(flight_chunks) * u64::from(flight_stride);
        let mut l = Layout {
            limits,
            ring_off,
            ring_size: limits.ring_size,
            nthreads: THREAD_SLOTS,
            frame_size,
            shadow_depth,
            shards_off,
            shards: sharded.iter().enumerate().map(|(k, &g)| (g, k as u32)).collect(),
            stat_shards: HashMap::new(),
            stat_shards_off: 0,
            stat_row: 0,
            indent_off,
            row_owners_off,
            probes_off,
            nprobes,
            itrace_off,
            itrace_slots,
            spans_off,
            span_batch,
            span_stride,
            flight_off,
            flight_chunks,
            flight_stride,
            symtab_off: 0,
            symtab_modules: Vec::new(),
            late_syms_size: 0,
            globals: Vec::new(),
            consts_off: 0,
            consts: Vec::new(),
            const_map: HashMap::new(),
            zero_off: 0,
            init: Vec::new(),
        };
        let mut ring = Vec::new();
        push_u64s(&mut ring, &[0; 16]);
        push_u64s(&mut ring, &[limits.ring_size, ring_data]);
        l.init.push((ring_off + 128, ring[128..].to_vec()));

        off = align_up(off, PART_ALIGN);
        let mut descs = Vec::new();
        for (gi, g) in program.globals.iter().enumerate() {
            let hs = hists.get(&(gi as u32)).cloned().unwrap_or_default();
            let slot = match &g.kind {
                GlobalKind::Scalar(Ty::String) => {
                    let o = off;
                    off += align_up(LOCKED_STR_HEADER as u64 + cap, 8);
                    if let Some(crate::program::Const::String(s)) = &g.init {
                        let mut b = s.clone();
                        b.truncate(cap as usize - 1);
                        l.init.push((o + LOCKED_STR_HEADER as u64, b));
                    }
                    Slot::Str { off: o }
                }
                GlobalKind::Scalar(Ty::Stat) => {
                    let desc = stat_desc(&hs);
                    let o = off;
                    off += u64::from(desc.size);
                    descs.push((gi, desc));
                    Slot::Stat { off: o, desc: 0, hists: hs }
                }
                GlobalKind::Scalar(_) => {
                    let o = off;
                    off += 8;
                    if let Some(crate::program::Const::Long(v)) = &g.init {
                        l.init.push((o, v.to_le_bytes().to_vec()));
                    }
                    Slot::Long { off: o }
                }
                GlobalKind::Array { keys, value, capacity, wrap } => {
                    let capacity = capacity.map_or(limits.maxmapentries, |c| c.min(u64::from(u32::MAX / 4)) as u32);
                    let capacity = capacity.max(1);
                    let mut so = SLOT_HEADER_SIZE as u32;
                    let mut key_off = Vec::new();
                    for k in keys {
                        key_off.push(so);
                        so += if *k == Ty::String { align_up(cap, 8) as u32 } else { 8 };
                    }
                    let value_off = so;
                    let desc = stat_desc(&hs);
                    so += match value {
                        Ty::String => align_up(LOCKED_STR_HEADER as u64 + cap, 8) as u32,
                        Ty::Stat => desc.size,
                        _ => 8,
                    };
                    let slot_size = align_up(u64::from(so), 8) as u32;
                    let nslots = (u64::from(capacity) * 2).next_power_of_two().max(4);
                    let o = align_up(off, 8);
                    off = o + TABLE_HEADER_SIZE as u64 + nslots * u64::from(slot_size);
                    if *value == Ty::Stat {
                        descs.push((gi, desc));
                    }
                    Slot::Table(Table {
                        off: o,
                        keys: keys.clone(),
                        value: *value,
                        key_off,
                        value_off,
                        capacity,
                        wrap: *wrap,
                        desc: 0,
                        hists: hs,
                    })
                }
            };
            l.globals.push(slot);
        }
        l.consts_off = align_up(off, PART_ALIGN);
        // The zero block first: large enough for any value read through it.
        let zero_len = align_up(LOCKED_STR_HEADER as u64 + cap + 64, 8) as usize;
        l.zero_off = l.constant(&vec![0u8; zero_len]);
        for (gi, desc) in descs {
            let bytes = desc_bytes(&desc);
            let d = l.constant_aligned(&bytes);
            match &mut l.globals[gi] {
                Slot::Stat { desc, .. } => *desc = d,
                Slot::Table(t) => t.desc = d,
                _ => {}
            }
        }
        // Table headers.
        for g in &l.globals {
            if let Slot::Table(t) = g {
                let nslots = (u64::from(t.capacity) * 2).next_power_of_two().max(4);
                let mut h = Vec::with_capacity(TABLE_HEADER_SIZE);
                h.extend_from_slice(&0u32.to_le_bytes());
                h.extend_from_slice(&(t.keys.len() as u32).to_le_bytes());
                let mut kinds = [0u8; 12];
                for (i, k) in t.keys.iter().enumerate() {
                    kinds[i] = kind_of(*k);
                }
                h.extend_from_slice(&kinds);
                h.push(kind_of(t.value));
                h.push(u8::from(t.wrap));
                h.extend_from_slice(&[0; 2]);
                let slot_size = table_slot_size(t, cap);
                for v in [t.capacity, nslots as u32, slot_size, t.value_off] {
                    h.extend_from_slice(&v.to_le_bytes());
                }
                let mut ko = [0u32; 10];
                ko[..t.key_off.len()].copy_from_slice(&t.key_off);
                for v in ko {
                    h.extend_from_slice(&v.to_le_bytes());
                }
                h.extend_from_slice(&[0; 8]); // count, pad
                h.extend_from_slice(&0u64.to_le_bytes()); // order
                h.extend_from_slice(&t.desc.to_le_bytes());
                h.extend_from_slice(&(cap as u32).to_le_bytes());
                h.extend_from_slice(&[0; 4]);
                debug_assert_eq!(h.len(), TABLE_HEADER_SIZE);
                l.init.push((t.off, h));
            }
        }
        l
    }

    /// Give these statistic globals per-thread copies, in a new part of the
    /// region after the constants laid out so far (the constants keep
    /// growing after it).
    pub fn shard_stats(&mut self, stats: &[u32]) {
        let mut row = 0u32;
        for &g in stats {
            if let Slot::Stat { hists, .. } = &self.globals[g as usize] {
                self.stat_shards.insert(g, row);
                row += stat_desc(hists).size;
            }
        }
        if row == 0 {
            return;
        }
        self.stat_row = align_up(u64::from(row), 8) as u32;
        // The rows go where the constants were to start; the constants move
        // after them (none has been placed but the zero block and the
        // statistic descriptors, which are re-placed).
        let consts = std::mem::take(&mut self.consts);
        let old = self.consts_off;
        self.stat_shards_off = old;
        self.consts_off = align_up(old + u64::from(THREAD_SLOTS) * u64::from(self.stat_row), PART_ALIGN);
        let delta = self.consts_off - old;
        self.consts = consts;
        for v in self.const_map.values_mut() {
            *v += delta;
        }
        self.zero_off += delta;
        for g in &mut self.globals {
            match g {
                Slot::Stat { desc, .. } => *desc += delta,
                Slot::Table(t) if t.desc != 0 => t.desc += delta,
                _ => {}
            }
        }
        // Table headers written with the old descriptor offsets.
        let tables: Vec<(u64, u64)> = self
            .globals
            .iter()
            .filter_map(|g| if let Slot::Table(t) = g { Some((t.off, t.desc)) } else { None })
            .collect();
        for (off, desc) in tables {
            if let Some((_, h)) = self.init.iter_mut().find(|(o, _)| *o == off) {
                let at = core::mem::offset_of!(TableHeader, stat_desc);
                h[at..at + 8].copy_from_slice(&desc.to_le_bytes());
            }
        }
    }

    /// The region offset of a constant (deduplicated).
    pub fn constant(&mut self, bytes: &[u8]) -> u64 {
        if let Some(&o) = self.const_map.get(bytes) {
            return o;
        }
        let o = self.consts_off + self.consts.len() as u64;
        self.consts.extend_from_slice(bytes);
        self.const_map.insert(bytes.to_vec(), o);
        o
    }

    pub fn constant_aligned(&mut self, bytes: &[u8]) -> u64 {
        while self.consts.len() % 8 != 0 {
            self.consts.push(0);
        }
        self.constant(bytes)
    }

    /// A NUL-terminated string constant, cut to MAXSTRINGLEN - 1 bytes as
    /// every string value is.
    pub fn string(&mut self, s: &[u8]) -> u64 {
        let n = s.iter().position(|&b| b == 0).unwrap_or(s.len()).min(self.limits.maxstringlen as usize - 1);
        let mut b = s[..n].to_vec();
        b.push(0);
        self.constant(&b)
    }

    /// Where the late-symbols area starts: the page after the constants
    /// (untouched pages of the region cost no memory).
    pub fn late_syms_off(&self) -> u64 {
        align_up(self.consts_off + self.consts.len() as u64, 4096)
    }

    pub fn region_size(&self) -> u64 {
        self.late_syms_off() + align_up(self.late_syms_size, 4096)
    }
}

fn kind_of(t: Ty) -> u8 {
    match t {
        Ty::String => KIND_STRING,
        Ty::Stat => KIND_STAT,
        _ => KIND_LONG,
    }
}

fn table_slot_size(t: &Table, cap: u64) -> u32 {
    let v = match t.value {
        Ty::String => align_up(LOCKED_STR_HEADER as u64 + cap, 8) as u32,
        Ty::Stat => stat_desc(&t.hists).size,
        _ => 8,
    };
    align_up(u64::from(t.value_off + v), 8) as u32
}

pub fn stat_desc(hists: &[HistKey]) -> StatDesc {
    let mut d = StatDesc::default();
    let mut off = STAT_HEADER as u32;
    let real: Vec<&HistKey> = hists.iter().filter(|h| !matches!(h, HistKey::Variance(_))).collect();
    for (i, h) in real.iter().take(MAX_HISTS).enumerate() {
        let (kind, nb, lo, hi, step) = match **h {
            HistKey::Log => (HIST_LOG, HIST_LOG_BUCKETS, 0, 0, 0),
            HistKey::Linear { lo, hi, step } => (HIST_LINEAR, linear_buckets(lo, hi, step), lo, hi, step),
            HistKey::Variance(_) => continue,
        };
        d.hists[i] = HistSpec { kind, nbuckets: nb, lo, hi, step, offset: off, _pad: 0 };
        off += 8 * nb;
    }
    d.nhists = real.len().min(MAX_HISTS) as u32;
    if let Some(HistKey::Variance(shift)) = hists.iter().find(|h| matches!(h, HistKey::Variance(_))) {
        d.variance = 1;
        d.shift = u32::from(*shift);
    }
    d.size = off;
    d
}

fn desc_bytes(d: &StatDesc) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&d.nhists.to_le_bytes());
    b.extend_from_slice(&d.size.to_le_bytes());
    for h in &d.hists {
        b.extend_from_slice(&h.kind.to_le_bytes());
        b.extend_from_slice(&h.nbuckets.to_le_bytes());
        b.extend_from_slice(&h.lo.to_le_bytes());
        b.extend_from_slice(&h.hi.to_le_bytes());
        b.extend_from_slice(&h.step.to_le_bytes());
        b.extend_from_slice(&h.offset.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
    }
    b.extend_from_slice(&d.variance.to_le_bytes());
    b.extend_from_slice(&d.shift.to_le_bytes());
    debug_assert_eq!(b.len(), core::mem::size_of::<StatDesc>());
    b
}

fn push_u64s(v: &mut Vec<u8>, xs: &[u64]) {
    for x in xs {
        v.extend_from_slice(&x.to_le_bytes());
    }
}

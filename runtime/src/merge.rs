//! Folding a trust domain's region into the session's.
//!
//! Processes of other credentials than the session's first process (the
//! workers a root master forks after dropping to `www-data`, a `-p`
//! process of another user) never share its region (invariant 6): each
//! such domain gets a region of its own, at the same address in its
//! processes, run by the same compiled code (`session/domains.rs`). When
//! the session ends, before the end probes run, what they wrote there is
//! folded into the session's region by each global's [`Merge`] (decided by
//! pass 3 from the code that runs in targets):
//!
//! * `Add` (counters, statistics, and arrays of them only added to): the
//!   domain starts empty; its sums are added, its statistics combined (as
//!   `rt_stat_merge` combines per-thread copies), its elements inserted
//!   where the session's array lacks them (`hash_keys` ported from
//!   compiler/rt/rt.c).
//! * `Untouched`: the domain starts with the session's value; nothing
//!   comes back.
//! * `Assign`: the domain starts with the session's value; what it changed
//!   replaces the session's (a long or string assigned, an element set or
//!   deleted); when both changed a scalar, the domain's is kept and a
//!   warning says so.
//!
//! The domain's region is input from processes of another user: every
//! geometry (sizes, slots, keys) comes from the artifact, every access is
//! bounded by the region's size, a statistic that cannot hold is refused.

use std::collections::HashMap;
use telco_abi::artifact::{Artifact, DisplayKind, Global, Merge};
use telco_abi::region::{
    self as abi, StatDesc, TableHeader, KIND_STAT, KIND_STRING, LOCKED_STR_HEADER, SLOT_DEAD, SLOT_EMPTY, SLOT_LIVE,
    STAT_HEADER, TABLE_HEADER_SIZE,
};

/// A region's bytes, read and written through bounds-checked unaligned
/// accesses (other processes may write it meanwhile: no references).
#[derive(Clone, Copy)]
pub struct Mem {
    base: *mut u8,
    len: usize,
}

impl Mem {
    /// # Safety
    /// `base` points to `len` bytes mapped for the life of the `Mem`.
    pub unsafe fn new(base: *mut u8, len: usize) -> Mem {
        Mem { base, len }
    }

    fn ok(&self, at: usize, n: usize) -> bool {
        at.checked_add(n).is_some_and(|e| e <= self.len)
    }

    pub fn i64(&self, at: usize) -> i64 {
        if !self.ok(at, 8) {
            return 0;
        }
        // SAFETY: in bounds (checked).
        i64::from_le_bytes(unsafe { std::ptr::read_volatile(self.base.add(at).cast::<[u8; 8]>()) })
    }

    pub fn u32(&self, at: usize) -> u32 {
        if !self.ok(at, 4) {
            return 0;
        }
        // SAFETY: in bounds (checked).
        u32::from_le_bytes(unsafe { std::ptr::read_volatile(self.base.add(at).cast::<[u8; 4]>()) })
    }

    pub fn set_i64(&self, at: usize, v: i64) {
        if self.ok(at, 8) {
            // SAFETY: in bounds (checked).
            unsafe { std::ptr::write_volatile(self.base.add(at).cast::<[u8; 8]>(), v.to_le_bytes()) }
        }
    }

    pub fn set_u32(&self, at: usize, v: u32) {
        if self.ok(at, 4) {
            // SAFETY: in bounds (checked).
            unsafe { std::ptr::write_volatile(self.base.add(at).cast::<[u8; 4]>(), v.to_le_bytes()) }
        }
    }

    pub fn bytes(&self, at: usize, n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        if self.ok(at, n) {
            // SAFETY: in bounds (checked); a byte copy.
            unsafe { std::ptr::copy_nonoverlapping(self.base.add(at), v.as_mut_ptr(), n) };
        }
        v
    }

    pub fn put(&self, at: usize, b: &[u8]) {
        if self.ok(at, b.len()) {
            // SAFETY: in bounds (checked); a byte copy.
            unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), self.base.add(at), b.len()) };
        }
    }
}

/// What a domain's globals held when it started (the `Assign` ones: the
/// session's values then), by global index.
#[derive(Default)]
pub struct Snapshot {
    bytes: HashMap<usize, Vec<u8>>,
}

fn u32_of(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4).map_or(0, |w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
}

fn i64_of(b: &[u8], at: usize) -> i64 {
    b.get(at..at + 8).map_or(0, |w| i64::from_le_bytes(w.try_into().unwrap_or([0; 8])))
}

/// An array's geometry, as pass 3 wrote it (never the region's copy).
struct Geometry {
    nkeys: usize,
    kinds: Vec<u8>,
    key_off: Vec<usize>,
    value_kind: u8,
    wrap: bool,
    capacity: u32,
    nslots: usize,
    slot_size: usize,
    value_off: usize,
    cap: usize,
}

impl Geometry {
    fn of(a: &Artifact, off: u64) -> Option<Geometry> {
        let h = a.init_at(off)?;
        let f = |o: usize| u32_of(h, o) as usize;
        let nkeys = f(core::mem::offset_of!(TableHeader, nkeys)).min(abi::MAX_KEYS);
        let kinds_at = core::mem::offset_of!(TableHeader, key_kinds);
        let key_off_at = core::mem::offset_of!(TableHeader, key_off);
        let g = Geometry {
            nkeys,
            kinds: (0..nkeys).map(|k| h.get(kinds_at + k).copied().unwrap_or(0)).collect(),
            key_off: (0..nkeys).map(|k| f(key_off_at + 4 * k)).collect(),
            value_kind: h.get(core::mem::offset_of!(TableHeader, value_kind)).copied().unwrap_or(0),
            wrap: h.get(core::mem::offset_of!(TableHeader, wrap)).copied().unwrap_or(0) != 0,
            capacity: u32_of(h, core::mem::offset_of!(TableHeader, capacity)),
            nslots: f(core::mem::offset_of!(TableHeader, nslots)),
            slot_size: f(core::mem::offset_of!(TableHeader, slot_size)),
            value_off: f(core::mem::offset_of!(TableHeader, value_off)),
            cap: f(core::mem::offset_of!(TableHeader, maxstringlen)).max(1),
        };
        (g.slot_size > 0 && g.nslots.is_power_of_two()).then_some(g)
    }

    fn size(&self) -> usize {
        TABLE_HEADER_SIZE + self.nslots * self.slot_size
    }

    fn slot(&self, tab: usize, i: usize) -> usize {
        tab + TABLE_HEADER_SIZE + i * self.slot_size
    }

    fn value_size(&self) -> usize {
        self.slot_size - self.value_off
    }
}

/// One element's keys: longs, or a string's bytes (to its NUL, at most
/// `cap - 1`).
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
enum Key {
    Long(i64),
    Str(Vec<u8>),
}

fn keys_at(m: &Mem, g: &Geometry, slot: usize) -> Vec<Key> {
    (0..g.nkeys)
        .map(|k| {
            let at = slot + g.key_off[k];
            if g.kinds[k] == KIND_STRING {
                let mut s = m.bytes(at, g.cap.saturating_sub(1));
                if let Some(n) = s.iter().position(|&b| b == 0) {
                    s.truncate(n);
                }
                Key::Str(s)
            } else {
                Key::Long(m.i64(at))
            }
        })
        .collect()
}

/// compiler/rt/rt.c's `mix`.
fn mix(mut h: u64, x: u64) -> u64 {
    h ^= x.wrapping_add(0x9e37_79b9_7f4a_7c15).wrapping_add(h << 6).wrapping_add(h >> 2);
    h ^= h >> 31;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^ (h >> 29)
}

/// compiler/rt/rt.c's `hash_keys`: where an element's probe sequence starts.
fn hash_keys(keys: &[Key]) -> u64 {
    let mut h = 0x243f_6a88_85a3_08d3u64;
    for k in keys {
        h = match k {
            Key::Str(s) => mix(
                h,
                s.iter().fold(0xcbf2_9ce4_8422_2325u64, |f, &b| (f ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)),
            ),
            Key::Long(v) => mix(h, *v as u64),
        };
    }
    h
}

/// The slot of the element with `keys` in the array at `tab`, inserted
/// (zeroed) if absent as `rt_map_find(.., create)` does; None when full.
fn find_or_insert(m: &Mem, g: &Geometry, tab: usize, keys: &[Key]) -> Option<usize> {
    let mask = g.nslots - 1;
    let h = hash_keys(keys) as usize;
    let state = |slot: usize| m.u32(slot + 4);
    let mut free = None;
    for i in 0..g.nslots {
        let slot = g.slot(tab, (h.wrapping_add(i)) & mask);
        match state(slot) {
            SLOT_LIVE if keys_at(m, g, slot) == keys => return Some(slot),
            SLOT_LIVE => continue,
            st => {
                free = free.or(Some(slot));
                if st == SLOT_EMPTY {
                    break;
                }
            }
        }
    }
    let count_at = tab + core::mem::offset_of!(TableHeader, count);
    let order_at = tab + core::mem::offset_of!(TableHeader, order);
    if free.is_some() && m.u32(count_at) >= g.capacity && g.wrap {
        // `global a%`: the oldest element makes room.
        let oldest = (0..g.nslots)
            .map(|i| g.slot(tab, i))
            .filter(|&s| state(s) == SLOT_LIVE)
            .min_by_key(|&s| m.i64(s + 8) as u64);
        if let Some(o) = oldest {
            m.set_u32(o + 4, SLOT_DEAD);
            m.set_u32(count_at, m.u32(count_at).saturating_sub(1));
        }
    }
    let free = free.filter(|_| m.u32(count_at) < g.capacity)?;
    for (k, key) in keys.iter().enumerate() {
        let at = free + g.key_off[k];
        match key {
            Key::Long(v) => m.set_i64(at, *v),
            Key::Str(s) => {
                let n = s.len().min(g.cap.saturating_sub(1));
                m.put(at, &s[..n]);
                m.put(at + n, &[0]);
            }
        }
    }
    m.put(free + g.value_off, &vec![0u8; g.value_size()]);
    let order = m.i64(order_at);
    m.set_i64(free + 8, order);
    m.set_i64(order_at, order.wrapping_add(1));
    m.set_u32(free + 4, SLOT_LIVE);
    m.set_u32(count_at, m.u32(count_at) + 1);
    Some(free)
}

/// Delete the element with `keys` from the array at `tab`, if there.
fn delete(m: &Mem, g: &Geometry, tab: usize, keys: &[Key]) {
    let mask = g.nslots - 1;
    let h = hash_keys(keys) as usize;
    for i in 0..g.nslots {
        let slot = g.slot(tab, (h.wrapping_add(i)) & mask);
        match m.u32(slot + 4) {
            SLOT_EMPTY => return,
            SLOT_LIVE if keys_at(m, g, slot) == keys => {
                m.set_u32(slot + 4, SLOT_DEAD);
                let count_at = tab + core::mem::offset_of!(TableHeader, count);
                m.set_u32(count_at, m.u32(count_at).saturating_sub(1));
                return;
            }
            _ => {}
        }
    }
}

/// A statistic's descriptor, from the artifact.
fn stat_desc(a: &Artifact, desc: u64) -> Option<StatDesc> {
    let b = a.init_at(desc)?;
    if b.len() < core::mem::size_of::<StatDesc>() {
        return None;
    }
    // SAFETY: StatDesc is plain old data, and `b` holds one.
    let d: StatDesc = unsafe { std::ptr::read_unaligned(b.as_ptr().cast()) };
    (d.size as usize >= STAT_HEADER && d.size.is_multiple_of(8)).then_some(d)
}

const S_COUNT: usize = 0;
const S_SUM: usize = 8;
const S_MIN: usize = 16;
const S_MAX: usize = 24;
const S_AVG: usize = 32;
const S_M2: usize = 40;
const S_LOCK: usize = 48;

/// Add statistic `src` (in `sm` at `s`) into `dst` (in `dm` at `d`):
/// counts, sums, extremes and buckets, and the running state of
/// `@variance` combined as `rt_stat_merge` combines copies.
fn combine(dm: &Mem, d: usize, sm: &Mem, s: usize, desc: &StatDesc, name: &str) -> Result<(), String> {
    let c = sm.i64(s + S_COUNT);
    if c == 0 {
        return Ok(());
    }
    let (mn, mx) = (sm.i64(s + S_MIN), sm.i64(s + S_MAX));
    if c < 0 || mn > mx {
        return Err(format!(
            "processes of another trust domain corrupted statistic {name}: @count={c} @min={mn} @max={mx} cannot \
             all hold; their share is not counted"
        ));
    }
    let had = dm.i64(d + S_COUNT);
    let (avg_d, m2_d) = (dm.i64(d + S_AVG), dm.i64(d + S_M2));
    if had <= 0 || mn < dm.i64(d + S_MIN) {
        dm.set_i64(d + S_MIN, mn);
    }
    if had <= 0 || mx > dm.i64(d + S_MAX) {
        dm.set_i64(d + S_MAX, mx);
    }
    for i in (0..desc.size as usize).step_by(8) {
        if matches!(i, S_MIN | S_MAX | S_AVG | S_M2 | S_LOCK) {
            continue;
        }
        dm.set_i64(d + i, dm.i64(d + i).wrapping_add(sm.i64(s + i)));
    }
    dm.set_i64(d + S_LOCK, 0);
    if desc.variance == 0 {
        return Ok(());
    }
    let total = dm.i64(d + S_COUNT);
    if total <= 0 {
        return Ok(());
    }
    let mean = ((dm.i64(d + S_SUM) as u64) << (desc.shift & 63)) as i64 / total;
    let mut s12 = 0u64;
    for (n, avg, m2) in [(had, avg_d, m2_d), (c, sm.i64(s + S_AVG), sm.i64(s + S_M2))] {
        if n <= 0 {
            continue;
        }
        let dd = (avg as u64).wrapping_sub(mean as u64);
        s12 = s12.wrapping_add((n as u64).wrapping_mul(dd).wrapping_mul(dd));
        if n >= 2 {
            s12 = s12.wrapping_add(((n - 1) as u64).wrapping_mul((m2 / (n - 1)) as u64));
        }
    }
    dm.set_i64(d + S_AVG, mean);
    dm.set_i64(d + S_M2, s12 as i64);
    Ok(())
}

/// How many bytes global `g` takes in the region (its per-thread copies
/// apart); None when the artifact does not say.
fn extent(a: &Artifact, g: &Global) -> Option<usize> {
    let cap = a.limits.maxstringlen as usize;
    Some(match g.kind {
        DisplayKind::Long | DisplayKind::ShardedLong(_) => 8,
        DisplayKind::String => (LOCKED_STR_HEADER + cap).next_multiple_of(8),
        DisplayKind::Stat | DisplayKind::ShardedStat { .. } => stat_desc(a, g.desc)?.size as usize,
        DisplayKind::Array => Geometry::of(a, g.offset)?.size(),
    })
}

/// Rows of per-thread copies in a region.
fn rows(a: &Artifact) -> usize {
    a.nthreads as usize
}

/// A sharded counter's total in `m`: its word and every row's share.
fn shard_total(m: &Mem, a: &Artifact, off: usize, col: u32) -> i64 {
    (0..rows(a)).fold(m.i64(off), |s, r| {
        s.wrapping_add(m.i64(a.shards_off as usize + (r * a.nshards as usize + col as usize) * 8))
    })
}

/// Clear what a copy may hold of a writer caught half-way (a lock taken,
/// an odd sequence number): the domain's code would wait on it.
fn settle(m: &Mem, a: &Artifact, g: &Global) {
    let off = g.offset as usize;
    match g.kind {
        DisplayKind::String => m.set_u32(off, m.u32(off) & !1),
        DisplayKind::Stat | DisplayKind::ShardedStat { .. } => m.set_i64(off + S_LOCK, 0),
        DisplayKind::Array => {
            let Some(geo) = Geometry::of(a, g.offset) else { return };
            m.set_u32(off + core::mem::offset_of!(TableHeader, lock), 0);
            m.set_u32(off + core::mem::offset_of!(TableHeader, stolen), 0);
            for i in 0..geo.nslots {
                let s = geo.slot(off, i);
                m.set_u32(s, m.u32(s) & !1);
            }
        }
        DisplayKind::Long | DisplayKind::ShardedLong(_) => {}
    }
}

/// A new domain's region `dom` (set up from the artifact): the globals
/// targets do not only add to take the session's values (`main`) now.
/// Returns what they hold, to tell at the end what the domain changed.
pub fn seed(main: &Mem, dom: &Mem, a: &Artifact) -> Snapshot {
    let mut snap = Snapshot::default();
    for (i, g) in a.globals.iter().enumerate() {
        if g.merge == Merge::Add {
            continue;
        }
        let Some(n) = extent(a, g) else { continue };
        let off = g.offset as usize;
        match g.kind {
            DisplayKind::ShardedLong(col) => dom.set_i64(off, shard_total(main, a, off, col)),
            DisplayKind::ShardedStat { .. } => continue,
            _ => dom.put(off, &main.bytes(off, n)),
        }
        settle(dom, a, g);
        if g.merge == Merge::Assign {
            snap.bytes.insert(i, dom.bytes(off, n));
        }
    }
    snap
}

/// The live elements of an array: keys → the value's bytes.
fn elements(m: &Mem, geo: &Geometry, tab: usize) -> HashMap<Vec<Key>, Vec<u8>> {
    let mut out = HashMap::new();
    for i in 0..geo.nslots {
        let s = geo.slot(tab, i);
        if m.u32(s + 4) == SLOT_LIVE {
            out.insert(keys_at(m, geo, s), m.bytes(s + geo.value_off, geo.value_size()));
        }
    }
    out
}

/// Fold domain region `dom`, seeded with `start`, into the session's
/// region `main` (no handler runs in either). Returns warnings; an `Err`
/// is damage found in the domain's data (the rest is still folded).
pub fn fold(main: &Mem, dom: &Mem, start: &Snapshot, a: &Artifact, domain: &str) -> (Vec<String>, Vec<String>) {
    let (mut warnings, mut errors) = (Vec::new(), Vec::new());
    let init = |off: usize| a.init_at(off as u64).map_or(0, |b| i64_of(b, 0));
    for (i, g) in a.globals.iter().enumerate() {
        let off = g.offset as usize;
        let Some(n) = extent(a, g) else { continue };
        let desc = stat_desc(a, g.desc);
        match (g.merge, &g.kind) {
            (Merge::Untouched, _) => {}
            (Merge::Add, DisplayKind::Long) => {
                main.set_i64(off, main.i64(off).wrapping_add(dom.i64(off).wrapping_sub(init(off))))
            }
            (Merge::Add, DisplayKind::ShardedLong(col)) => {
                let delta = shard_total(dom, a, off, *col).wrapping_sub(init(off));
                main.set_i64(off, main.i64(off).wrapping_add(delta));
            }
            (Merge::Add, DisplayKind::Stat) => {
                if let Some(d) = &desc {
                    if let Err(e) = combine(main, off, dom, off, d, &g.name) {
                        errors.push(e);
                    }
                }
            }
            (Merge::Add, DisplayKind::ShardedStat { shards, row }) => {
                let Some(d) = &desc else { continue };
                // The domain's total first (its own copy and its threads'),
                // then into the session's own copy.
                let mut total = vec![0u8; n];
                // SAFETY: `total` is n bytes, alive while `t` is used.
                let t = unsafe { Mem::new(total.as_mut_ptr(), n) };
                let copies = std::iter::once(off).chain((0..rows(a)).map(|r| *shards as usize + r * *row as usize));
                let mut bad = None;
                for c in copies {
                    if let Err(e) = combine(&t, 0, dom, c, d, &g.name) {
                        bad = Some(e);
                        break;
                    }
                }
                match bad {
                    Some(e) => errors.push(e),
                    None => {
                        if let Err(e) = combine(main, off, &t, 0, d, &g.name) {
                            errors.push(e);
                        }
                    }
                }
            }
            (merge, DisplayKind::Array) => {
                let Some(geo) = Geometry::of(a, g.offset) else { continue };
                let vdesc = if geo.value_kind == KIND_STAT { desc } else { None };
                let before = match merge {
                    Merge::Assign => start.bytes.get(&i).map(|b| {
                        // SAFETY: a copy of the array's n bytes, alive meanwhile.
                        let mut copy = b.clone();
                        let m = unsafe { Mem::new(copy.as_mut_ptr(), copy.len()) };
                        elements(&m, &geo, 0)
                    }),
                    _ => None,
                };
                let now = elements(dom, &geo, off);
                let mut full = 0usize;
                for (keys, value) in &now {
                    if let Some(b) = &before {
                        if b.get(keys) == Some(value) {
                            continue;
                        }
                    }
                    let Some(slot) = find_or_insert(main, &geo, off, keys) else {
                        full += 1;
                        continue;
                    };
                    let v = slot + geo.value_off;
                    // SAFETY: `value` is value_size bytes, alive meanwhile.
                    let mut val = value.clone();
                    let vm = unsafe { Mem::new(val.as_mut_ptr(), val.len()) };
                    match (merge, geo.value_kind) {
                        (Merge::Add, KIND_STAT) => {
                            if let Some(d) = &vdesc {
                                if let Err(e) = combine(main, v, &vm, 0, d, &g.name) {
                                    errors.push(e);
                                }
                            }
                        }
                        (Merge::Add, _) => main.set_i64(v, main.i64(v).wrapping_add(vm.i64(0))),
                        (_, KIND_STRING) => {
                            vm.set_u32(0, 0);
                            main.put(v, &val);
                        }
                        (_, KIND_STAT) => {
                            vm.set_i64(S_LOCK, 0);
                            main.put(v, &val);
                        }
                        _ => main.put(v, &val),
                    }
                }
                if let Some(b) = &before {
                    for keys in b.keys().filter(|k| !now.contains_key(*k)) {
                        delete(main, &geo, off, keys);
                    }
                }
                if full > 0 {
                    errors.push(format!(
                        "Array overflow, check MAXMAPENTRIES: {full} element(s) of {} from processes of {domain} did \
                         not fit",
                        g.name
                    ));
                }
            }
            (_, DisplayKind::ShardedLong(_) | DisplayKind::ShardedStat { .. }) => {}
            (_, DisplayKind::Long | DisplayKind::String | DisplayKind::Stat) => {
                let Some(was) = start.bytes.get(&i) else { continue };
                let mut now = dom.bytes(off, n);
                let mut ours = main.bytes(off, n);
                // The sequence word (a string's) and lock (a statistic's)
                // are not the value.
                let skip = |b: &mut Vec<u8>| match g.kind {
                    DisplayKind::String => b[..4].fill(0),
                    DisplayKind::Stat => b[S_LOCK..S_LOCK + 8].fill(0),
                    _ => {}
                };
                let mut was = was.clone();
                skip(&mut now);
                skip(&mut ours);
                skip(&mut was);
                if now == was {
                    continue;
                }
                if ours != was {
                    warnings.push(format!(
                        "global {} was assigned both in the session's processes and in processes of {domain}; the \
                         value kept is the latter's",
                        g.name
                    ));
                }
                if g.kind == DisplayKind::String {
                    now[..4].copy_from_slice(&(main.u32(off) & !1).to_le_bytes());
                }
                main.put(off, &now);
            }
        }
    }
    (warnings, errors)
}

//! `--perfetto FILE`: a Perfetto trace (protobuf `TracePacket`s), streamed
//! (a [`TraceWriter`]).
//!
//! What the file holds, in the terms of Perfetto's trace format
//! (`protos/perfetto/trace/` in google/perfetto):
//!
//! * Sequence 1, the writer's own: a `ClockSnapshot` tying telco-stap's
//!   clock (CLOCK_REALTIME nanoseconds, the time line the TSC is
//!   calibrated against, `os::sys::clock`) to CLOCK_BOOTTIME and
//!   CLOCK_MONOTONIC, read back to back; the process's track; counter
//!   tracks and their values (`trace_counter`); instants (`trace_instant`,
//!   and one per printf with its text as the `text` argument) with
//!   absolute times; at the end, the session's summary as metadata
//!   (`ChromeEventBundle.metadata`, listed by the trace processor as
//!   `cr-telco_stap_*` in its `metadata` table).
//! * One sequence per thread: a thread track (`ThreadDescriptor`, named by
//!   the thread's `comm`, described again when the thread renames itself),
//!   then a `TYPE_SLICE_BEGIN`/`TYPE_SLICE_END` pair per call. Those are
//!   most of the file, so each is as small as the format allows: the
//!   sequence's defaults give the track and the clock, a sequence-scoped
//!   incremental clock makes the time a delta from the packet before,
//!   and function names are interned once per sequence (`name_iid`; the
//!   sequence's first packet clears its incremental state, every slice
//!   packet says it needs it). A
//!   packet whose time is before its predecessor's (see [`order`]) carries
//!   an absolute CLOCK_REALTIME time instead.
//! * Packets are gathered into batches written as `compressed_packets`
//!   (zlib, which the trace processor and the Perfetto UI inflate), one
//!   per megabyte of packets or whenever the writer catches up: a call
//!   costs a few bytes in the file, and the file is valid up to its last
//!   batch whenever it is read.
//!
//! Calls arrive when they return; [`order::Order`] holds them until
//! their begin and end events can be written in order. The writer runs on
//! the trace writer thread (`crate::feed`), never on the consumer.

pub mod order;
pub mod proto;

use crate::feed::{Calls, Config, End, Report, TraceWriter};
use prost::Message;
use proto::*;
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

// The session's summary the file records (here before the feed had it).
use crate::feed::Summary;

/// The flag that asks for the file (its report says it).
pub const FLAG: &str = "--perfetto";

/// Packets gathered before a batch is compressed and written.
const BATCH: usize = 1 << 20;

/// The clock of slice times on a thread's sequence: CLOCK_REALTIME ns,
/// as deltas (sequence-scoped ids are 64–127).
const CLOCK_DELTA: u32 = 64;

/// Threads given a track, at most (the tids come from the target).
const MAX_THREADS: usize = 1 << 17;

/// The name index of probe numbers the artifact does not have ("?"): past
/// every u16 id.
const UNKNOWN_NAME: usize = 1 << 16;

/// Counter tracks, at most (their names come from the target's script).
const MAX_COUNTERS: usize = 1 << 12;

/// Thread names looked at again per [`Perfetto::refresh_names`].
const NAMES_PER_REFRESH: usize = 4096;

/// Sequences: the writer's own is 1, a thread's `2 +` its index, and the
/// `timer.profile` samples' (appended by the binary's
/// `profile::perfetto`) this one.
const WRITER_SEQUENCE: u32 = 1;
const FIRST_THREAD_SEQUENCE: u32 = 2;
pub const SAMPLES_SEQUENCE: u32 = 0x7fff_0001;

const PROCESS_UUID: u64 = 1;
/// Thread track uuids are `THREAD_UUID + tid`, counters `COUNTER_UUID + n`;
/// the samples' threads `SAMPLE_THREAD_UUID | tid`.
const THREAD_UUID: u64 = 1 << 32;
/// The tracks of the session's processes other than the first:
/// `OTHER_PROCESS_UUID + pid`.
const OTHER_PROCESS_UUID: u64 = 3 << 32;
const COUNTER_UUID: u64 = 2 << 32;
pub const SAMPLE_THREAD_UUID: u64 = 0x7465_6c63_0000_0000;

/// What a finished trace holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Written {
    /// Begin and end events, instants and counter values.
    pub events: u64,
    pub calls: u64,
    /// The file's size, and the packets' size before compression.
    pub bytes: u64,
    pub raw_bytes: u64,
    /// Times calls were written before their parent returned, and calls
    /// whose begin could then not be placed exactly (see [`order`]).
    pub early: u64,
    pub misplaced: u64,
    /// Calls nested deeper than Perfetto keeps ([`order::MAX_DEPTH`]),
    /// left out.
    pub too_deep: u64,
    /// Events (a call's begin and end, instants, counter values) left
    /// out because the file had reached `max_size`.
    pub left_out: u64,
    pub max_size: u64,
}

/// Room kept under `--max-size` for the summary written at the end.
const SUMMARY_ROOM: u64 = 4096;

struct Seq {
    id: u32,
    /// The time of the last packet on the incremental clock.
    last: u64,
    /// Probe names interned on this sequence, a bit per probe.
    interned: Vec<u64>,
    comm: Vec<u8>,
    /// The process the thread belongs to (the session's processes each
    /// get a track of their own).
    pid: u32,
}

pub struct Perfetto {
    out: BufWriter<File>,
    path: PathBuf,
    pid: u32,
    process: Vec<u8>,
    names: Vec<String>,
    threads: order::ByTid<Seq>,
    /// Processes described besides the first (bounded by the threads).
    processes: std::collections::HashSet<u32>,
    /// Threads' processes as the target told them (`owner`).
    owners: HashMap<u32, u32>,
    /// Threads' names as they were told, by tid.
    told: HashMap<u32, Vec<u8>>,
    /// Round-robin position of [`Perfetto::refresh_names`].
    refresh_at: usize,
    counters: HashMap<Vec<u8>, u64>,
    /// Taken while it calls back into `self` (always there otherwise).
    order: Option<Box<order::Order>>,
    /// Calls come in TSC ticks.
    clock: crate::os::sys::Clock,
    /// Packets not yet compressed, each framed as `Trace.packet`.
    batch: Vec<u8>,
    /// The slice packet being written (reused).
    packet: SlicePacket,
    written: Written,
    file_bytes: u64,
    /// Events in `batch`; whether a batch did not fit under `max_size`
    /// (then nothing more is added).
    batch_events: u64,
    max_size: u64,
    full: bool,
}

impl Perfetto {
    /// Start the file for process `pid` (named `process`); `names` gives
    /// each probe's slice name (the probed function).
    pub fn create(path: &Path, pid: u32, process: &str, names: &[String]) -> std::io::Result<Perfetto> {
        let file = crate::outfile::create(path)?;
        let mut p = Perfetto {
            out: BufWriter::with_capacity(1 << 20, file),
            path: path.to_path_buf(),
            pid,
            process: process.as_bytes().to_vec(),
            names: names.to_vec(),
            threads: order::ByTid::default(),
            processes: Default::default(),
            owners: HashMap::new(),
            told: HashMap::new(),
            refresh_at: 0,
            counters: HashMap::new(),
            order: Some(Box::default()),
            clock: crate::os::sys::clock(),
            batch: Vec::with_capacity(BATCH + 4096),
            packet: SlicePacket::default(),
            written: Written::default(),
            file_bytes: 0,
            batch_events: 0,
            max_size: crate::feed::DEFAULT_MAX_SIZE,
            full: false,
        };
        // The clocks, read as close together as they can be, once: every
        // file of the session (`--rotate`'s FILE.1, FILE.2, ...) ties the
        // calls' CLOCK_REALTIME to the trace processor's CLOCK_BOOTTIME
        // alike, or a file read later would be shifted by the reads'
        // jitter against the one before.
        static CLOCKS: std::sync::OnceLock<(u64, u64, u64)> = std::sync::OnceLock::new();
        let &(real, boot, mono) = CLOCKS.get_or_init(|| {
            let real = crate::os::sys::realtime_ns();
            let boot = clock_ns(nix::time::ClockId::CLOCK_BOOTTIME);
            (real, boot, clock_ns(nix::time::ClockId::CLOCK_MONOTONIC))
        });
        let clock = |id, t| Clock { clock_id: Some(id), timestamp: Some(t), is_incremental: None };
        p.push(&TracePacket {
            trusted_packet_sequence_id: Some(WRITER_SEQUENCE),
            timestamp: Some(boot),
            timestamp_clock_id: Some(CLOCK_BOOTTIME),
            clock_snapshot: Some(ClockSnapshot {
                clocks: vec![clock(CLOCK_BOOTTIME, boot), clock(CLOCK_REALTIME, real), clock(CLOCK_MONOTONIC, mono)],
            }),
            ..Default::default()
        });
        p.push(&TracePacket {
            trusted_packet_sequence_id: Some(WRITER_SEQUENCE),
            track_descriptor: Some(TrackDescriptor {
                uuid: Some(PROCESS_UUID),
                process: Some(ProcessDescriptor {
                    pid: Some(pid as i32),
                    process_name: Some(String::from_utf8_lossy(&p.process).into_owned()),
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        // The file starts valid at once.
        p.write_batch()?;
        p.out.flush()?;
        Ok(p)
    }

    /// `--max-size`: the file stays within `bytes` (at least 64 KB: a
    /// batch and the summary must fit).
    pub fn max_size(mut self, bytes: u64) -> Perfetto {
        self.max_size = bytes;
        self
    }

    /// Frame `packet` as a `Trace.packet` into the batch.
    fn push(&mut self, packet: &TracePacket) {
        self.batch.push(0x0a);
        self.batch.extend_from_slice(&packet.encode_length_delimited_to_vec());
    }

    /// Frame `self.packet` (the event being written) into the batch.
    fn push_own(&mut self) {
        self.packet.encode_framed(&mut self.batch);
        self.written.events += 1;
        self.batch_events += 1;
    }

    /// The batch, compressed into one packet, to the file, if it fits
    /// under `--max-size` with room for the summary.
    fn write_batch(&mut self) -> std::io::Result<()> {
        self.write_batch_within(self.max_size.saturating_sub(SUMMARY_ROOM))
    }

    /// The batch to the file if the file stays within `room` bytes;
    /// otherwise its events are left out, and every event after them:
    /// the file ends with the batches before, a valid trace.
    fn write_batch_within(&mut self, room: u64) -> std::io::Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let mut z =
            flate2::write::ZlibEncoder::new(Vec::with_capacity(self.batch.len() / 4 + 64), flate2::Compression::fast());
        z.write_all(&self.batch)?;
        let wrapped = TracePacket { compressed_packets: Some(z.finish()?), ..Default::default() };
        let mut framed = vec![0x0a];
        framed.extend_from_slice(&wrapped.encode_length_delimited_to_vec());
        if self.file_bytes + framed.len() as u64 > room {
            self.full = true;
            self.written.events -= self.batch_events;
            self.written.left_out += self.batch_events;
        } else {
            self.written.raw_bytes += self.batch.len() as u64;
            self.out.write_all(&framed)?;
            self.file_bytes += framed.len() as u64;
        }
        self.batch.clear();
        self.batch_events = 0;
        Ok(())
    }

    fn maybe_write_batch(&mut self) -> std::io::Result<()> {
        if self.batch.len() >= BATCH {
            self.write_batch()?;
        }
        Ok(())
    }

    /// The sequence of thread `tid`, started (its clock, defaults and
    /// track) when the thread is first seen. None past [`MAX_THREADS`].
    fn seq(&mut self, tid: u32, ts: u64) -> Option<usize> {
        if let Some(i) = self.threads.position(tid) {
            return Some(i);
        }
        if self.threads.len() >= MAX_THREADS {
            return None;
        }
        let id = FIRST_THREAD_SEQUENCE + self.threads.len() as u32;
        // Its process, as the target told (`owner`), else the first's.
        let pid = self.owners.get(&tid).copied().unwrap_or(self.pid);
        self.describe_process(pid);
        let comm = crate::feed::thread_name(pid, tid, self.told.get(&tid), &self.process);
        // The incremental clock starts at `ts`: the snapshot ties it to
        // CLOCK_REALTIME, and this packet's own time is a zero delta.
        let start = ts;
        self.push(&TracePacket {
            trusted_packet_sequence_id: Some(id),
            first_packet_on_sequence: Some(true),
            incremental_state_cleared: Some(true),
            sequence_flags: Some(SEQ_INCREMENTAL_STATE_CLEARED),
            timestamp: Some(0),
            clock_snapshot: Some(ClockSnapshot {
                clocks: vec![
                    Clock { clock_id: Some(CLOCK_DELTA), timestamp: Some(start), is_incremental: Some(true) },
                    Clock { clock_id: Some(CLOCK_REALTIME), timestamp: Some(start), is_incremental: None },
                ],
            }),
            trace_packet_defaults: Some(TracePacketDefaults {
                timestamp_clock_id: Some(CLOCK_DELTA),
                track_event_defaults: Some(TrackEventDefaults { track_uuid: Some(THREAD_UUID + u64::from(tid)) }),
            }),
            ..Default::default()
        });
        // A bit per name (more as names are added or "?" is needed).
        let interned = vec![0; self.names.len().div_ceil(64)];
        let i = self.threads.insert(tid, Seq { id, last: start, interned, comm, pid });
        self.describe(tid);
        Some(i)
    }

    /// Process `pid`'s track, once: the first process's is the file's
    /// first; each other process of the session (a worker, a program run
    /// later) gets one named for it.
    fn describe_process(&mut self, pid: u32) {
        if pid == self.pid || self.full || !self.processes.insert(pid) {
            return;
        }
        let name =
            String::from_utf8_lossy(&crate::feed::process_name(pid, self.told.get(&pid), &self.process)).into_owned();
        self.push(&TracePacket {
            trusted_packet_sequence_id: Some(WRITER_SEQUENCE),
            track_descriptor: Some(TrackDescriptor {
                uuid: Some(OTHER_PROCESS_UUID + u64::from(pid)),
                process: Some(ProcessDescriptor { pid: Some(pid as i32), process_name: Some(name) }),
                ..Default::default()
            }),
            ..Default::default()
        });
    }

    /// The thread's track, with its current name.
    fn describe(&mut self, tid: u32) {
        if self.full {
            return;
        }
        let first = self.pid;
        let Some(s) = self.threads.get(tid) else { return };
        let process = if s.pid == first { PROCESS_UUID } else { OTHER_PROCESS_UUID + u64::from(s.pid) };
        let packet = TracePacket {
            trusted_packet_sequence_id: Some(s.id),
            track_descriptor: Some(TrackDescriptor {
                uuid: Some(THREAD_UUID + u64::from(tid)),
                parent_uuid: Some(process),
                thread: Some(ThreadDescriptor {
                    pid: Some(s.pid as i32),
                    tid: Some(tid as i32),
                    thread_name: Some(String::from_utf8_lossy(&s.comm).into_owned()),
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        self.push(&packet);
    }

    /// Look again at the names of up to [`NAMES_PER_REFRESH`] threads
    /// (round robin): a thread that renamed itself is described again.
    pub fn refresh_names(&mut self) {
        let len = self.threads.len();
        if len == 0 {
            return;
        }
        let n = len.min(NAMES_PER_REFRESH);
        for k in 0..n {
            let i = (self.refresh_at + k) % len;
            let tid = self.threads.tid(i);
            let pid = self.threads.at(i).pid;
            let Some(comm) = crate::os::proc::thread_comm(pid as i32, tid as i32) else { continue };
            let s = self.threads.at(i);
            if s.comm != comm {
                s.comm = comm;
                self.describe(tid);
            }
        }
        self.refresh_at = (self.refresh_at + n) % len;
    }

    /// One call of `probe` on `tid`, from TSC tick `start` to `end`,
    /// reported when it returned. Calls are ordered in ticks (two calls
    /// of a thread never share one) and written in ns.
    pub fn call(&mut self, tid: u32, probe: u16, start: u64, end: u64) -> std::io::Result<()> {
        if self.full {
            // Past --max-size: its begin and end, counted.
            self.written.left_out += 2;
            return Ok(());
        }
        self.written.calls += 1;
        let clock = self.clock;
        // A thread is named when its first call arrives (its calls may be
        // held a while before they are written).
        if self.threads.position(tid).is_none() {
            self.seq(tid, clock.ns(start));
        }
        let Some(mut order) = self.order.take() else { return Ok(()) };
        order.call(tid, probe, start, end, &|t| clock.ns(t), &mut |ev| self.slice_event(ev));
        self.order = Some(order);
        self.maybe_write_batch()
    }

    /// One begin or end, on its thread's sequence.
    fn slice_event(&mut self, ev: order::Ev) {
        if self.full {
            self.written.left_out += 1;
            return;
        }
        let (tid, ts, probe) = match ev {
            order::Ev::Begin { tid, ts, probe } => (tid, ts, Some(probe)),
            order::Ev::End { tid, ts } => (tid, ts, None),
        };
        let Some(i) = self.seq(tid, ts) else { return };
        let s = self.threads.at(i);
        let id = s.id;
        let p = &mut self.packet;
        p.trusted_packet_sequence_id = Some(id);
        p.interned_data = None;
        // Its name and time depend on the sequence's state.
        p.sequence_flags = Some(SEQ_NEEDS_INCREMENTAL_STATE);
        if ts >= s.last {
            p.timestamp = Some(ts - s.last);
            p.timestamp_clock_id = None;
            s.last = ts;
        } else {
            // Before the packet before: an absolute time.
            p.timestamp = Some(ts);
            p.timestamp_clock_id = Some(CLOCK_REALTIME);
        }
        let te = p.track_event.get_or_insert_with(SliceEvent::default);
        match probe {
            Some(probe) => {
                // A probe number the artifact does not have (the target
                // wrote it): named "?", one name for all of them, past
                // every id a name can have (the names grow with
                // `trace_span`'s).
                let k = if usize::from(probe) < self.names.len() { usize::from(probe) } else { UNKNOWN_NAME };
                let iid = k as u64 + 1;
                te.r#type = Some(TrackEventType::SliceBegin as i32);
                te.name_iid = Some(iid);
                let (w, bit) = (k / 64, 1u64 << (k % 64));
                if w >= s.interned.len() {
                    s.interned.resize(w + 1, 0);
                }
                if let Some(word) = s.interned.get_mut(w) {
                    if *word & bit == 0 {
                        *word |= bit;
                        let name = self.names.get(k).cloned().unwrap_or_else(|| "?".into());
                        p.interned_data = Some(InternedData {
                            event_names: vec![EventName { iid: Some(iid), name: Some(name) }],
                            ..Default::default()
                        });
                    }
                }
            }
            None => {
                te.r#type = Some(TrackEventType::SliceEnd as i32);
                te.name_iid = None;
            }
        }
        self.push_own();
    }

    /// Every call held written, the threads' last names, the summary;
    /// then the file is complete.
    pub fn finish(mut self, summary: &Summary) -> std::io::Result<Written> {
        if let Some(mut order) = self.order.take() {
            let clock = self.clock;
            order.finish(&|t| clock.ns(t), &mut |ev| self.slice_event(ev));
            self.written.early = order.early;
            self.written.misplaced = order.misplaced;
            self.written.too_deep = order.too_deep;
        }
        self.refresh_names();
        // What is left, if it fits; the summary in the room kept for it.
        self.write_batch()?;
        let meta = |name: &str, v: u64| ChromeMetadata {
            name: Some(format!("telco_stap_{name}")),
            int_value: Some(v.min(i64::MAX as u64) as i64),
            string_value: None,
        };
        self.push(&TracePacket {
            trusted_packet_sequence_id: Some(WRITER_SEQUENCE),
            chrome_events: Some(ChromeEventBundle {
                metadata: vec![
                    meta("calls", self.written.calls),
                    meta("errors", summary.errors),
                    meta("dropped", summary.dropped + summary.writer_dropped),
                    meta("skipped", summary.skipped),
                    meta("left_out", self.written.left_out),
                ],
            }),
            ..Default::default()
        });
        self.write_batch_within(self.max_size)?;
        self.out.flush()?;
        self.written.bytes = self.file_bytes;
        self.written.max_size = self.max_size;
        Ok(self.written)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl crate::feed::Start for Perfetto {
    fn start(cfg: &Config<'_>) -> std::io::Result<Perfetto> {
        Ok(Perfetto::create(cfg.path, cfg.pid, cfg.process, cfg.names)?.max_size(cfg.max_size))
    }
}

impl TraceWriter for Perfetto {
    fn add_name(&mut self, name: &str) {
        self.names.push(name.to_string());
    }

    fn owner(&mut self, tid: u32, pid: u32, comm: Option<&[u8]>) {
        if self.owners.len() < MAX_THREADS && self.threads.get(tid).is_none() {
            self.owners.insert(tid, pid);
            if let Some(c) = comm {
                self.told.insert(tid, c.to_vec());
            }
        }
    }

    fn calls(&mut self, calls: Calls<'_>) -> std::io::Result<()> {
        for c in calls {
            self.call(c.tid, c.probe, c.start, c.end)?;
        }
        Ok(())
    }

    /// An instant on a thread: `trace_instant(name)`, or a printf's
    /// output (category "printf", the text as argument `text`).
    fn instant(&mut self, tid: u32, ts_ns: u64, cat: &str, name: &[u8], text: Option<&[u8]>) -> std::io::Result<()> {
        if self.full {
            self.written.left_out += 1;
            return Ok(());
        }
        if self.seq(tid, ts_ns).is_none() {
            return Ok(());
        }
        let packet = TracePacket {
            trusted_packet_sequence_id: Some(WRITER_SEQUENCE),
            timestamp: Some(ts_ns),
            timestamp_clock_id: Some(CLOCK_REALTIME),
            track_event: Some(TrackEvent {
                r#type: Some(TrackEventType::Instant as i32),
                track_uuid: Some(THREAD_UUID + u64::from(tid)),
                name: Some(String::from_utf8_lossy(name).into_owned()),
                categories: vec![cat.to_string()],
                debug_annotations: text
                    .map(|t| DebugAnnotation {
                        name: Some("text".into()),
                        string_value: Some(String::from_utf8_lossy(t).into_owned()),
                        int_value: None,
                    })
                    .into_iter()
                    .collect(),
                ..Default::default()
            }),
            ..Default::default()
        };
        self.push(&packet);
        self.written.events += 1;
        self.batch_events += 1;
        self.maybe_write_batch()
    }

    /// `trace_counter(name, value)`: a counter track of the process.
    fn counter(&mut self, ts_ns: u64, name: &[u8], value: i64) -> std::io::Result<()> {
        if self.full {
            self.written.left_out += 1;
            return Ok(());
        }
        let uuid = match self.counters.get(name) {
            Some(&u) => u,
            None if self.counters.len() >= MAX_COUNTERS => return Ok(()),
            None => {
                let u = COUNTER_UUID + self.counters.len() as u64;
                self.counters.insert(name.to_vec(), u);
                self.push(&TracePacket {
                    trusted_packet_sequence_id: Some(WRITER_SEQUENCE),
                    track_descriptor: Some(TrackDescriptor {
                        uuid: Some(u),
                        parent_uuid: Some(PROCESS_UUID),
                        name: Some(String::from_utf8_lossy(name).into_owned()),
                        counter: Some(CounterDescriptor {}),
                        ..Default::default()
                    }),
                    ..Default::default()
                });
                u
            }
        };
        self.push(&TracePacket {
            trusted_packet_sequence_id: Some(WRITER_SEQUENCE),
            timestamp: Some(ts_ns),
            timestamp_clock_id: Some(CLOCK_REALTIME),
            track_event: Some(TrackEvent {
                r#type: Some(TrackEventType::Counter as i32),
                track_uuid: Some(uuid),
                counter_value: Some(value),
                ..Default::default()
            }),
            ..Default::default()
        });
        self.written.events += 1;
        self.batch_events += 1;
        self.maybe_write_batch()
    }

    fn refresh(&mut self) {
        self.refresh_names();
    }

    fn size(&self) -> u64 {
        self.file_bytes
    }

    fn full(&self) -> bool {
        self.full
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.write_batch()?;
        self.out.flush()
    }

    fn finish(self: Box<Self>, end: &End) -> std::io::Result<Report> {
        let path = self.path.clone();
        let mut w = Perfetto::finish(*self, &end.summary)?;
        // Calls not spooled: in no file, each a begin and an end.
        w.left_out += 2 * end.unspooled;
        let size = crate::feed::size_text(w.bytes);
        let per_call =
            if w.calls > 0 { format!(" ({:.1} bytes a call)", w.bytes as f64 / w.calls as f64) } else { String::new() };
        let mut report = Report {
            flag: FLAG,
            holds: format!(
                "{FLAG}: {} calls, {} events, {size}{per_call}, written to {}",
                w.calls,
                w.events,
                path.display()
            ),
            left_out: w.left_out,
            max_size: w.max_size,
            calls: w.calls,
            events: w.events,
            bytes: w.bytes,
            path: Some(path),
            ..Report::default()
        };
        if w.too_deep > 0 {
            report.lacks.push(format!(
                "WARNING: {FLAG}: {} calls nested more than {} deep were left out (Perfetto keeps {} levels on a \
                 thread; --chrome shows them)",
                w.too_deep,
                order::MAX_DEPTH,
                order::MAX_DEPTH
            ));
        }
        if w.misplaced > 0 {
            report.warnings.push(format!(
                "WARNING: {FLAG}: {} calls began in the same nanosecond as calls they hold that were written \
                 before they returned; they may be drawn one level too deep",
                w.misplaced
            ));
        }
        Ok(report)
    }
}

fn clock_ns(id: nix::time::ClockId) -> u64 {
    let t = nix::time::clock_gettime(id).unwrap_or_else(|_| nix::sys::time::TimeSpec::new(0, 0));
    (t.tv_sec() as u64).saturating_mul(1_000_000_000).saturating_add(t.tv_nsec() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    /// The packets of a file: each `Trace.packet`, batches inflated.
    fn packets(path: &Path) -> Vec<TracePacket> {
        fn read(mut b: &[u8], out: &mut Vec<TracePacket>) {
            while !b.is_empty() {
                assert_eq!(b[0], 0x0a, "Trace.packet");
                b = &b[1..];
                let p = TracePacket::decode_length_delimited(&mut b).expect("a packet");
                if let Some(z) = &p.compressed_packets {
                    let mut raw = Vec::new();
                    std::io::Read::read_to_end(&mut flate2::read::ZlibDecoder::new(&z[..]), &mut raw).expect("zlib");
                    read(&raw, out);
                } else {
                    out.push(p);
                }
            }
        }
        let bytes = std::fs::read(path).unwrap();
        let mut out = Vec::new();
        read(&bytes, &mut out);
        out
    }

    #[test]
    fn a_trace_stops_at_its_maximum_size_and_stays_valid() {
        let path = std::env::temp_dir().join(format!("telco-perfetto-max-{}.pftrace", std::process::id()));
        let max = 64 << 10;
        let mut p = Perfetto::create(&path, std::process::id(), "me", &["work".into()]).unwrap().max_size(max);
        let clock = crate::os::sys::clock();
        // Calls of varied lengths (compressed less well): several batches.
        let n = 400_000u64;
        let mut t = clock.tsc_base;
        for i in 0..n {
            let d = 50 + (i * 7919 % 1000);
            p.call(7, 0, t, t + d).unwrap();
            t += d + 1 + (i * 104729 % 500);
        }
        assert!(p.full());
        let w = p.finish(&Summary::default()).unwrap();
        let bytes = std::fs::metadata(&path).unwrap().len();
        assert_eq!(w.bytes, bytes);
        assert!(bytes <= max, "{w:?}");
        // Whole packets, the summary last; every begin and end written or
        // left out.
        let all = packets(&path);
        let meta: Vec<(String, i64)> = all
            .iter()
            .filter_map(|p| p.chrome_events.as_ref())
            .flat_map(|b| b.metadata.iter().map(|m| (m.name.clone().unwrap(), m.int_value.unwrap())))
            .collect();
        assert!(meta.contains(&("telco_stap_left_out".into(), w.left_out as i64)), "{meta:?}");
        let slices = all.iter().filter(|p| p.track_event.is_some()).count() as u64;
        assert_eq!(slices, w.events);
        assert_eq!(w.events + w.left_out, 2 * n, "{w:?}");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_renamed_thread_is_described_again() {
        // Removed however the test ends.
        struct Dir(std::path::PathBuf);
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
        let dir = Dir(std::env::temp_dir().join(format!("telco-perfetto-{}", std::process::id())));
        std::fs::create_dir_all(&dir.0).unwrap();
        let path = dir.0.join("t.pftrace");
        let (to_thread, rx) = std::sync::mpsc::channel::<()>();
        let (tx, from_thread) = std::sync::mpsc::channel::<u32>();
        let worker = std::thread::Builder::new()
            .name("before".into())
            .spawn(move || {
                tx.send(nix::unistd::gettid().as_raw() as u32).unwrap();
                rx.recv().unwrap();
                let name = std::ffi::CString::new("after").unwrap();
                // SAFETY: PR_SET_NAME with a NUL-terminated name.
                unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
                tx.send(0).unwrap();
                rx.recv().unwrap();
            })
            .unwrap();
        let tid = from_thread.recv().unwrap();
        let mut p = Perfetto::create(&path, std::process::id(), "me", &["work".into()]).unwrap();
        let clock = crate::os::sys::clock();
        p.call(tid, 0, clock.tsc_base + 100, clock.tsc_base + 200).unwrap();
        to_thread.send(()).unwrap();
        from_thread.recv().unwrap();
        p.refresh_names();
        let w = p.finish(&Summary { errors: 1, dropped: 2, skipped: 3, writer_dropped: 4 }).unwrap();
        to_thread.send(()).unwrap();
        worker.join().unwrap();
        assert_eq!((w.calls, w.events), (1, 2));
        let all = packets(&path);
        let names: Vec<String> = all
            .iter()
            .filter_map(|p| p.track_descriptor.as_ref()?.thread.as_ref())
            .filter(|t| t.tid == Some(tid as i32))
            .filter_map(|t| t.thread_name.clone())
            .collect();
        assert_eq!(names, ["before", "after"]);
        // One begin (its name interned with it) and one end, on the
        // thread's sequence, 100 ticks apart.
        let slices: Vec<&TracePacket> = all.iter().filter(|p| p.track_event.is_some()).collect();
        assert_eq!(slices.len(), 2);
        let begin = slices[0].track_event.as_ref().unwrap();
        assert_eq!(begin.r#type, Some(TrackEventType::SliceBegin as i32));
        assert_eq!(slices[0].interned_data.as_ref().unwrap().event_names[0].name.as_deref(), Some("work"));
        assert_eq!(slices[1].timestamp, Some(clock.ns(clock.tsc_base + 200) - clock.ns(clock.tsc_base + 100)));
        // The summary, as metadata.
        let meta: Vec<(String, i64)> = all
            .iter()
            .filter_map(|p| p.chrome_events.as_ref())
            .flat_map(|b| b.metadata.iter().map(|m| (m.name.clone().unwrap(), m.int_value.unwrap())))
            .collect();
        assert!(meta.contains(&("telco_stap_dropped".into(), 6)), "{meta:?}");
        assert!(meta.contains(&("telco_stap_errors".into(), 1)), "{meta:?}");
    }
}

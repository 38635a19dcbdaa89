//! The few messages of Perfetto's trace format that telco-stap writes, as
//! `prost` messages: declared here once, for the trace writer
//! (`--perfetto`'s calls, instants and counters, [`super::Perfetto`]) and
//! for `timer.profile`'s samples in the same file (the binary's
//! `profile::perfetto`). Field numbers and types are Perfetto's own
//! (`protos/perfetto/trace/trace_packet.proto` and the files it imports,
//! in google/perfetto); only the fields telco-stap sets are declared, and
//! every scalar is `optional` as in those proto2 files, so a zero (a
//! timestamp delta of 0, pid 0) is written rather than left out.

/// `Trace`: a whole file, or packets to append to one (a trace is its
/// packets, in any order).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Trace {
    #[prost(message, repeated, tag = "1")]
    pub packet: Vec<TracePacket>,
}

/// `TracePacket`: one event, descriptor, snapshot or batch of them. A
/// trace file is these, each as field 1 (`Trace.packet`) of the file.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TracePacket {
    #[prost(message, optional, tag = "5")]
    pub chrome_events: Option<ChromeEventBundle>,
    #[prost(message, optional, tag = "6")]
    pub clock_snapshot: Option<ClockSnapshot>,
    #[prost(uint64, optional, tag = "8")]
    pub timestamp: Option<u64>,
    #[prost(uint32, optional, tag = "10")]
    pub trusted_packet_sequence_id: Option<u32>,
    #[prost(message, optional, tag = "11")]
    pub track_event: Option<TrackEvent>,
    #[prost(message, optional, tag = "12")]
    pub interned_data: Option<InternedData>,
    #[prost(uint32, optional, tag = "13")]
    pub sequence_flags: Option<u32>,
    #[prost(bool, optional, tag = "41")]
    pub incremental_state_cleared: Option<bool>,
    /// Deflate-compressed (zlib) bytes of a `Trace`: packets read as if
    /// they stood here.
    #[prost(bytes = "vec", optional, tag = "50")]
    pub compressed_packets: Option<Vec<u8>>,
    #[prost(uint32, optional, tag = "58")]
    pub timestamp_clock_id: Option<u32>,
    #[prost(message, optional, tag = "59")]
    pub trace_packet_defaults: Option<TracePacketDefaults>,
    #[prost(message, optional, tag = "60")]
    pub track_descriptor: Option<TrackDescriptor>,
    #[prost(message, optional, tag = "66")]
    pub perf_sample: Option<PerfSample>,
    #[prost(bool, optional, tag = "87")]
    pub first_packet_on_sequence: Option<bool>,
}

/// `TracePacket.sequence_flags`.
pub const SEQ_INCREMENTAL_STATE_CLEARED: u32 = 1;
pub const SEQ_NEEDS_INCREMENTAL_STATE: u32 = 2;

#[derive(Clone, PartialEq, prost::Message)]
pub struct TrackEvent {
    #[prost(message, repeated, tag = "4")]
    pub debug_annotations: Vec<DebugAnnotation>,
    #[prost(enumeration = "TrackEventType", optional, tag = "9")]
    pub r#type: Option<i32>,
    #[prost(uint64, optional, tag = "10")]
    pub name_iid: Option<u64>,
    #[prost(uint64, optional, tag = "11")]
    pub track_uuid: Option<u64>,
    #[prost(string, repeated, tag = "22")]
    pub categories: Vec<String>,
    #[prost(string, optional, tag = "23")]
    pub name: Option<String>,
    #[prost(int64, optional, tag = "30")]
    pub counter_value: Option<i64>,
}

/// `TrackEvent.Type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum TrackEventType {
    Unspecified = 0,
    SliceBegin = 1,
    SliceEnd = 2,
    Instant = 3,
    Counter = 4,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct DebugAnnotation {
    #[prost(int64, optional, tag = "4")]
    pub int_value: Option<i64>,
    #[prost(string, optional, tag = "6")]
    pub string_value: Option<String>,
    #[prost(string, optional, tag = "10")]
    pub name: Option<String>,
}

/// `InternedData`: strings and structures a sequence's later packets
/// name by iid (slice names for the trace writer; functions, frames,
/// callstacks and mappings for the samples).
#[derive(Clone, PartialEq, prost::Message)]
pub struct InternedData {
    #[prost(message, repeated, tag = "2")]
    pub event_names: Vec<EventName>,
    #[prost(message, repeated, tag = "5")]
    pub function_names: Vec<InternedString>,
    #[prost(message, repeated, tag = "6")]
    pub frames: Vec<Frame>,
    #[prost(message, repeated, tag = "7")]
    pub callstacks: Vec<Callstack>,
    #[prost(message, repeated, tag = "16")]
    pub build_ids: Vec<InternedString>,
    #[prost(message, repeated, tag = "17")]
    pub mapping_paths: Vec<InternedString>,
    #[prost(message, repeated, tag = "19")]
    pub mappings: Vec<Mapping>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct EventName {
    #[prost(uint64, optional, tag = "1")]
    pub iid: Option<u64>,
    #[prost(string, optional, tag = "2")]
    pub name: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TracePacketDefaults {
    #[prost(message, optional, tag = "11")]
    pub track_event_defaults: Option<TrackEventDefaults>,
    #[prost(uint32, optional, tag = "58")]
    pub timestamp_clock_id: Option<u32>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TrackEventDefaults {
    #[prost(uint64, optional, tag = "11")]
    pub track_uuid: Option<u64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ClockSnapshot {
    #[prost(message, repeated, tag = "1")]
    pub clocks: Vec<Clock>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Clock {
    #[prost(uint32, optional, tag = "1")]
    pub clock_id: Option<u32>,
    #[prost(uint64, optional, tag = "2")]
    pub timestamp: Option<u64>,
    #[prost(bool, optional, tag = "3")]
    pub is_incremental: Option<bool>,
}

/// `BuiltinClock`s.
pub const CLOCK_REALTIME: u32 = 1;
pub const CLOCK_MONOTONIC: u32 = 3;
pub const CLOCK_BOOTTIME: u32 = 6;

#[derive(Clone, PartialEq, prost::Message)]
pub struct TrackDescriptor {
    #[prost(uint64, optional, tag = "1")]
    pub uuid: Option<u64>,
    #[prost(string, optional, tag = "2")]
    pub name: Option<String>,
    #[prost(message, optional, tag = "3")]
    pub process: Option<ProcessDescriptor>,
    #[prost(message, optional, tag = "4")]
    pub thread: Option<ThreadDescriptor>,
    #[prost(uint64, optional, tag = "5")]
    pub parent_uuid: Option<u64>,
    #[prost(message, optional, tag = "8")]
    pub counter: Option<CounterDescriptor>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ProcessDescriptor {
    #[prost(int32, optional, tag = "1")]
    pub pid: Option<i32>,
    #[prost(string, optional, tag = "6")]
    pub process_name: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ThreadDescriptor {
    #[prost(int32, optional, tag = "1")]
    pub pid: Option<i32>,
    #[prost(int32, optional, tag = "2")]
    pub tid: Option<i32>,
    #[prost(string, optional, tag = "5")]
    pub thread_name: Option<String>,
}

/// An empty `CounterDescriptor` makes a track a counter track.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CounterDescriptor {}

/// `ChromeEventBundle` (TracePacket field 5), for its `metadata`: name and
/// value pairs the trace processor lists in its `metadata` table (as
/// `cr-NAME`), where the session's summary goes.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ChromeEventBundle {
    #[prost(message, repeated, tag = "2")]
    pub metadata: Vec<ChromeMetadata>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ChromeMetadata {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub string_value: Option<String>,
    #[prost(int64, optional, tag = "4")]
    pub int_value: Option<i64>,
}

/// `InternedString` (`protos/perfetto/trace/profiling/profile_common.proto`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct InternedString {
    #[prost(uint64, optional, tag = "1")]
    pub iid: Option<u64>,
    #[prost(bytes = "vec", optional, tag = "2")]
    pub str: Option<Vec<u8>>,
}

/// `Mapping`: a module as a sampled process maps it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Mapping {
    #[prost(uint64, optional, tag = "1")]
    pub iid: Option<u64>,
    #[prost(uint64, optional, tag = "2")]
    pub build_id: Option<u64>,
    #[prost(uint64, optional, tag = "3")]
    pub start_offset: Option<u64>,
    #[prost(uint64, optional, tag = "4")]
    pub start: Option<u64>,
    #[prost(uint64, optional, tag = "5")]
    pub end: Option<u64>,
    #[prost(uint64, optional, tag = "6")]
    pub load_bias: Option<u64>,
    #[prost(uint64, repeated, packed = "false", tag = "7")]
    pub path_string_ids: Vec<u64>,
    #[prost(uint64, optional, tag = "8")]
    pub exact_offset: Option<u64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Frame {
    #[prost(uint64, optional, tag = "1")]
    pub iid: Option<u64>,
    #[prost(uint64, optional, tag = "2")]
    pub function_name_id: Option<u64>,
    #[prost(uint64, optional, tag = "3")]
    pub mapping_id: Option<u64>,
    #[prost(uint64, optional, tag = "4")]
    pub rel_pc: Option<u64>,
}

/// `Callstack`: frame iids from the root.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Callstack {
    #[prost(uint64, optional, tag = "1")]
    pub iid: Option<u64>,
    #[prost(uint64, repeated, packed = "false", tag = "2")]
    pub frame_ids: Vec<u64>,
}

/// `PerfSample` (`protos/perfetto/trace/profiling/profile_packet.proto`):
/// one sample, listed by the trace processor in `perf_sample`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PerfSample {
    #[prost(uint32, optional, tag = "1")]
    pub cpu: Option<u32>,
    #[prost(uint32, optional, tag = "2")]
    pub pid: Option<u32>,
    #[prost(uint32, optional, tag = "3")]
    pub tid: Option<u32>,
    #[prost(uint64, optional, tag = "4")]
    pub callstack_iid: Option<u64>,
    #[prost(int32, optional, tag = "5")]
    pub cpu_mode: Option<i32>,
}

/// `Profiling.CpuMode`.
pub const MODE_KERNEL: i32 = 1;
pub const MODE_USER: i32 = 2;

/// A `TracePacket` with only what a slice's begin or end carries (the
/// same field numbers, so it is that packet on the wire): most of a trace
/// is these, and a message of five fields encodes several times faster
/// than the whole `TracePacket`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SlicePacket {
    #[prost(uint64, optional, tag = "8")]
    pub timestamp: Option<u64>,
    #[prost(uint32, optional, tag = "10")]
    pub trusted_packet_sequence_id: Option<u32>,
    #[prost(message, optional, tag = "11")]
    pub track_event: Option<SliceEvent>,
    #[prost(message, optional, tag = "12")]
    pub interned_data: Option<InternedData>,
    #[prost(uint32, optional, tag = "13")]
    pub sequence_flags: Option<u32>,
    #[prost(uint32, optional, tag = "58")]
    pub timestamp_clock_id: Option<u32>,
}

/// The `TrackEvent` of a [`SlicePacket`]: its type and interned name.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SliceEvent {
    #[prost(enumeration = "TrackEventType", optional, tag = "9")]
    pub r#type: Option<i32>,
    #[prost(uint64, optional, tag = "10")]
    pub name_iid: Option<u64>,
}

use prost::Message;

impl SlicePacket {
    /// This packet framed as `Trace.packet`, appended to `out`: the bytes
    /// prost writes (the tests compare them), written directly. A trace is
    /// mostly these, and prost's general encoder (sizes computed, then the
    /// fields walked again) took a quarter of the writer's time. Packets
    /// with interned data go through prost.
    pub fn encode_framed(&self, out: &mut Vec<u8>) {
        if self.interned_data.is_some() {
            out.push(0x0a);
            out.extend_from_slice(&self.encode_length_delimited_to_vec());
            return;
        }
        // The packet is at most 2 + 10 + 1 + 5 + 2 + (2 + 10 + 1 + 10)
        // + 1 + 5 + 2 + 5 = 56 bytes, its event at most 23: each length
        // is one byte, written once the contents are.
        out.reserve(64);
        out.push(0x0a);
        let packet_at = out.len();
        out.push(0);
        if let Some(t) = self.timestamp {
            field(out, &[8 << 3], t);
        }
        if let Some(s) = self.trusted_packet_sequence_id {
            field(out, &[10 << 3], u64::from(s));
        }
        if let Some(e) = &self.track_event {
            out.push((11 << 3) | 2);
            let event_at = out.len();
            out.push(0);
            if let Some(t) = e.r#type {
                // An enum is an int32: a negative one takes ten bytes.
                field(out, &[9 << 3], i64::from(t) as u64);
            }
            if let Some(i) = e.name_iid {
                field(out, &[10 << 3], i);
            }
            out[event_at] = (out.len() - event_at - 1) as u8;
        }
        if let Some(f) = self.sequence_flags {
            field(out, &[13 << 3], u64::from(f));
        }
        if let Some(c) = self.timestamp_clock_id {
            // Field 58: a two-byte tag.
            field(out, &[0xd0, 0x03], u64::from(c));
        }
        out[packet_at] = (out.len() - packet_at - 1) as u8;
    }
}

/// A tag (already encoded) and a varint.
fn field(out: &mut Vec<u8>, tag: &[u8], mut v: u64) {
    out.extend_from_slice(tag);
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn slice_packets_are_the_bytes_prost_writes(
            timestamp in proptest::option::of(any::<u64>()),
            seq in proptest::option::of(any::<u32>()),
            event in proptest::option::of((proptest::option::of(any::<i32>()), proptest::option::of(any::<u64>()))),
            clock in proptest::option::of(any::<u32>()),
            flags in proptest::option::of(any::<u32>()),
            interned in any::<bool>(),
        ) {
            let p = SlicePacket {
                timestamp,
                trusted_packet_sequence_id: seq,
                track_event: event.map(|(t, i)| SliceEvent { r#type: t, name_iid: i }),
                interned_data: interned.then(|| InternedData {
                    event_names: vec![EventName { iid: Some(1), name: Some("work".into()) }],
                    ..Default::default()
                }),
                sequence_flags: flags,
                timestamp_clock_id: clock,
            };
            let mut ours = Vec::new();
            p.encode_framed(&mut ours);
            let mut theirs = vec![0x0a];
            p.encode_length_delimited(&mut theirs).unwrap();
            prop_assert_eq!(ours, theirs);
        }
    }
}

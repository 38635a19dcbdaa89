//! `Consumer`: drains the event ring (the protocol is on
//! `telco_abi::region::RingHeader`). It takes the ring's place and size
//! from the artifact, never from the region, keeps its own tail, checks
//! each record's length and stops at the first bad one with an ERROR
//! (`Consumer::corrupt`): the target may write anything there. It formats
//! `printf` events by calling the blob's own `rt_format` with formats from
//! the artifact, and publishes the ring's tail in steps (1/8 of the ring,
//! at most 256 KB), not per record: each store takes the cache line away
//! from the producers. With `--chrome` or `--perfetto` it feeds the trace
//! writer (`crate::feed`).

use super::*;
use crate::os::sys::ExecMemory;
use crate::render;
use std::collections::HashSet;
use std::io::Write;
use std::sync::atomic::Ordering;
use telco_abi::artifact::Artifact;
use telco_abi::region::{self as abi, EventHeader};

/// Formats events: printf through the blob's own formatter, histograms,
/// errors and warnings.
pub(super) struct Consumer<'a> {
    pub(super) artifact: &'a Artifact,
    pub(super) region: &'a Region,
    pub(super) format: FormatFn,
    pub(super) out: std::io::BufWriter<Box<dyn Write + Send>>,
    pub(super) messages: Box<dyn Write + Send>,
    pub(super) warned: HashSet<Vec<u8>>,
    pub(super) buf: Vec<u8>,
    pub(super) traces: Option<crate::feed::Feed>,
    /// `--flight-recorder`: what it keeps besides the calls, its dumps.
    pub(super) flight: Option<crate::flight::Flight>,
    /// `-w`: the script's `warn()` messages are not printed.
    pub(super) suppress_warnings: bool,
    /// The ring's next record: the consumer's own count (the ring header
    /// is the target's to scribble on).
    pub(super) tail: u64,
    /// The target corrupted the ring: what was found (no more records are
    /// read).
    pub(super) corrupted: Option<String>,
    /// The rings of the session's other trust domains (`domains.rs`), as
    /// they appear; drained after the session's own, each with its own
    /// tail, each given up alone when its processes corrupt it.
    pub(super) rings: Vec<Ring>,
}

/// A trust domain's region, as the consumer drains it.
pub(super) struct Ring {
    pub(super) region: std::sync::Arc<Region>,
    pub(super) tail: u64,
    pub(super) corrupted: Option<String>,
}

impl Ring {
    pub(super) fn new(region: std::sync::Arc<Region>, a: &Artifact) -> Ring {
        let tail =
            region.u64_at(a.ring_off as usize + core::mem::offset_of!(abi::RingHeader, tail)).load(Ordering::Relaxed);
        Ring { region, tail, corrupted: None }
    }
}

pub(super) fn read_u32(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4).map_or(0, |s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

pub(super) fn read_i64(b: &[u8], at: usize) -> i64 {
    b.get(at..at + 8).map_or(0, |s| i64::from_le_bytes([s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]]))
}

/// A `u32` length and bytes, padded to 8: (bytes, size in the payload).
pub(super) fn read_str(b: &[u8], at: usize) -> (&[u8], usize) {
    let n = read_u32(b, at) as usize;
    let s = b.get(at + 4..at + 4 + n).unwrap_or(&[]);
    (s, (4 + n).next_multiple_of(8))
}

/// `n` [`abi::SpanEntry`]s (an `EV_SPANS` payload, or a thread's stage).
pub(super) fn spans(c: &mut crate::feed::Feed, b: &[u8], n: usize) -> Result<(), std::io::Error> {
    c.spans(&b[..(n * abi::SPAN_ENTRY_SIZE).min(b.len())])
}

impl<'a> Consumer<'a> {
    /// The session is over: the calls still staged in the threads' span
    /// stages (fewer than a batch each) go to the trace, and the stages
    /// are emptied. A thread inside `rt_span` at this very moment (a
    /// target that runs on after detach) may add its last call after
    /// this: that call is not in the trace.
    pub(super) fn take_stages(&mut self) -> Result<(), std::io::Error> {
        let main = self.region;
        self.take_stages_of(main)?;
        for r in std::mem::take(&mut self.rings) {
            self.take_stages_of(&r.region)?;
            self.rings.push(r);
        }
        Ok(())
    }

    fn take_stages_of(&mut self, region: &Region) -> Result<(), std::io::Error> {
        let a = self.artifact;
        let Some(c) = &mut self.traces else { return Ok(()) };
        if a.span_batch == 0 {
            return Ok(());
        }
        for i in 0..a.nthreads as usize {
            let st = a.spans_off as usize + i * a.span_stride as usize;
            // Acquire: the entries before the count that covers them.
            let n = (region.u32_at(st).load(Ordering::Acquire) as usize).min(a.span_batch as usize);
            if n == 0 {
                continue;
            }
            // SAFETY: the stage lies in the region (layout.rs).
            let b = unsafe {
                std::slice::from_raw_parts(region.base().add(st + abi::SPAN_STAGE_HEADER), n * abi::SPAN_ENTRY_SIZE)
            };
            spans(c, b, n)?;
            region.u32_at(st).store(0, Ordering::Relaxed);
        }
        Ok(())
    }

    /// `--flight-recorder`: write the dumps asked for (`crate::flight`),
    /// from the session's region and its other domains'.
    pub(super) fn flight_dumps(&mut self, summary: crate::feed::Summary) {
        let Some(f) = &mut self.flight else { return };
        let requests = crate::flight::take_requests();
        let regions: Vec<&Region> = std::iter::once(self.region).chain(self.rings.iter().map(|r| &*r.region)).collect();
        if requests.is_empty() {
            f.stale.check(&regions);
            return;
        }
        let _ = self.out.flush();
        // Copied, the history goes on (the holds let go), then written.
        let held: Vec<u64> = regions.iter().map(|r| crate::flight::held(r)).collect();
        let taken: Vec<crate::flight::Taken> =
            requests.iter().filter_map(|r| f.take(&regions, self.artifact, r)).collect();
        for (r, h) in regions.iter().zip(held) {
            crate::flight::release(r, h);
        }
        for t in taken {
            f.dump(t, self.artifact, summary, &mut *self.messages);
        }
    }

    /// Process every committed record of every ring; returns whether
    /// there was any.
    pub(super) fn drain(&mut self) -> Result<bool, std::io::Error> {
        let main = self.region;
        let mut any = self.drain_ring(main)?;
        let mut rings = std::mem::take(&mut self.rings);
        for r in &mut rings {
            // The ring's own tail and state stand in for the session's.
            std::mem::swap(&mut self.tail, &mut r.tail);
            std::mem::swap(&mut self.corrupted, &mut r.corrupted);
            let got = self.drain_ring(&r.region);
            std::mem::swap(&mut self.tail, &mut r.tail);
            std::mem::swap(&mut self.corrupted, &mut r.corrupted);
            match got {
                Ok(g) => any |= g,
                Err(e) => {
                    self.rings = rings;
                    return Err(e);
                }
            }
        }
        self.rings = rings;
        Ok(any)
    }

    /// A trust domain's ring that its processes corrupted: what was found.
    pub(super) fn domain_damage(&self) -> Option<&str> {
        self.rings.iter().find_map(|r| r.corrupted.as_deref())
    }

    /// Process every committed record of `region`'s ring.
    fn drain_ring(&mut self, region: &Region) -> Result<bool, std::io::Error> {
        if self.corrupted.is_some() {
            return Ok(false);
        }
        let ring = self.artifact.ring_off as usize;
        let base = region.base();
        let tail_at = ring + core::mem::offset_of!(abi::RingHeader, tail);
        // Where the ring is and how large: the artifact's word, never the
        // region's (which the target can overwrite).
        let size = self.artifact.ring_size;
        let data_off = (ring + core::mem::size_of::<abi::RingHeader>()).next_multiple_of(abi::PART_ALIGN as usize);
        if !size.is_power_of_two() || data_off as u64 + size > self.artifact.region_size {
            self.corrupt("the artifact's ring does not fit its region (an internal error: please report it)".into())?;
            return Ok(false);
        }
        let mut any = false;
        // The tail is published in steps, not per record: every store
        // takes its cache line away from the producers, whose next
        // reservation then misses on it.
        let step = (size / 8).min(256 << 10);
        let mut tail = self.tail;
        let mut published = tail;
        loop {
            let pos = (tail & (size - 1)) as usize;
            let off = data_off + pos;
            // Acquire: pairs with the producer's Release store of the
            // committed size word.
            let word = region.u32_at(off).load(Ordering::Acquire);
            if word & abi::COMMITTED == 0 {
                break;
            }
            let len = (word & !abi::COMMITTED) as usize;
            // A record is whole, 8-aligned, holds its header and never
            // wraps; anything else is the target's doing. The padding to
            // the end of the data area is the exception: as short as 8
            // bytes (its size and kind).
            let fits = len >= 8 && len.is_multiple_of(8) && pos + len <= size as usize;
            // SAFETY: with `fits`, the record's first 8 bytes (size, kind)
            // lie inside the data area.
            let kind = if fits { unsafe { std::ptr::read_unaligned(base.add(off + 4).cast::<u16>()) } } else { 0 };
            let pad = kind == abi::EV_PAD;
            if !fits || (len < abi::EVENT_HEADER_SIZE && !(pad && pos + len == size as usize)) {
                self.corrupt(format!(
                    "the target corrupted the event ring: a record of {len} bytes at region offset {off:#x}; the \
                     events from there on are discarded"
                ))?;
                break;
            }
            if !pad {
                // SAFETY: a committed record of `len` bytes lies inside the
                // data area (producers never wrap a record); we own it until
                // we advance the tail.
                let rec = unsafe { std::slice::from_raw_parts(base.add(off), len) };
                // SAFETY: every record but padding starts with an
                // EventHeader (len holds one, checked above).
                let h: EventHeader = unsafe { std::ptr::read_unaligned(rec.as_ptr().cast()) };
                if h.kind == abi::EV_SPANS {
                    // The bulk of a --chrome trace: no copy of the record.
                    if let Some(c) = &mut self.traces {
                        spans(c, rec.get(abi::EVENT_HEADER_SIZE..).unwrap_or(&[]), h.aux as usize)?;
                    }
                } else if h.kind == abi::EV_SPAN {
                    if let Some(c) = &mut self.traces {
                        c.span(h.tid, h.probe, h.ts, read_i64(rec, abi::EVENT_HEADER_SIZE).max(0) as u64)?;
                    }
                } else {
                    let payload = rec.get(abi::EVENT_HEADER_SIZE..).unwrap_or(&[]).to_vec();
                    self.event(&h, &payload)?;
                    if self.corrupted.is_some() {
                        break;
                    }
                }
            }
            // SAFETY: zero the consumed record so the next producer finds a
            // zero first word (see RingHeader).
            unsafe { std::ptr::write_bytes(base.add(off), 0, len) };
            tail += len as u64;
            if tail - published >= step {
                // Release: pairs with the producers' Acquire load of tail.
                region.u64_at(tail_at).store(tail, Ordering::Release);
                published = tail;
            }
            any = true;
        }
        self.tail = tail;
        if tail != published {
            region.u64_at(tail_at).store(tail, Ordering::Release);
        }
        if any {
            self.out.flush()?;
            if let Some(c) = &mut self.traces {
                c.flush()?;
            }
        }
        Ok(any)
    }

    /// Say once that the target corrupted what the consumer reads, and
    /// read no more of it.
    pub(super) fn corrupt(&mut self, what: String) -> Result<(), std::io::Error> {
        if self.corrupted.is_none() {
            self.out.flush()?;
            writeln!(self.messages, "ERROR: {}", crate::text::escape(what.as_bytes()))?;
            self.corrupted = Some(what);
        }
        Ok(())
    }

    pub(super) fn event(&mut self, h: &EventHeader, p: &[u8]) -> Result<(), std::io::Error> {
        match h.kind {
            abi::EV_PRINTF => {
                let n = self.printf(h.aux as usize, p)?;
                if self.corrupted.is_some() {
                    return Ok(());
                }
                if let Some(c) = &mut self.traces {
                    // One instant per printf, named by its first line.
                    let text = &self.buf[..n];
                    let name = text.split(|&b| b == b'\n').find(|l| !l.is_empty()).unwrap_or(b"");
                    let name = &name[..name.len().min(80)];
                    c.instant(h.tid, h.ts, "printf", name, Some(text));
                }
                if let Some(f) = &mut self.flight {
                    let text = &self.buf[..n];
                    let name = text.split(|&b| b == b'\n').find(|l| !l.is_empty()).unwrap_or(b"");
                    f.instant(h.tid, h.ts, "printf", &name[..name.len().min(80)], Some(text));
                }
                Ok(())
            }
            abi::EV_INSTANT => {
                if let Some(c) = &mut self.traces {
                    c.instant(h.tid, h.ts, "instant", read_str(p, 0).0, None);
                }
                if let Some(f) = &mut self.flight {
                    f.instant(h.tid, h.ts, "instant", read_str(p, 0).0, None);
                }
                Ok(())
            }
            abi::EV_NAMED_SPAN => {
                if let Some(c) = &mut self.traces {
                    c.named_span(h.tid, read_str(p, 8).0, read_i64(p, 0).max(0) as u64, h.ts)?;
                }
                if let Some(f) = &mut self.flight {
                    f.named_span(h.tid, read_str(p, 8).0, read_i64(p, 0).max(0) as u64, h.ts);
                }
                Ok(())
            }
            abi::EV_COUNTER => {
                if let Some(c) = &mut self.traces {
                    c.counter(h.ts, read_str(p, 8).0, read_i64(p, 0));
                }
                if let Some(f) = &mut self.flight {
                    f.counter(h.ts, read_str(p, 8).0, read_i64(p, 0));
                }
                Ok(())
            }
            abi::EV_ERROR => {
                let code = read_u32(p, 0);
                let (msg, _) = read_str(p, 4);
                let msg = if msg.is_empty() { abi::error_message(code).as_bytes().to_vec() } else { msg.to_vec() };
                // The message is the target's to write (the ring is
                // untrusted): escaped for the terminal, as every line of
                // the tracer's own (`text`).
                let mut line = b"ERROR: ".to_vec();
                line.extend_from_slice(&msg);
                if let Some(l) = self.artifact.locations.get(h.aux as usize) {
                    line.extend_from_slice(format!(" near {}:{}:{}", l.file, l.line, l.col).as_bytes());
                }
                let mut line = crate::text::escape(&line).into_owned().into_bytes();
                line.push(b'\n');
                self.out.flush()?;
                self.messages.write_all(&line)?;
                self.messages.flush()
            }
            abi::EV_WARN => {
                let (msg, _) = read_str(p, 0);
                // Like staprun: an identical warning is printed once (and
                // none with -w).
                // (Remembered up to 10,000 distinct ones: memory stays
                // bounded whatever the target sends.)
                let new = if self.warned.len() < 10_000 {
                    self.warned.insert(msg.to_vec())
                } else {
                    !self.warned.contains(msg)
                };
                if !self.suppress_warnings && new {
                    let mut line = b"WARNING: ".to_vec();
                    line.extend_from_slice(msg.strip_suffix(b"\n").unwrap_or(msg));
                    let mut line = crate::text::escape(&line).into_owned().into_bytes();
                    line.push(b'\n');
                    self.out.flush()?;
                    self.messages.write_all(&line)?;
                    self.messages.flush()?;
                }
                Ok(())
            }
            abi::EV_HIST => {
                let lo = read_i64(p, 8);
                let step = read_i64(p, 24);
                let nb = read_u32(p, 32) as usize;
                let at = core::mem::size_of::<abi::HistEvent>();
                // A log histogram has its fixed buckets, a linear one at
                // least 3 (under, one step, over); all of them in the record.
                let sound = match h.aux {
                    abi::HIST_LOG => nb == abi::HIST_LOG_BUCKETS as usize,
                    abi::HIST_LINEAR => nb >= 3 && step > 0,
                    _ => false,
                };
                if !sound || at + 8 * nb > p.len() {
                    return self.corrupt(format!(
                        "the target corrupted the event ring: a histogram of kind {} with {nb} buckets in a record of {} \
                         bytes; the events from there on are discarded",
                        h.aux,
                        p.len() + abi::EVENT_HEADER_SIZE
                    ));
                }
                let counts: Vec<i64> = (0..nb).map(|i| read_i64(p, at + 8 * i)).collect();
                self.out.write_all(render::histogram(h.aux, lo, step, &counts).as_bytes())
            }
            // Exit is seen through the header.
            abi::EV_EXIT => Ok(()),
            abi::EV_THREAD => {
                if let Some(c) = &mut self.traces {
                    // Its name now, while it most likely runs (the files
                    // are written later, when short-lived ones are gone).
                    let comm = crate::os::proc::thread_comm(h.aux as i32, h.tid as i32);
                    c.thread(h.tid, h.aux, comm);
                }
                if let Some(f) = &mut self.flight {
                    f.thread(h.tid, h.aux, crate::os::proc::thread_comm(h.aux as i32, h.tid as i32));
                }
                Ok(())
            }
            // No producer writes any other kind: the target forged it.
            kind => self.corrupt(format!(
                "the target corrupted the event ring: a record of unknown kind {kind}; the events from there on are \
                 discarded"
            )),
        }
    }

    /// Format a printf event into `buf` and write it out; its length.
    pub(super) fn printf(&mut self, id: usize, p: &[u8]) -> Result<usize, std::io::Error> {
        let (Some(&fmt_off), Some(kinds)) = (self.artifact.formats.get(id), self.artifact.format_args.get(id)) else {
            self.corrupt(format!(
                "the target corrupted the event ring: a printf of format {id}, of which the script has {}; the events \
                 from there on are discarded",
                self.artifact.formats.len()
            ))?;
            return Ok(0);
        };
        let mut strings: Vec<Vec<u8>> = Vec::new();
        let mut at = 0;
        let mut raw: Vec<(bool, i64)> = Vec::new();
        for &is_str in kinds {
            if is_str {
                let (s, n) = read_str(p, at);
                let mut v = s.to_vec();
                v.push(0);
                strings.push(v);
                raw.push((true, strings.len() as i64 - 1));
                at += n;
            } else {
                raw.push((false, read_i64(p, at)));
                at += 8;
            }
        }
        let args: Vec<i64> =
            raw.iter().map(|&(s, v)| if s { strings[v as usize].as_ptr() as i64 } else { v }).collect();
        // Room for the longest possible result: every conversion at most
        // two widths/precisions of 4096 plus a string or a 64-bit number.
        let cap = 64 + p.len() + 16 * 1024 * (kinds.len() + 1) + self.fmt_len(fmt_off);
        self.buf.resize(cap, 0);
        // The format as the artifact encoded it, not the region's copy
        // (which the target can overwrite).
        let Some(fmt) = self.artifact.init_at(fmt_off).map(<[u8]>::as_ptr) else {
            return Ok(0);
        };
        // SAFETY: `fmt` is an encoded format in the artifact's own bytes
        // (well formed: pass 3 wrote it, and it ends inside them), args
        // point at NUL-terminated strings that outlive the call, and buf
        // has cap bytes. rt_format never writes past cap.
        let n = (self.format)(self.buf.as_mut_ptr(), cap as i64, fmt, args.as_ptr(), args.len() as i64);
        let n = (n.max(0) as usize).min(cap);
        self.out.write_all(&self.buf[..n])?;
        Ok(n)
    }

    /// Length of an encoded format's text, for sizing the output buffer.
    pub(super) fn fmt_len(&self, off: u64) -> usize {
        self.artifact.init_at(off).map_or(0, |b| b.len().min(1 << 20))
    }
}

/// Format every pending event of `region` into text (stdout and stderr
/// lines together), with `code` a local copy of the artifact's blob (for
/// `rt_format`). For tests and tools; sessions use a consumer thread.
pub fn drain_text(artifact: &Artifact, region: &Region, code: &ExecMemory) -> Result<String, std::io::Error> {
    let buf = SharedBuf::default();
    let mut c = Consumer {
        artifact,
        region,
        // SAFETY: format_fn is rt_format's offset in the blob.
        format: unsafe { std::mem::transmute::<*const u8, FormatFn>(code.addr(artifact.format_fn)) },
        out: std::io::BufWriter::new(Box::new(buf.clone())),
        messages: Box::new(buf.clone()),
        warned: HashSet::new(),
        buf: Vec::new(),
        traces: None,
        flight: None,
        suppress_warnings: false,
        tail: region
            .u64_at(artifact.ring_off as usize + core::mem::offset_of!(abi::RingHeader, tail))
            .load(Ordering::Relaxed),
        corrupted: None,
        rings: Vec::new(),
    };
    c.drain()?;
    c.out.flush()?;
    drop(c);
    let v = buf.0.lock().map(|v| v.clone()).unwrap_or_default();
    Ok(String::from_utf8_lossy(&v).into_owned())
}

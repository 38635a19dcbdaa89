//! Calls in the order of their begin and end events, from calls that
//! arrive in the order they returned.
//!
//! The target reports a call when it returns (start and end time in
//! one record), so a thread's inner calls arrive before the call that
//! holds them. Perfetto's slices are begin/end pairs that must nest on
//! their track: the trace processor sorts events by time (ties keep their
//! order in the file) and an end closes the slice begun last. [`Order`]
//! keeps each thread's returned calls as a forest (in post-order, each
//! node knowing where its subtree starts) until no later call can hold
//! them, then writes each tree's begins and ends in pre-order: a parent's
//! begin before its first child's even in the same nanosecond, a child's
//! end before its parent's.
//!
//! Nothing says a call will never get a parent (the thread's depth is not
//! known), so a thread's trees are held until it has [`Order::held`]
//! calls waiting, then the oldest half is written; everything is written
//! when the session ends. A call that arrives after some of its
//! descendants were written (`main`, or a loop, probed around many calls)
//! begins strictly before the earliest of them (one nanosecond earlier if
//! they began in the same nanosecond), so the sort puts its begin first.
//! Memory stays bounded: at most `held` calls per thread and
//! [`Order::held_total`] in all.
//!
//! Times come from the target and need not be consistent (a thread moved
//! between cores, a clock that went back): a call is widened to hold
//! the calls it returned after and began before, and shifted so that it
//! starts no earlier than the end of the call before it, so the events
//! written always nest.

use std::collections::{HashMap, VecDeque};

/// Per-thread state by tid, with the last thread looked up remembered
/// (calls come in batches from one thread: most lookups need no hash).
pub struct ByTid<T> {
    items: Vec<(u32, T)>,
    index: HashMap<u32, usize, TidHash>,
    last: Option<(u32, usize)>,
}

impl<T> Default for ByTid<T> {
    fn default() -> Self {
        ByTid { items: Vec::new(), index: HashMap::with_hasher(TidHash::new()), last: None }
    }
}

/// A multiplicative hash of a tid, keyed per process (the tids come from
/// the target: a fixed hash would let it choose colliding ones). SipHash
/// cost a tenth of the writer's time.
#[derive(Clone, Copy)]
pub struct TidHash(u64);

impl TidHash {
    fn new() -> TidHash {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u8(0);
        TidHash(h.finish() | 1)
    }
}

impl std::hash::BuildHasher for TidHash {
    type Hasher = TidHasher;
    fn build_hasher(&self) -> TidHasher {
        TidHasher { key: self.0, h: 0 }
    }
}

pub struct TidHasher {
    key: u64,
    h: u64,
}

impl std::hash::Hasher for TidHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }
    fn write_u64(&mut self, v: u64) {
        self.h = (self.h ^ v ^ self.key).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29).wrapping_mul(self.key);
    }
    fn finish(&self) -> u64 {
        self.h ^ (self.h >> 32)
    }
}

impl<T> ByTid<T> {
    pub fn position(&mut self, tid: u32) -> Option<usize> {
        if let Some((t, i)) = self.last {
            if t == tid {
                return Some(i);
            }
        }
        let i = *self.index.get(&tid)?;
        self.last = Some((tid, i));
        Some(i)
    }

    pub fn insert(&mut self, tid: u32, v: T) -> usize {
        let i = self.items.len();
        self.items.push((tid, v));
        self.index.insert(tid, i);
        self.last = Some((tid, i));
        i
    }

    pub fn at(&mut self, i: usize) -> &mut T {
        &mut self.items[i].1
    }

    pub fn get(&mut self, tid: u32) -> Option<&mut T> {
        let i = self.position(tid)?;
        Some(self.at(i))
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn tid(&self, i: usize) -> u32 {
        self.items[i].0
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (u32, &mut T)> {
        self.items.iter_mut().map(|(t, v)| (*t, v))
    }

    pub fn clear(&mut self) {
        self.items.clear();
        self.index.clear();
        self.last = None;
    }
}

/// A begin or end event on a thread, in the order to write them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ev {
    Begin { tid: u32, ts: u64, probe: u16 },
    End { tid: u32, ts: u64 },
}

#[derive(Clone, Copy, Debug)]
struct Node {
    /// The call's start as reported, and where its begin is written (no
    /// later than its first descendant's).
    start: u64,
    begin: u64,
    end: u64,
    probe: u16,
    /// The absolute index of the first node of its subtree.
    first: u64,
    /// Its begin in the file's unit: converted, and strictly before the
    /// calls it holds that were written already.
    out_begin: u64,
}

#[derive(Default)]
struct Thread {
    /// Post-order; `nodes[0]` has absolute index `base`.
    nodes: VecDeque<Node>,
    base: u64,
    /// The trees held, by the absolute index of each root, oldest first.
    roots: VecDeque<u64>,
    /// Trees written with no parent yet, as (first begin, last end,
    /// first begin in the file's unit), oldest first: all older than the
    /// trees held.
    written: VecDeque<(u64, u64, u64)>,
}

impl Thread {
    fn node(&self, abs: u64) -> &Node {
        &self.nodes[(abs - self.base) as usize]
    }
}

pub struct Order {
    threads: ByTid<Thread>,
    /// Calls held per thread before the oldest half is written.
    pub held: usize,
    /// Calls held in all threads before every thread's are written.
    pub held_total: usize,
    /// Trees written without a parent remembered per thread; beyond, the
    /// oldest two are remembered as one (a call that began between them
    /// would then be drawn beside the later one, not around it).
    pub written_max: usize,
    total: usize,
    /// Times calls were written before a parent arrived (see the module
    /// doc).
    pub early: u64,
    /// Calls whose begin could not be put strictly before calls they hold
    /// that were written already (all within one unit of the file).
    pub misplaced: u64,
    /// Calls nested deeper than [`MAX_DEPTH`] in their tree: left out.
    pub too_deep: u64,
}

/// Levels of nesting Perfetto's trace processor keeps on a track: a begin
/// deeper than that is dropped by it, and its end then closes the wrong
/// slice. Deeper calls are left out of the file (and counted).
pub const MAX_DEPTH: usize = 512;

impl Default for Order {
    fn default() -> Self {
        Order::new(1 << 15, 1 << 20)
    }
}

impl Order {
    pub fn new(held: usize, held_total: usize) -> Order {
        Order {
            threads: ByTid::default(),
            held: held.max(2),
            held_total: held_total.max(2),
            written_max: 1 << 16,
            total: 0,
            early: 0,
            misplaced: 0,
            too_deep: 0,
        }
    }

    /// A call of `probe` on `tid` that ran from `start` to `end` (ticks:
    /// two calls of a thread never start or end in the same one); events
    /// that can be written now go to `out`, their times converted to the
    /// file's unit by `conv` (monotonic, and coarser: many ticks may give
    /// the same time).
    pub fn call(
        &mut self,
        tid: u32,
        probe: u16,
        start: u64,
        end: u64,
        conv: &impl Fn(u64) -> u64,
        out: &mut impl FnMut(Ev),
    ) {
        let i = match self.threads.position(tid) {
            Some(i) => i,
            None => self.threads.insert(tid, Thread::default()),
        };
        let t = self.threads.at(i);
        let (mut begin, mut end) = (start, end.max(start));
        let index = t.base + t.nodes.len() as u64;
        let mut first = index;
        // The begin in the file's unit: no later than the first child's,
        // strictly before what was written.
        let mut limit = u64::MAX;
        // The trees that began no earlier are this call's children...
        while let Some(&r) = t.roots.back() {
            let n = *t.node(r);
            if n.start < start {
                break;
            }
            (begin, end, first, limit) = (begin.min(n.begin), end.max(n.end), n.first, limit.min(n.out_begin));
            t.roots.pop_back();
        }
        // ...and so are those written already, if it began before them:
        // its begin then comes strictly first.
        if t.roots.is_empty() {
            while let Some(&(b, e, ob)) = t.written.back() {
                if b < start {
                    break;
                }
                (begin, end, limit) = (begin.min(b.saturating_sub(1)), end.max(e), limit.min(ob.saturating_sub(1)));
                t.written.pop_back();
            }
        }
        // Never overlapping the call before (inconsistent times).
        let before = match t.roots.back() {
            Some(&r) => Some(t.node(r).end),
            None => t.written.back().map(|w| w.1),
        };
        if let Some(e) = before.filter(|&e| begin < e) {
            begin = e;
            end = end.max(begin);
        }
        let mut out_begin = conv(begin).min(limit);
        // No room between the call before's end and what was written
        // (all in one unit of the file): the begin ties with a written
        // one and may be drawn inside it. Counted.
        if let Some(b) = before.map(conv).filter(|&b| out_begin < b) {
            out_begin = b;
            self.misplaced += 1;
        }
        t.nodes.push_back(Node { start, begin, end, probe, first, out_begin });
        t.roots.push_back(index);
        self.total += 1;
        if t.nodes.len() >= self.held {
            let keep = self.held / 2;
            self.total -= write_oldest(tid, t, keep, self.written_max, conv, out, &mut self.too_deep);
            self.early += 1;
        }
        if self.total >= self.held_total {
            for (tid, t) in self.threads.iter_mut() {
                self.total -= write_oldest(tid, t, 0, self.written_max, conv, out, &mut self.too_deep);
            }
            self.early += 1;
        }
    }

    /// The session is over: every call held, written.
    pub fn finish(&mut self, conv: &impl Fn(u64) -> u64, out: &mut impl FnMut(Ev)) {
        for (tid, t) in self.threads.iter_mut() {
            self.total -= write_oldest(tid, t, 0, self.written_max, conv, out, &mut self.too_deep);
        }
        self.threads.clear();
    }

    /// Every call held written now, as the session goes on (a stream
    /// that cannot wait for a caller that may never return): a call that
    /// later holds some of them is placed around them as for the calls
    /// written early (counted in [`Order::early`]).
    pub fn write_held(&mut self, conv: &impl Fn(u64) -> u64, out: &mut impl FnMut(Ev)) {
        let mut written = 0;
        for (tid, t) in self.threads.iter_mut() {
            written += write_oldest(tid, t, 0, self.written_max, conv, out, &mut self.too_deep);
        }
        self.total -= written;
        if written > 0 {
            self.early += 1;
        }
    }

    /// Calls held now.
    pub fn held_now(&self) -> usize {
        self.total
    }
}

/// Write `t`'s oldest trees until at most `keep` calls are held; each
/// joins the trees written without a parent. Returns the calls written.
fn write_oldest(
    tid: u32,
    t: &mut Thread,
    keep: usize,
    max_written: usize,
    conv: &impl Fn(u64) -> u64,
    out: &mut impl FnMut(Ev),
    too_deep: &mut u64,
) -> usize {
    let mut written = 0;
    let mut order: Vec<(u64, std::cmp::Reverse<u64>)> = Vec::new();
    while t.nodes.len() > keep {
        let Some(root) = t.roots.pop_front() else { break };
        let r = *t.node(root);
        let n = (root + 1 - r.first) as usize;
        write_tree(tid, t, r.first, root, &mut order, conv, out, too_deep);
        for _ in 0..n {
            t.nodes.pop_front();
        }
        t.base += n as u64;
        written += n;
        t.written.push_back((r.begin, r.end, r.out_begin));
    }
    while t.written.len() > max_written {
        let (Some(a), Some(b)) = (t.written.pop_front(), t.written.pop_front()) else { break };
        t.written.push_front((a.0.min(b.0), a.1.max(b.1), a.2.min(b.2)));
    }
    written
}

fn begin(tid: u32, n: &Node) -> Ev {
    Ev::Begin { tid, ts: n.out_begin, probe: n.probe }
}

/// One tree (absolute nodes `first..=root`) in pre-order: sorted by
/// where each subtree starts, an ancestor (larger index) before its
/// descendants; ends written as the walk leaves a subtree.
fn write_tree(
    tid: u32,
    t: &Thread,
    first: u64,
    root: u64,
    order: &mut Vec<(u64, std::cmp::Reverse<u64>)>,
    conv: &impl Fn(u64) -> u64,
    out: &mut impl FnMut(Ev),
    too_deep: &mut u64,
) {
    if first == root {
        let n = t.node(root);
        out(begin(tid, n));
        out(Ev::End { tid, ts: conv(n.end) });
        return;
    }
    order.clear();
    order.extend((first..=root).map(|i| (t.node(i).first, std::cmp::Reverse(i))));
    order.sort_unstable();
    let mut stack: Vec<u64> = Vec::new();
    for &(f, std::cmp::Reverse(i)) in order.iter() {
        // Leave the subtrees that do not hold node i.
        while let Some(&top) = stack.last() {
            if t.node(top).first <= f && i <= top {
                break;
            }
            stack.pop();
            if stack.len() < MAX_DEPTH {
                out(Ev::End { tid, ts: conv(t.node(top).end) });
            }
        }
        if stack.len() < MAX_DEPTH {
            out(begin(tid, t.node(i)));
        } else {
            *too_deep += 1;
        }
        stack.push(i);
    }
    while let Some(top) = stack.pop() {
        if stack.len() < MAX_DEPTH {
            out(Ev::End { tid, ts: conv(t.node(top).end) });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What the trace processor makes of the events: sorted by time
    /// (ties in file order), an end closing the slice begun last. Per
    /// slice: (tid, probe, depth, begin, end).
    fn replay(evs: &[Ev]) -> Vec<(u32, u16, usize, u64, u64)> {
        let ts = |e: &Ev| match *e {
            Ev::Begin { ts, .. } | Ev::End { ts, .. } => ts,
        };
        let mut idx: Vec<usize> = (0..evs.len()).collect();
        idx.sort_by_key(|&i| (ts(&evs[i]), i));
        let mut open: HashMap<u32, Vec<(u16, u64)>> = HashMap::new();
        let mut out = Vec::new();
        for i in idx {
            match evs[i] {
                Ev::Begin { tid, probe, ts } => open.entry(tid).or_default().push((probe, ts)),
                Ev::End { tid, ts } => {
                    let st = open.get_mut(&tid).expect("an end without a begin");
                    let (probe, b) = st.pop().expect("an end without a begin");
                    out.push((tid, probe, st.len(), b, ts));
                }
            }
        }
        assert!(open.values().all(Vec::is_empty), "unclosed slices");
        out.sort();
        out
    }

    /// Calls of a random call tree per thread, as the target reports
    /// them (at return), threads interleaved.
    fn calls(shape: &[(u8, u8, u8)], min_gap: u64) -> (Vec<(u32, u16, u64, u64)>, Vec<(u32, u16, usize, u64, u64)>) {
        // shape: (thread, action, gap): action 0..2 call, 3..4 return.
        let mut clock: HashMap<u32, u64> = HashMap::new();
        let mut stacks: HashMap<u32, Vec<(u16, u64)>> = HashMap::new();
        let mut reported = Vec::new();
        let mut expect = Vec::new();
        let ret = |tid: u32, now: u64, st: &mut Vec<(u16, u64)>, r: &mut Vec<_>, x: &mut Vec<_>| {
            let (p, s) = st.pop().unwrap();
            r.push((tid, p, s, now));
            x.push((tid, p, st.len(), s, now));
        };
        for (k, &(th, action, gap)) in shape.iter().enumerate() {
            let tid = u32::from(th % 3) + 100;
            let now = clock.entry(tid).or_insert(1000);
            *now += min_gap + u64::from(gap % 4); // ticks: never the same twice
            let now = *now;
            let st = stacks.entry(tid).or_default();
            if action % 5 < 3 || st.is_empty() {
                st.push((k as u16, now));
            } else {
                ret(tid, now, st, &mut reported, &mut expect);
            }
        }
        // Every call returns in the end (a call that never returns is
        // not reported, and its children are then at a depth one less).
        let mut tids: Vec<u32> = stacks.keys().copied().collect();
        tids.sort_unstable();
        for tid in tids {
            let st = stacks.get_mut(&tid).unwrap();
            let mut now = clock[&tid];
            while !st.is_empty() {
                now += min_gap;
                ret(tid, now, st, &mut reported, &mut expect);
            }
        }
        expect.sort();
        (reported, expect)
    }

    fn run(
        reported: &[(u32, u16, u64, u64)],
        held: usize,
        total: usize,
        conv: &impl Fn(u64) -> u64,
    ) -> (Vec<Ev>, u64, u64) {
        let mut o = Order::new(held, total);
        o.written_max = 1 << 20;
        let mut evs = Vec::new();
        for &(tid, p, s, e) in reported {
            o.call(tid, p, s, e, conv, &mut |ev| evs.push(ev));
        }
        o.finish(conv, &mut |ev| evs.push(ev));
        assert_eq!(o.held_now(), 0);
        (evs, o.early, o.misplaced)
    }

    #[test]
    fn nested_calls_come_out_begin_first() {
        let mut o = Order::default();
        let mut evs = Vec::new();
        // leaf 10..20 and 20..20 inside mid 10..30 inside top 5..40.
        for (p, s, e) in [(2, 10, 20), (2, 20, 20), (1, 10, 30), (0, 5, 40)] {
            o.call(7, p, s, e, &|t| t, &mut |ev| evs.push(ev));
        }
        assert!(evs.is_empty(), "held until the session ends");
        o.finish(&|t| t, &mut |ev| evs.push(ev));
        use Ev::*;
        assert_eq!(
            evs,
            [
                Begin { tid: 7, ts: 5, probe: 0 },
                Begin { tid: 7, ts: 10, probe: 1 },
                Begin { tid: 7, ts: 10, probe: 2 },
                End { tid: 7, ts: 20 },
                Begin { tid: 7, ts: 20, probe: 2 },
                End { tid: 7, ts: 20 },
                End { tid: 7, ts: 30 },
                End { tid: 7, ts: 40 },
            ]
        );
    }

    #[test]
    fn a_parent_after_its_children_were_written_begins_before_them() {
        // At most 4 held: the loop's calls are written before the loop
        // returns; the loop begins in the same ns as its first call.
        for (unit, first) in [(1, 99), (10, 9)] {
            let conv = |t: u64| t / unit;
            let mut o = Order::new(4, 100);
            let mut evs = Vec::new();
            for i in 0..10u64 {
                o.call(1, 1, 100 + i * 10, 105 + i * 10, &conv, &mut |ev| evs.push(ev));
            }
            o.call(1, 0, 100, 200, &conv, &mut |ev| evs.push(ev));
            o.finish(&conv, &mut |ev| evs.push(ev));
            assert!(o.early > 0);
            let slices = replay(&evs);
            assert_eq!(slices.iter().filter(|s| s.2 == 1).count(), 10, "{slices:?}");
            // One unit earlier than its first call, converted.
            assert_eq!(slices[0], (1, 0, 0, first, 200 / unit), "{slices:?}");
        }
    }

    #[test]
    fn inconsistent_times_still_nest() {
        let mut o = Order::default();
        let mut evs = Vec::new();
        // The second call began before the first and ended before it:
        // it holds it, to its end. The third ends before it begins. The
        // fourth begins inside the third without holding it.
        for (p, s, e) in [(0, 100, 200), (1, 50, 60), (2, 300, 250), (3, 299, 400)] {
            o.call(1, p, s, e, &|t| t, &mut |ev| evs.push(ev));
        }
        o.finish(&|t| t, &mut |ev| evs.push(ev));
        assert_eq!(replay(&evs), [(1, 0, 1, 100, 200), (1, 1, 0, 50, 200), (1, 2, 1, 300, 300), (1, 3, 0, 299, 400)]);
    }

    #[test]
    fn calls_deeper_than_the_viewer_keeps_are_left_out_and_counted() {
        let mut o = Order::default();
        let mut evs = Vec::new();
        // 600 nested calls, the innermost first.
        for d in 0..600u64 {
            o.call(1, d as u16, 1000 - d, 2000 + d, &|t| t, &mut |ev| evs.push(ev));
        }
        o.finish(&|t| t, &mut |ev| evs.push(ev));
        let slices = replay(&evs);
        assert_eq!(slices.len(), MAX_DEPTH);
        assert_eq!(o.too_deep, 600 - MAX_DEPTH as u64);
        assert!(slices.iter().all(|s| 599 - usize::from(s.1) == s.2), "each at its own depth");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        #[test]
        fn every_call_comes_back_at_its_depth(
            shape in proptest::collection::vec((0u8..3, 0u8..5, 0u8..4), 0..400),
            held in 2usize..40,
            unit in 1u64..4,
            crowded in any::<bool>(),
        ) {
            // Times written in a coarser unit than the calls' ticks, as
            // ns are coarser than TSC ticks: many events in one unit, and
            // when `crowded`, several in a row.
            let (reported, expect) = calls(&shape, if crowded { 1 } else { unit });
            let conv = |t: u64| t / unit;
            let expect: Vec<_> = expect.iter().map(|&(t, p, d, b, e)| (t, p, d, conv(b), conv(e))).collect();
            // Without early writes: exact.
            let (evs, early, misplaced) = run(&reported, 1 << 20, 1 << 20, &conv);
            prop_assert_eq!((early, misplaced), (0, 0));
            prop_assert_eq!(replay(&evs), expect.clone());
            // With them: the same calls at the same depths; a begin may
            // move earlier (a unit for each level of calls written before
            // their parent came). Always nested (`replay` checks); exact
            // unless a call was counted misplaced, which needs three
            // events in one unit.
            let (evs, _, misplaced) = run(&reported, held, 3 * held, &conv);
            let got = replay(&evs);
            prop_assert_eq!(got.len(), expect.len());
            if !crowded {
                prop_assert_eq!(misplaced, 0);
            }
            if misplaced == 0 {
                let key = |s: &(u32, u16, usize, u64, u64)| (s.0, s.1);
                let mut g: Vec<_> = got.clone();
                let mut x: Vec<_> = expect.clone();
                g.sort_by_key(key);
                x.sort_by_key(key);
                for (a, b) in g.iter().zip(&x) {
                    prop_assert_eq!((a.0, a.1, a.2, a.4), (b.0, b.1, b.2, b.4));
                    prop_assert!(a.3 <= b.3 && b.3 - a.3 <= shape.len() as u64, "{:?} vs {:?}", a, b);
                }
            }
        }
    }
}

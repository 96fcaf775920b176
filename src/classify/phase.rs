//! The phase fallback: where each allocation stands relative to the free-memory queries of
//! its device, for servers no engine pack knows. Pure: it reads a recorded sequence of
//! allocations and queries (one device of one process, ordered by `seq`) and returns a
//! [`Phase`] per allocation. The definitions (docs/categories.md, "Phase fallback"):
//!
//! - A query counts when it succeeded and reported a free figure `F > 0`. Its *epoch* is the
//!   allocations made after it and before the next counting query of the device.
//! - An allocation is *retained* by an epoch when it is still allocated at the end of the
//!   epoch (never freed, or freed after the next query). It is *host-touched* when anything
//!   was copied into it from host memory, *host-filled* when at least half of its bytes (and
//!   at least one) were.
//! - The *burst* of a query: in its epoch, the first allocation of at least 1 MiB that is not
//!   host-touched starts it, if it is retained (else the query has no burst); allocations
//!   before it are not part of it. The burst then takes the following allocations of the
//!   epoch while they are retained, not host-touched, not smaller than 1/8 of the largest one
//!   taken so far, and no free happens between two of them. (A pool is built, not loaded, and
//!   made of large tensors: the first input copied from the host, the first temporary given
//!   back, or the first activation of a forward pass, a fraction of a pool tensor, ends it.)
//! - The *sizing query* is the query whose burst takes the largest share of the free memory
//!   it reported, among those whose burst takes more than half of it (`2 * burst > F`);
//!   ties go to the later query. There may be none.
//!
//! An allocation is then `before_sizing` when it was made before the sizing query (every
//! allocation is, when there is none), `in_burst` when it belongs to the sizing query's
//! burst, and `after_first_probe` when some counting query came before it.

/// Smallest first allocation of a burst.
pub const BURST_MIN_FIRST: u64 = 1 << 20;
/// A burst ends at an allocation smaller than its largest one so far divided by this.
pub const BURST_DROP: u64 = 8;

/// One allocation as the analysis needs it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocRecord {
    pub seq: u64,
    pub bytes: u64,
    pub h2d_bytes: u64,
    /// When it was freed (None: still allocated).
    pub freed_seq: Option<u64>,
}

impl AllocRecord {
    pub fn host_filled(&self) -> bool {
        self.h2d_bytes > 0 && self.h2d_bytes.saturating_mul(2) >= self.bytes
    }
}

/// One free-memory query.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProbeRecord {
    pub seq: u64,
    /// What it reported (None: failed, or NULL out-pointer).
    pub free: Option<u64>,
}

/// Where an allocation stands relative to the queries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Phase {
    pub after_first_probe: bool,
    pub before_sizing: bool,
    pub in_burst: bool,
}

/// The sizing query and its burst.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizing {
    /// Index of the query in the `probes` given to [`analyze`].
    pub probe: usize,
    pub reported_free: u64,
    pub burst_bytes: u64,
    pub burst_allocs: usize,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Analysis {
    pub sizing: Option<Sizing>,
    /// One per allocation, in the order given.
    pub phases: Vec<Phase>,
}

/// Analyse one device's record. Inputs need not be sorted.
pub fn analyze(allocs: &[AllocRecord], probes: &[ProbeRecord]) -> Analysis {
    let mut order: Vec<usize> = (0..allocs.len()).collect();
    order.sort_by_key(|&i| allocs[i].seq);
    let mut counting: Vec<usize> = (0..probes.len()).filter(|&i| probes[i].free.is_some_and(|f| f > 0)).collect();
    counting.sort_by_key(|&i| probes[i].seq);
    let mut frees: Vec<u64> = allocs.iter().filter_map(|a| a.freed_seq).collect();
    frees.sort_unstable();
    let free_between = |lo: u64, hi: u64| {
        let at = frees.partition_point(|&f| f <= lo);
        frees.get(at).is_some_and(|&f| f < hi)
    };

    // (share numerator, denominator, probe index, burst members as positions in `order`)
    let mut best: Option<(u64, u64, usize, std::ops::Range<usize>)> = None;
    for (k, &pi) in counting.iter().enumerate() {
        let (start, free) = (probes[pi].seq, probes[pi].free.unwrap_or(0));
        let end = counting.get(k + 1).map_or(u64::MAX, |&n| probes[n].seq);
        let retained = |a: &AllocRecord| a.freed_seq.is_none_or(|f| f > end);
        let first = order.partition_point(|&i| allocs[i].seq <= start);
        let last = order.partition_point(|&i| allocs[i].seq < end);
        let Some(b0) =
            (first..last).find(|&p| allocs[order[p]].bytes >= BURST_MIN_FIRST && allocs[order[p]].h2d_bytes == 0)
        else {
            continue;
        };
        let head = &allocs[order[b0]];
        if !retained(head) {
            continue;
        }
        let (mut b1, mut bytes, mut largest) = (b0 + 1, head.bytes, head.bytes);
        while b1 < last {
            let (prev, a) = (&allocs[order[b1 - 1]], &allocs[order[b1]]);
            let small = a.bytes.saturating_mul(BURST_DROP) < largest;
            if a.h2d_bytes > 0 || !retained(a) || small || free_between(prev.seq, a.seq) {
                break;
            }
            bytes = bytes.saturating_add(a.bytes);
            largest = largest.max(a.bytes);
            b1 += 1;
        }
        if bytes.saturating_mul(2) <= free {
            continue;
        }
        // Compare bytes/free as fractions without floating point; later wins ties.
        let better = best
            .as_ref()
            .is_none_or(|(bn, bd, ..)| u128::from(bytes) * u128::from(*bd) >= u128::from(*bn) * u128::from(free));
        if better {
            best = Some((bytes, free, pi, b0..b1));
        }
    }

    let first_probe = counting.first().map(|&i| probes[i].seq);
    let sizing_seq = best.as_ref().map(|b| probes[b.2].seq);
    let mut phases: Vec<Phase> = allocs
        .iter()
        .map(|a| Phase {
            after_first_probe: first_probe.is_some_and(|s| a.seq > s),
            before_sizing: sizing_seq.is_none_or(|s| a.seq < s),
            in_burst: false,
        })
        .collect();
    let sizing = best.map(|(bytes, free, pi, members)| {
        for p in members.clone() {
            phases[order[p]].in_burst = true;
        }
        Sizing { probe: pi, reported_free: free, burst_bytes: bytes, burst_allocs: members.len() }
    });
    Analysis { sizing, phases }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    /// Builds a record in order: every call takes the next seq.
    #[derive(Default)]
    struct Rec {
        seq: u64,
        allocs: Vec<AllocRecord>,
        probes: Vec<ProbeRecord>,
        names: Vec<&'static str>,
    }

    impl Rec {
        fn next(&mut self) -> u64 {
            self.seq += 1;
            self.seq
        }
        fn probe(&mut self, free: u64) -> usize {
            let seq = self.next();
            self.probes.push(ProbeRecord { seq, free: Some(free) });
            self.probes.len() - 1
        }
        fn alloc(&mut self, name: &'static str, bytes: u64, filled: bool) -> usize {
            let seq = self.next();
            self.allocs.push(AllocRecord { seq, bytes, h2d_bytes: if filled { bytes } else { 0 }, freed_seq: None });
            self.names.push(name);
            self.allocs.len() - 1
        }
        fn free(&mut self, i: usize) {
            let seq = self.next();
            self.allocs[i].freed_seq = Some(seq);
        }
        fn run(&self) -> Analysis {
            analyze(&self.allocs, &self.probes)
        }
        fn in_burst(&self, a: &Analysis) -> Vec<&'static str> {
            (0..self.allocs.len()).filter(|&i| a.phases[i].in_burst).map(|i| self.names[i]).collect()
        }
        fn weights(&self, a: &Analysis) -> Vec<&'static str> {
            (0..self.allocs.len())
                .filter(|&i| {
                    a.phases[i].before_sizing && self.allocs[i].host_filled() && self.allocs[i].freed_seq.is_none()
                })
                .map(|i| self.names[i])
                .collect()
        }
    }

    /// SGLang's order (model_runner.py, ModelRunner.init_torch_distributed, load_model,
    /// ModelRunnerKVCacheMixin.profile_max_num_token / init_memory_pool): a probe before
    /// distributed init, one after it, one at the start of load_model, the weights with a
    /// repacking scratch freed again, a warm-up whose cached segments empty_cache releases
    /// before the sizing query, then the pool, a query before graph capture, the graphs.
    #[test]
    fn sglang_order() {
        let mut r = Rec::default();
        let total = 96 * GIB;
        r.probe(total - 512 * MIB);
        for _ in 0..4 {
            r.alloc("nccl", 32 * MIB, false);
        }
        r.probe(total - 700 * MIB);
        r.probe(total - 700 * MIB); // load_model: "Load weight begin. avail mem="
        let mut scratch = None;
        for i in 0..34 {
            r.alloc("weights", 2 * GIB, true);
            if i == 10 {
                scratch = Some(r.alloc("scratch", 512 * MIB, true));
            }
        }
        r.free(scratch.unwrap());
        r.probe(total - 69 * GIB); // post_model_load
        let warm: Vec<usize> = (0..3).map(|_| r.alloc("warmup", 20 * MIB, false)).collect();
        for w in warm {
            r.free(w); // empty_cache before the query
        }
        let sizing = r.probe(total - 69 * GIB); // profile_max_num_token
        r.alloc("probe-tensor", 2 * MIB, false); // torch.tensor(free).to(device) for the MIN all-reduce
        r.alloc("req_to_token", 512 * MIB, false);
        for _ in 0..64 {
            r.alloc("kv", 240 * MIB, false); // 15 GiB of the 27 GiB reported
        }
        r.alloc("free_pages", 2 * MIB, false);
        r.probe(total - 86 * GIB); // "Capture cuda graph begin"
        r.alloc("graph-static", 64 * MIB, false);
        r.alloc("graph-pool", 256 * MIB, false);
        let a = r.run();
        let s = a.sizing.expect("a sizing query");
        assert_eq!(s.probe, sizing);
        assert_eq!(s.burst_allocs, 66, "free_pages is under 1/8 of a KV tensor: not in the burst");
        assert_eq!(s.burst_bytes, 2 * MIB + 512 * MIB + 64 * 240 * MIB);
        let burst = r.in_burst(&a);
        assert!(burst.iter().all(|n| ["probe-tensor", "req_to_token", "kv"].contains(n)));
        let weights = r.weights(&a);
        assert_eq!(weights.len(), 34);
        assert!(weights.iter().all(|&n| n == "weights"), "the freed scratch is not kept");
        let i = r.names.iter().position(|&n| n == "graph-pool").unwrap();
        assert!(!a.phases[i].before_sizing && !a.phases[i].in_burst && a.phases[i].after_first_probe);
        let nccl = r.names.iter().position(|&n| n == "nccl").unwrap();
        assert!(a.phases[nccl].before_sizing && a.phases[nccl].after_first_probe);
    }

    /// vLLM's order (vllm/v1/worker/gpu_worker.py, Worker.init_device /
    /// determine_available_memory / initialize_from_config / compile_or_warm_up_model): NCCL,
    /// a query, the runner's persistent buffers, the weights, a query, a profile run whose
    /// memory is released again, a query, the KV cache tensors, a query, the graphs.
    #[test]
    fn vllm_order() {
        let mut r = Rec::default();
        let total = 80 * GIB;
        r.alloc("nccl", 64 * MIB, false);
        let first = r.probe(total - GIB);
        r.alloc("persistent", 40 * MIB, false);
        r.alloc("persistent", 8 * MIB, false);
        for _ in 0..20 {
            r.alloc("weights", 2 * GIB, true);
        }
        r.probe(total - 41 * GIB);
        let acts: Vec<usize> = (0..8).map(|_| r.alloc("activation", 512 * MIB, false)).collect();
        for a in acts {
            r.free(a);
        }
        let sizing = r.probe(total - 41 * GIB);
        for _ in 0..32 {
            r.alloc("kv", GIB, false);
        }
        r.probe(total - 73 * GIB);
        r.alloc("graph", 300 * MIB, false);
        let a = r.run();
        assert_eq!(a.sizing.map(|s| s.probe), Some(sizing));
        assert_eq!(r.in_burst(&a), ["kv"; 32]);
        assert_eq!(r.weights(&a), ["weights"; 20]);
        let n = r.names.iter().position(|&n| n == "nccl").unwrap();
        assert!(!a.phases[n].after_first_probe && a.phases[n].before_sizing);
        assert!(a.phases[r.names.iter().position(|&x| x == "persistent").unwrap()].after_first_probe);
        let _ = first;
    }

    /// A plain script: `model.to("cuda")` without any query, one query, a KV cache built by
    /// hand from it, then generation: the first input copied from the host ends the burst.
    #[test]
    fn plain_script_order() {
        let mut r = Rec::default();
        for _ in 0..10 {
            r.alloc("weights", 100 * MIB, true);
        }
        let q = r.probe(7 * GIB);
        for _ in 0..24 {
            r.alloc("kv", 240 * MIB, false);
        }
        r.alloc("input_ids", 2 * MIB, true);
        r.alloc("activation", 20 * MIB, false);
        let a = r.run();
        assert_eq!(a.sizing.map(|s| (s.probe, s.burst_allocs)), Some((q, 24)));
        assert_eq!(r.in_burst(&a), ["kv"; 24]);
        assert_eq!(r.weights(&a), ["weights"; 10]);
    }

    #[test]
    fn no_query_means_no_burst_and_everything_before_sizing() {
        let mut r = Rec::default();
        r.alloc("weights", 100 * MIB, true);
        r.alloc("kv", 900 * MIB, false);
        let a = r.run();
        assert_eq!(a.sizing, None);
        assert!(a.phases.iter().all(|p| p.before_sizing && !p.in_burst && !p.after_first_probe));
    }

    #[test]
    fn a_burst_must_take_more_than_half_of_what_was_reported() {
        let mut r = Rec::default();
        r.probe(10 * GIB);
        r.alloc("a", 5 * GIB, false);
        assert_eq!(r.run().sizing, None, "exactly half is not most");
        r.alloc("b", GIB, false);
        assert_eq!(r.run().sizing.map(|s| s.burst_allocs), Some(2));
    }

    #[test]
    fn what_ends_or_prevents_a_burst() {
        // Host-touched allocations before the first one built on the device are not part of it.
        let mut r = Rec::default();
        r.probe(10 * GIB);
        r.alloc("filled", 6 * GIB, true);
        r.alloc("kv", 6 * GIB, false);
        assert_eq!(r.in_burst(&r.run()), ["kv"]);
        // The first one built on the device is freed before the next query: no burst.
        let mut r = Rec::default();
        r.probe(10 * GIB);
        let t = r.alloc("tmp", 6 * GIB, false);
        r.alloc("kv", 6 * GIB, false);
        r.free(t);
        r.probe(GIB);
        assert_eq!(r.run().sizing, None);
        // Any copy from the host ends it, however small (the first input of a decode loop).
        let mut r = Rec::default();
        r.probe(10 * GIB);
        r.alloc("kv", 6 * GIB, false);
        let input = r.alloc("input_ids", 2 * MIB, false);
        r.allocs[input].h2d_bytes = 512;
        r.alloc("activation", 20 * MIB, false);
        assert_eq!(r.in_burst(&r.run()), ["kv"]);
        // An allocation under 1/8 of the largest so far ends it: a forward pass after the pool.
        let mut r = Rec::default();
        r.probe(10 * GIB);
        r.alloc("table", 2 * MIB, false);
        r.alloc("kv1", 3 * GIB, false);
        r.alloc("kv2", 3 * GIB, false);
        r.alloc("logits", 32 * MIB, false);
        r.alloc("kv3", 3 * GIB, false);
        assert_eq!(r.in_burst(&r.run()), ["table", "kv1", "kv2"]);
        // Small allocations before the first large one are skipped, not counted.
        let mut r = Rec::default();
        r.probe(10 * GIB);
        r.alloc("tiny", 4096, true);
        r.alloc("kv", 6 * GIB, false);
        assert_eq!(r.in_burst(&r.run()), ["kv"]);
        // A free between two members ends it.
        let mut r = Rec::default();
        r.probe(10 * GIB);
        let t = r.alloc("tmp", 512, false);
        r.alloc("kv1", 3 * GIB, false);
        r.free(t);
        r.alloc("kv2", 3 * GIB, false);
        assert_eq!(r.run().sizing, None, "3 of 10 before the free");
        // A member freed before the next query is not retained: ends it.
        let mut r = Rec::default();
        r.probe(10 * GIB);
        r.alloc("kv1", 6 * GIB, false);
        let x = r.alloc("x", 2 * GIB, false);
        r.alloc("kv2", GIB, false);
        r.free(x);
        r.probe(GIB);
        assert_eq!(r.in_burst(&r.run()), ["kv1"]);
        // Freed after the next query: still retained by its epoch.
        let mut r = Rec::default();
        r.probe(10 * GIB);
        let k = r.alloc("kv", 6 * GIB, false);
        r.probe(4 * GIB);
        r.free(k);
        assert_eq!(r.in_burst(&r.run()), ["kv"]);
    }

    #[test]
    fn the_largest_share_wins_and_failed_queries_do_not_count() {
        let mut r = Rec::default();
        r.probe(10 * GIB);
        r.alloc("a", 6 * GIB, false); // 60 %
        for free in [None, Some(0)] {
            let seq = r.next();
            r.probes.push(ProbeRecord { seq, free });
        }
        r.alloc("a2", GIB, false); // still the first query's epoch
        let second = r.probe(3 * GIB);
        r.alloc("b", 2 * GIB + GIB / 2, false); // 83 %
        let a = r.run();
        assert_eq!(a.sizing.map(|s| s.probe), Some(second));
        assert_eq!(r.in_burst(&a), ["b"]);
        let i = r.names.iter().position(|&n| n == "a2").unwrap();
        assert!(a.phases[i].before_sizing);
    }

    #[test]
    fn unsorted_input_gives_the_same_answer() {
        let mut r = Rec::default();
        r.alloc("w", GIB, true);
        r.probe(8 * GIB);
        r.alloc("kv", 6 * GIB, false);
        let a = r.run();
        let mut allocs = r.allocs.clone();
        allocs.reverse();
        let b = analyze(&allocs, &r.probes);
        assert_eq!(a.sizing, b.sizing);
        assert!(b.phases[0].in_burst);
        assert!(!b.phases[1].in_burst);
    }
}

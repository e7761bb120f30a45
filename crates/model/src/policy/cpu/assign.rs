//! The kubelet's topology-aware CPU pick (pkg/kubelet/cm/cpumanager
//! cpu_assignment.go): `takeByTopologyNUMAPacked` and
//! `takeByTopologyNUMADistributed` (the `distribute-cpus-across-numa`
//! option), with the same orders and tie-breaks.
//!
//! Packed: whole NUMA nodes / sockets first (whichever level is larger
//! first), then whole cores, then single threads, always preferring the
//! element with the fewest free CPUs and then the lowest id, so free space
//! is consumed where it is already fragmented.

use std::collections::BTreeMap;

use super::cpuset::CpuSet;
use super::topology::{CpuTopology, Details};

/// Why CPUs could not be taken. The messages are the kubelet's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TakeError {
    #[error("not enough cpus available to satisfy request: requested={requested}, available={available}")]
    NotEnough { requested: usize, available: usize },
    #[error("failed to allocate cpus")]
    Failed,
    #[error("accounting error, not enough CPUs allocated, remaining: {0}")]
    Accounting(i64),
}

struct Acc<'a> {
    topo: &'a CpuTopology,
    details: Details,
    needed: i64,
    result: CpuSet,
    /// NUMA nodes at least as large as sockets (`NumSockets >= NumNUMANodes`):
    /// NUMA nodes are the first level.
    numa_first: bool,
}

impl<'a> Acc<'a> {
    fn new(topo: &'a CpuTopology, available: &CpuSet, n: usize) -> Acc<'a> {
        Acc {
            topo,
            details: topo.details.keep_only(available),
            needed: n as i64,
            result: CpuSet::new(),
            numa_first: topo.num_sockets >= topo.num_numa_nodes,
        }
    }

    fn take(&mut self, cpus: &CpuSet) {
        self.result = self.result.union(cpus);
        self.details = self
            .details
            .keep_only(&self.details.cpus().difference(&self.result));
        self.needed -= cpus.len() as i64;
    }

    fn needs_at_least(&self, n: usize) -> bool {
        self.needed >= n as i64
    }

    fn satisfied(&self) -> bool {
        self.needed < 1
    }

    fn failed(&self) -> bool {
        self.needed > self.details.0.len() as i64
    }

    /// Sort ids by (free CPUs in them, id), ascending.
    fn sort(&self, ids: &mut [u32], free: impl Fn(&Details, u32) -> usize) {
        ids.sort_by_key(|id| (free(&self.details, *id), *id));
    }

    fn sorted_numa_nodes(&self) -> Vec<u32> {
        if self.numa_first {
            let mut v: Vec<u32> = self.details.numa_nodes().into_iter().collect();
            self.sort(&mut v, |d, id| d.cpus_in_numa_nodes(&[id]).len());
            v
        } else {
            let mut out = Vec::new();
            for s in self.sorted_sockets() {
                let mut v: Vec<u32> = self
                    .details
                    .numa_nodes_in_sockets(&[s])
                    .into_iter()
                    .collect();
                self.sort(&mut v, |d, id| d.cpus_in_numa_nodes(&[id]).len());
                out.extend(v);
            }
            out
        }
    }

    fn sorted_sockets(&self) -> Vec<u32> {
        if self.numa_first {
            let mut out = Vec::new();
            for n in self.sorted_numa_nodes() {
                let mut v: Vec<u32> = self
                    .details
                    .sockets_in_numa_nodes(&[n])
                    .into_iter()
                    .collect();
                self.sort(&mut v, |d, id| d.cpus_in_sockets(&[id]).len());
                out.extend(v);
            }
            out
        } else {
            let mut v: Vec<u32> = self.details.sockets().into_iter().collect();
            self.sort(&mut v, |d, id| d.cpus_in_sockets(&[id]).len());
            v
        }
    }

    fn sorted_cores(&self) -> Vec<u32> {
        let mut out = Vec::new();
        if self.numa_first {
            for s in self.sorted_sockets() {
                let mut v: Vec<u32> = self.details.cores_in_sockets(&[s]).into_iter().collect();
                self.sort(&mut v, |d, id| d.cpus_in_cores(&[id]).len());
                out.extend(v);
            }
        } else {
            for n in self.sorted_numa_nodes() {
                let mut v: Vec<u32> = self.details.cores_in_numa_nodes(&[n]).into_iter().collect();
                self.sort(&mut v, |d, id| d.cpus_in_cores(&[id]).len());
                out.extend(v);
            }
        }
        out
    }

    fn sorted_cpus(&self) -> Vec<u32> {
        let mut out = Vec::new();
        for c in self.sorted_cores() {
            out.extend(self.details.cpus_in_cores(&[c]).iter());
        }
        out
    }

    fn take_full_numa_nodes(&mut self) {
        let free: Vec<u32> = self
            .sorted_numa_nodes()
            .into_iter()
            .filter(|n| {
                self.details.cpus_in_numa_nodes(&[*n]).len()
                    == self.topo.details.cpus_in_numa_nodes(&[*n]).len()
            })
            .collect();
        for n in free {
            let cpus = self.topo.details.cpus_in_numa_nodes(&[n]);
            if self.needs_at_least(cpus.len()) {
                self.take(&cpus);
            }
        }
    }

    fn take_full_sockets(&mut self) {
        let per = self.topo.cpus_per_socket();
        let free: Vec<u32> = self
            .sorted_sockets()
            .into_iter()
            .filter(|s| self.details.cpus_in_sockets(&[*s]).len() == per)
            .collect();
        for s in free {
            let cpus = self.topo.details.cpus_in_sockets(&[s]);
            if self.needs_at_least(cpus.len()) {
                self.take(&cpus);
            }
        }
    }

    fn take_full_cores(&mut self) {
        let per = self.topo.cpus_per_core();
        let free: Vec<u32> = self
            .sorted_cores()
            .into_iter()
            .filter(|c| self.details.cpus_in_cores(&[*c]).len() == per)
            .collect();
        for c in free {
            let cpus = self.topo.details.cpus_in_cores(&[c]);
            if self.needs_at_least(cpus.len()) {
                self.take(&cpus);
            }
        }
    }

    fn take_remaining_cpus(&mut self) {
        for cpu in self.sorted_cpus() {
            self.take(&CpuSet::from([cpu]));
            if self.satisfied() {
                return;
            }
        }
    }
}

/// `takeByTopologyNUMAPacked`: `n` CPUs out of `available`.
pub(crate) fn take_packed(
    topo: &CpuTopology,
    available: &CpuSet,
    n: usize,
) -> Result<CpuSet, TakeError> {
    let mut acc = Acc::new(topo, available, n);
    if acc.satisfied() {
        return Ok(acc.result);
    }
    if acc.failed() {
        return Err(TakeError::NotEnough {
            requested: n,
            available: available.len(),
        });
    }
    if acc.numa_first {
        acc.take_full_numa_nodes();
    } else {
        acc.take_full_sockets();
    }
    if acc.satisfied() {
        return Ok(acc.result);
    }
    if acc.numa_first {
        acc.take_full_sockets();
    } else {
        acc.take_full_numa_nodes();
    }
    if acc.satisfied() {
        return Ok(acc.result);
    }
    acc.take_full_cores();
    if acc.satisfied() {
        return Ok(acc.result);
    }
    acc.take_remaining_cpus();
    if acc.satisfied() {
        return Ok(acc.result);
    }
    Err(TakeError::Failed)
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The kubelet's "balance score": population standard deviation, the mean
/// and the result each rounded to 3 decimals.
fn standard_deviation(xs: &[i64]) -> f64 {
    let n = xs.len() as f64;
    let m = round3(xs.iter().map(|x| *x as f64).sum::<f64>() / n);
    let s = (xs
        .iter()
        .map(|x| (*x as f64 - m) * (*x as f64 - m))
        .sum::<f64>()
        / n)
        .sqrt();
    round3(s)
}

/// Every k-subset of `n`, in lexicographic index order, until `f` says stop.
fn combinations(n: &[u32], k: usize, f: &mut dyn FnMut(&[u32]) -> bool) {
    fn go(
        n: &[u32],
        k: usize,
        start: usize,
        acc: &mut Vec<u32>,
        f: &mut dyn FnMut(&[u32]) -> bool,
    ) -> bool {
        if k == 0 {
            return f(acc);
        }
        let mut i = start;
        while i + k <= n.len() {
            acc.push(n[i]);
            let stop = go(n, k - 1, i + 1, acc, f);
            acc.pop();
            if stop {
                return true;
            }
            i += 1;
        }
        false
    }
    if k >= 1 {
        go(n, k, 0, &mut Vec::new(), f);
    }
}

/// `takeByTopologyNUMADistributed` (KEP-2902): spread `n` CPUs evenly over
/// the fewest NUMA nodes that can hold them, in groups of `group` CPUs
/// (`group` = CPUs per core under `full-pcpus-only`, else 1).
pub(crate) fn take_distributed(
    topo: &CpuTopology,
    available: &CpuSet,
    n: usize,
    group: usize,
) -> Result<CpuSet, TakeError> {
    let group = group.max(1);
    if n % group != 0 {
        return take_packed(topo, available, n);
    }
    let mut acc = Acc::new(topo, available, n);
    if acc.satisfied() {
        return Ok(acc.result);
    }
    if acc.failed() {
        return Err(TakeError::NotEnough {
            requested: n,
            available: available.len(),
        });
    }
    let numas = acc.sorted_numa_nodes();
    let spread = Spread {
        numas: &numas,
        n,
        group,
    };
    let (min_numas, max_numas) = spread.numa_nodes_needed(topo, &acc.details);
    for k in min_numas..=max_numas {
        let Some((combo, remainder_set)) = spread.best_combination(&acc.details, k) else {
            continue;
        };
        spread.take(&mut acc, &combo, &remainder_set);
        if acc.needed != 0 {
            return Err(TakeError::Accounting(acc.needed));
        }
        return Ok(acc.result);
    }
    take_packed(topo, available, n)
}

/// `n` CPUs to spread in groups of `group` over some of `numas` (the free
/// NUMA nodes, sorted).
struct Spread<'a> {
    numas: &'a [u32],
    n: usize,
    group: usize,
}

impl Spread<'_> {
    /// `rangeNUMANodesNeededToSatisfy`: the fewest and the most NUMA nodes
    /// the CPUs may be spread over.
    fn numa_nodes_needed(&self, topo: &CpuTopology, free: &Details) -> (usize, usize) {
        let (n, group) = (self.n, self.group);
        let num_numa = topo.details.numa_nodes().len();
        let num_groups = (topo.num_cpus - 1) / group + 1;
        let groups_per_numa = (num_groups - 1) / num_numa + 1;
        let groups_needed = (n - 1) / group + 1;
        let min_numas = (groups_needed - 1) / groups_per_numa + 1;
        let max_numas = groups_needed.min(free.numa_nodes().len());
        (min_numas, max_numas)
    }

    /// CPUs each NUMA node of a `k`-node combination gets before the
    /// remainder.
    fn distribution(&self, k: usize) -> usize {
        (self.n / k / self.group) * self.group
    }

    /// Free CPUs per NUMA node, in `numas` order.
    fn values(&self, free: &BTreeMap<u32, i64>) -> Vec<i64> {
        self.numas.iter().map(|x| free[x]).collect()
    }

    /// The `k`-node combination whose spread leaves the free CPUs most
    /// balanced (the first of equals, in lexicographic order; a perfect
    /// balance ends the search), with the nodes that take the remainder.
    fn best_combination(&self, free: &Details, k: usize) -> Option<(Vec<u32>, Vec<u32>)> {
        let mut best_balance = f64::MAX;
        let mut best = None;
        combinations(self.numas, k, &mut |combo| {
            if best_balance == 0.0 {
                return true;
            }
            if let Some((balance, remainder)) = self.balance_of(free, combo) {
                if balance < best_balance {
                    best_balance = balance;
                    best = Some((combo.to_vec(), remainder.unwrap_or_default()));
                }
            }
            false
        });
        best
    }

    /// The balance after spreading over `combo` (`None`: it cannot hold
    /// the CPUs), and the best nodes for the remainder, if any.
    fn balance_of(&self, free: &Details, combo: &[u32]) -> Option<(f64, Option<Vec<u32>>)> {
        let (n, group) = (self.n, self.group);
        let free_in = |numa: u32| free.cpus_in_numa_nodes(&[numa]).len();
        if free.cpus_in_numa_nodes(combo).len() < n {
            return None;
        }
        let groups: usize = combo.iter().map(|c| free_in(*c) / group).sum();
        if groups * group < n {
            return None;
        }
        let distribution = self.distribution(combo.len());
        if combo.iter().any(|c| free_in(*c) < distribution) {
            return None;
        }
        let mut after: BTreeMap<u32, i64> = self
            .numas
            .iter()
            .map(|x| (*x, free_in(*x) as i64))
            .collect();
        for c in combo {
            *after.get_mut(c).expect("numa in map") -= distribution as i64;
        }
        let remainder = (n - distribution * combo.len()) as i64;
        if remainder == 0 {
            return Some((standard_deviation(&self.values(&after)), None));
        }
        let remainder_combo: Vec<u32> = combo
            .iter()
            .copied()
            .filter(|c| after[c] >= group as i64)
            .collect();
        Some(self.best_remainder(&after, &remainder_combo, remainder))
    }

    /// The subset of `candidates` (largest subsets first) that takes
    /// `remainder` CPUs, a group at a time round-robin, for the best
    /// balance: `(f64::MAX, None)` when none can.
    fn best_remainder(
        &self,
        after: &BTreeMap<u32, i64>,
        candidates: &[u32],
        remainder: i64,
    ) -> (f64, Option<Vec<u32>>) {
        let group = self.group as i64;
        let mut best = (f64::MAX, None);
        for kk in (1..=candidates.len()).rev() {
            combinations(candidates, kk, &mut |subset| {
                let mut rem = remainder;
                let mut a = after.clone();
                // Only whole groups can be handed out: a raw CPU sum would
                // count leftovers smaller than a group, and the round-robin
                // below would then never finish.
                let whole: i64 = subset.iter().map(|s| a[s] / group * group).sum();
                if whole < rem {
                    return false;
                }
                while rem > 0 {
                    for s in subset {
                        if rem == 0 {
                            break;
                        }
                        if a[s] < group {
                            continue;
                        }
                        *a.get_mut(s).expect("numa in map") -= group;
                        rem -= group;
                    }
                }
                let balance = standard_deviation(&self.values(&a));
                if balance < best.0 {
                    best = (balance, Some(subset.to_vec()));
                }
                false
            });
        }
        best
    }

    /// Take the CPUs: the even share from each node of `combo` (packed),
    /// then the remainder a group at a time from `remainder_set`.
    fn take(&self, acc: &mut Acc<'_>, combo: &[u32], remainder_set: &[u32]) {
        let topo = acc.topo;
        let distribution = self.distribution(combo.len());
        for numa in combo {
            let from = acc.details.cpus_in_numa_nodes(&[*numa]);
            if let Ok(cpus) = take_packed(topo, &from, distribution) {
                acc.take(&cpus);
            }
        }
        let mut remainder = self.n as i64 - (distribution * combo.len()) as i64;
        while remainder > 0 {
            let before = remainder;
            for numa in remainder_set {
                if remainder == 0 {
                    break;
                }
                let from = acc.details.cpus_in_numa_nodes(&[*numa]);
                if from.len() < self.group {
                    continue;
                }
                if let Ok(cpus) = take_packed(topo, &from, self.group) {
                    acc.take(&cpus);
                }
                remainder -= self.group as i64;
            }
            if remainder == before {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::cpu::topology::RawCpu;

    fn set(s: &str) -> CpuSet {
        CpuSet::parse(s).unwrap()
    }

    /// The kubelet test topologies (policy_test.go), rebuilt from their
    /// cAdvisor-style descriptions.
    /// topoSingleSocketHT: 1 socket, 4 cores, 8 CPUs; core c = {c, c+4}.
    fn single_socket_ht() -> CpuTopology {
        CpuTopology::synthetic(1, 1, 4, 2)
    }

    /// topoDualSocketHT: 2 sockets, 6 cores, 12 CPUs:
    /// socket 0 cores {0,6},{2,8},{4,10}; socket 1 cores {1,7},{3,9},{5,11}.
    fn dual_socket_ht() -> CpuTopology {
        let mut raw = Vec::new();
        for cpu in 0..12u32 {
            let socket = cpu % 2;
            raw.push(RawCpu {
                cpu,
                package: socket,
                die: 0,
                core_id: (cpu % 6) / 2,
                numa: socket,
            });
        }
        CpuTopology::from_raw(&raw).unwrap()
    }

    /// topoDualSocketMultiNumaPerSocketHT: 2 sockets × 2 NUMA × 10 cores × 2
    /// threads = 80 CPUs; NUMA n holds CPUs 10n..10n+9 and their siblings +40.
    fn dual_socket_multi_numa_ht() -> CpuTopology {
        CpuTopology::synthetic(2, 2, 10, 2)
    }

    type Case = (
        &'static str,
        CpuTopology,
        &'static str,
        usize,
        Result<&'static str, TakeError>,
    );

    fn common_cases() -> Vec<Case> {
        vec![
            ("take more cpus than are available from single socket with HT", single_socket_ht(), "0,2,4,6", 5,
                Err(TakeError::NotEnough { requested: 5, available: 4 })),
            ("take zero cpus from single socket with HT", single_socket_ht(), "0-7", 0, Ok("")),
            ("take one cpu from single socket with HT", single_socket_ht(), "0-7", 1, Ok("0")),
            ("take one cpu from single socket with HT, some cpus are taken", single_socket_ht(), "1,3,5,6,7", 1, Ok("6")),
            ("take two cpus from single socket with HT", single_socket_ht(), "0-7", 2, Ok("0,4")),
            ("take all cpus from single socket with HT", single_socket_ht(), "0-7", 8, Ok("0-7")),
            ("take two cpus from single socket with HT, only one core totally free", single_socket_ht(), "0-3,6", 2, Ok("2,6")),
            ("take a socket of cpus from dual socket with HT", dual_socket_ht(), "0-11", 6, Ok("0,2,4,6,8,10")),
            ("take a socket of cpus from dual socket with multi-numa-per-socket with HT", dual_socket_multi_numa_ht(), "0-79", 40,
                Ok("0-19,40-59")),
            ("take a NUMA node of cpus from dual socket with multi-numa-per-socket with HT", dual_socket_multi_numa_ht(), "0-79", 20,
                Ok("0-9,40-49")),
            ("take a NUMA node of cpus from dual socket with multi-numa-per-socket with HT, with 1 NUMA node already taken",
                dual_socket_multi_numa_ht(), "10-39,50-79", 20, Ok("10-19,50-59")),
            ("take a socket and a NUMA node of cpus from dual socket with multi-numa-per-socket with HT",
                dual_socket_multi_numa_ht(), "0-79", 60, Ok("0-29,40-69")),
            ("take a socket and a NUMA node of cpus from dual socket with multi-numa-per-socket with HT, a core taken",
                dual_socket_multi_numa_ht(), "1-39,41-79", 60, Ok("10-39,50-79")),
        ]
    }

    #[test]
    fn kubelet_take_packed_table() {
        // The kubelet's TestTakeByTopologyNUMAPacked (cpu_assignment_test.go).
        let mut cases = common_cases();
        cases.extend(vec![
            ("take one cpu from dual socket with HT - core from Socket 0", dual_socket_ht(), "1-5,7-11", 1, Ok("2")),
            ("allocate 4 full cores with 3 coming from the first NUMA node (filling it up) and 1 coming from the second NUMA node",
                dual_socket_ht(), "0-11", 8, Ok("0,6,2,8,4,10,1,7")),
            ("allocate 32 full cores with 30 coming from the first 3 NUMA nodes (filling them up) and 2 coming from the fourth NUMA node",
                dual_socket_multi_numa_ht(), "0-79", 64, Ok("0-29,40-69,30,31,70,71")),
        ]);
        for (name, topo, avail, n, want) in cases {
            let got = take_packed(&topo, &set(avail), n);
            assert_eq!(got, want.map(set), "{name}");
        }
    }

    #[test]
    fn kubelet_free_cpus_order() {
        // TestCPUAccumulatorFreeCPUs.
        let cases: Vec<(CpuTopology, &str, Vec<u32>)> = vec![
            (single_socket_ht(), "0-7", vec![0, 4, 1, 5, 2, 6, 3, 7]),
            (single_socket_ht(), "3-7", vec![4, 5, 6, 3, 7]),
            (
                dual_socket_ht(),
                "0-11",
                vec![0, 6, 2, 8, 4, 10, 1, 7, 3, 9, 5, 11],
            ),
            (
                dual_socket_ht(),
                "1-11",
                vec![6, 2, 8, 4, 10, 1, 7, 3, 9, 5, 11],
            ),
            (
                dual_socket_ht(),
                "1-5,7-11",
                vec![2, 8, 4, 10, 1, 7, 3, 9, 5, 11],
            ),
        ];
        for (topo, avail, want) in cases {
            let acc = Acc::new(&topo, &set(avail), 0);
            assert_eq!(acc.sorted_cpus(), want, "{avail}");
        }
    }

    #[test]
    fn kubelet_take_distributed_table() {
        // The kubelet's TestTakeByTopologyNUMADistributed: the common cases
        // with group 1, then (name, topology, available, n, group, result).
        for (name, topo, avail, n, want) in common_cases() {
            let got = take_distributed(&topo, &set(avail), n, 1);
            assert_eq!(got, want.map(set), "{name}");
        }
        let m = dual_socket_multi_numa_ht;
        let cases: Vec<(&str, CpuTopology, &str, usize, usize, &str)> = vec![
            ("allocate 4 full cores with 2 distributed across each NUMA node", dual_socket_ht(), "0-11", 8, 1, "0,6,2,8,1,7,3,9"),
            ("allocate 32 full cores with 8 distributed across each NUMA node", m(), "0-79", 64, 1,
                "0-7,10-17,20-27,30-37,40-47,50-57,60-67,70-77"),
            ("allocate 24 full cores with 8 distributed across the first 3 NUMA nodes", m(), "0-79", 48, 1,
                "0-7,10-17,20-27,40-47,50-57,60-67"),
            ("allocate 24 full cores with 8 distributed across the first 3 NUMA nodes (taking all but 2 from the first NUMA node)",
                m(), "1-29,32-39,41-69,72-79", 48, 1, "1-8,10-17,20-27,41-48,50-57,60-67"),
            ("allocate 24 full cores with 8 distributed across the last 3 NUMA nodes (even though all 8 could be allocated from the first NUMA node)",
                m(), "2-29,31-39,42-69,71-79", 48, 1, "10-17,20-27,31-38,50-57,60-67,71-78"),
            ("allocate 8 full cores with 2 distributed across each NUMA node", m(),
                "0-2,10-12,20-22,30-32,40-41,50-51,60-61,70-71", 16, 1, "0-1,10-11,20-21,30-31,40-41,50-51,60-61,70-71"),
            ("take one cpu from dual socket with HT - core from Socket 0", dual_socket_ht(), "1-5,7-11", 1, 1, "1"),
            ("take one cpu from dual socket with HT - core from Socket 0 - cpuGroupSize 2", dual_socket_ht(), "1-5,7-11", 1, 2, "2"),
            ("allocate 13 full cores distributed across the first 2 NUMA nodes", m(), "0-79", 26, 1, "0-6,10-16,40-45,50-55"),
            ("allocate 13 full cores distributed across the first 2 NUMA nodes (cpuGroupSize 2)", m(), "0-79", 26, 2,
                "0-6,10-15,40-46,50-55"),
            ("allocate 31 full cores with 15 CPUs distributed across each NUMA node and 1 CPU spilling over to each of NUMA 0, 1",
                m(), "0-79", 62, 1, "0-7,10-17,20-27,30-37,40-47,50-57,60-66,70-76"),
            ("allocate 31 full cores with 14 CPUs distributed across each NUMA node and 2 CPUs spilling over to each of NUMA 0, 1, 2 (cpuGroupSize 2)",
                m(), "0-79", 62, 2, "0-7,10-17,20-27,30-36,40-47,50-57,60-67,70-76"),
            ("allocate 31 full cores with 15 CPUs distributed across each NUMA node and 1 CPU spilling over to each of NUMA 2, 3 (to keep balance)",
                m(), "0-8,10-18,20-39,40-48,50-58,60-79", 62, 1, "0-7,10-17,20-27,30-37,40-46,50-56,60-67,70-77"),
            ("allocate 31 full cores with 14 CPUs distributed across each NUMA node and 2 CPUs spilling over to each of NUMA 0, 2, 3 (to keep balance with cpuGroupSize 2)",
                m(), "0-8,10-18,20-39,40-48,50-58,60-79", 62, 2, "0-7,10-16,20-27,30-37,40-47,50-56,60-67,70-77"),
            ("ensure bestRemainder chosen with NUMA nodes that have enough CPUs to satisfy the request", m(),
                "0-3,10-13,20-23,30-36,40-43,50-53,60-63,70-76", 34, 1, "0-3,10-13,20-23,30-34,40-43,50-53,60-63,70-74"),
        ];
        for (name, topo, avail, n, group, want) in cases {
            let got = take_distributed(&topo, &set(avail), n, group).unwrap();
            assert_eq!(got, set(want), "{name}");
        }
    }

    #[test]
    fn remainder_counts_whole_groups_only() {
        // 3 sockets × 2 NUMA nodes × 3 cores × 2 threads (core c = {c,
        // c+18}). After the even share, some NUMA nodes keep 3 free CPUs:
        // their raw sum covers the remainder, their whole 2-CPU groups do
        // not. Such a subset is skipped (as the kubelet does); counting
        // raw CPUs made the round-robin spin forever.
        let topo = CpuTopology::synthetic(3, 2, 3, 2);
        let avail = set("0-1,4-9,11-14,17-20,22,24-25,27-28,30,32-35");
        let (tx, rx) = std::sync::mpsc::channel();
        let (t, a) = (topo.clone(), avail.clone());
        std::thread::spawn(move || tx.send(take_distributed(&t, &a, 14, 2)));
        let got = rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("take_distributed returns")
            .unwrap();
        assert_eq!(got.len(), 14);
        assert!(got.is_subset(&avail), "{got}");
        // Whole cores only: every CPU's sibling is taken with it.
        for c in got.iter() {
            assert!(got.contains((c + 18) % 36), "{got}");
        }
    }

    #[test]
    fn stddev_rounds_like_the_kubelet() {
        assert_eq!(standard_deviation(&[1, 2, 3]), 0.816);
        assert_eq!(standard_deviation(&[4, 4]), 0.0);
    }
}

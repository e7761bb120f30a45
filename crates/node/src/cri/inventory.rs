//! The live pod inventory: CRI sandboxes joined with their containers,
//! identity from the kubelet's labels, the cgroup parent from the verbose
//! sandbox status, resources from each container's status, and the pod's
//! requests/limits/QoS class rebuilt from those (see [`super::reconstruct`]).

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use super::client::{CriClient, CriError};
use super::proto;
use super::reconstruct::{
    parse_cgroup_parent, reconstruct, validate_uid, ContainerSettings, QosSource,
};
use qosd_model::core::model::{Pod, PodOrigin, QosClass};

pub(crate) const LABEL_POD_UID: &str = "io.kubernetes.pod.uid";
pub(crate) const LABEL_POD_NAME: &str = "io.kubernetes.pod.name";
pub(crate) const LABEL_POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
pub(crate) const LABEL_CONTAINER_NAME: &str = "io.kubernetes.container.name";

/// Sandbox state (CRI `PodSandboxState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxState {
    /// `SANDBOX_READY`: the sandbox runs.
    Ready,
    /// `SANDBOX_NOTREADY`: stopped or failed, not removed yet.
    NotReady,
}

impl SandboxState {
    /// The state as `qosd pods` prints it: `ready` or `notready`.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxState::Ready => "ready",
            SandboxState::NotReady => "notready",
        }
    }
}

/// Where a container's settings were read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ResourcesOrigin {
    /// `ContainerStatus.resources.linux`.
    Status,
    /// The verbose status info's container config (`config.linux.resources`).
    VerboseConfig,
    /// Not reported by the runtime.
    None,
}

/// One container of a live pod, with the cgroup settings the runtime reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LiveContainer {
    /// The runtime's container id.
    pub id: String,
    /// The container's name in the pod spec (`ContainerMetadata.name`).
    pub name: String,
    /// created | running | exited | unknown
    pub state: String,
    /// Restart count of this container in its sandbox
    /// (`ContainerMetadata.attempt`, 0 for the first run).
    pub attempt: u32,
    /// `LinuxContainerResources.cpu_shares` (`None`: 0 or not reported).
    pub cpu_shares: Option<i64>,
    /// `cpu_quota`, in microseconds per period (`None`: not positive or not
    /// reported: no limit).
    pub cpu_quota: Option<i64>,
    /// `cpu_period`, in microseconds (`None`: 0 or not reported).
    pub cpu_period: Option<i64>,
    /// `memory_limit_in_bytes` (`None`: 0 or not reported: no limit).
    pub memory_limit_bytes: Option<i64>,
    /// `oom_score_adj` (`None`: the runtime reports no resources).
    pub oom_score_adj: Option<i64>,
    /// `unified["memory.min"]` in bytes (MemoryQoS on cgroup v2; `None`:
    /// not set).
    pub memory_min_bytes: Option<i64>,
    /// Where these settings were read.
    pub resources_origin: ResourcesOrigin,
    /// `linux.cpuset_cpus` as the runtime reports it (CPU manager); `None`
    /// when it reports none.
    pub cpuset_cpus: Option<String>,
    /// Counted in the pod's rebuilt resources (the current attempt of a
    /// container that has not exited, or the latest attempt otherwise).
    pub counted: bool,
}

impl LiveContainer {
    fn settings(&self) -> ContainerSettings {
        ContainerSettings {
            name: self.name.clone(),
            cpu_shares: self.cpu_shares,
            cpu_quota: self.cpu_quota,
            cpu_period: self.cpu_period,
            memory_limit_bytes: self.memory_limit_bytes,
            oom_score_adj: self.oom_score_adj,
            memory_min_bytes: self.memory_min_bytes,
        }
    }
}

/// A pod sandbox live on the node.
#[derive(Debug, Clone, PartialEq)]
pub struct LivePod {
    /// Identity and rebuilt requests/limits; `qos_override` holds the class.
    pub pod: Pod,
    /// The runtime's sandbox id.
    pub sandbox_id: String,
    /// The sandbox's state.
    pub state: SandboxState,
    /// The QoS class rebuilt from the runtime's view.
    pub qos_class: QosClass,
    /// What the class was rebuilt from.
    pub qos_source: QosSource,
    /// From the verbose sandbox status; `None` when the runtime does not say.
    pub cgroup_parent: Option<String>,
    /// Sandbox creation time (ns since the epoch): the pod's arrival order.
    pub created_at: i64,
    /// The sandbox's containers, every attempt listed.
    pub containers: Vec<LiveContainer>,
    /// Where values are inferred rather than exact.
    pub notes: Vec<String>,
    /// Inconsistencies worth a look (class mismatch, uid mismatch, …).
    pub warnings: Vec<String>,
    /// Which source decided each pod value (runtime alone: all inferred;
    /// merged with the API server's spec: exact, see `crate::kube`).
    pub sources: qosd_model::core::model::Provenance,
}

/// A sandbox left out of the inventory, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skipped {
    /// The runtime's sandbox id.
    pub sandbox_id: String,
    /// Why it was left out.
    pub reason: String,
}

/// Result of [`inventory`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Inventory {
    /// READY and NOTREADY pods, sorted by namespace/name.
    pub pods: Vec<LivePod>,
    /// Sandboxes that vanished mid-way or whose labels were rejected.
    pub skipped: Vec<Skipped>,
}

impl Inventory {
    /// The READY pods as plain [`Pod`]s (for the planner).
    pub fn ready_pods(&self) -> Vec<Pod> {
        self.pods
            .iter()
            .filter(|p| p.state == SandboxState::Ready)
            .map(|p| p.pod.clone())
            .collect()
    }
}

/// Options of [`inventory`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InventoryOptions {
    /// Node memory capacity (MemTotal), to infer Burstable memory requests
    /// from oom_score_adj. `None`: those requests stay unknown.
    pub memory_capacity_bytes: Option<i64>,
}

/// List the runtime's sandboxes and build the inventory.
pub async fn inventory(client: &CriClient, opts: &InventoryOptions) -> Result<Inventory, CriError> {
    let sandboxes = client.list_pod_sandboxes().await?;
    inventory_of(client, sandboxes, opts).await
}

/// Build the inventory of the given (already listed) sandboxes. A sandbox
/// that is gone by the time its status is asked for is skipped and reported.
pub async fn inventory_of(
    client: &CriClient,
    sandboxes: Vec<proto::PodSandbox>,
    opts: &InventoryOptions,
) -> Result<Inventory, CriError> {
    let all_containers = client.list_containers(None).await?;
    inventory_with(client, sandboxes, all_containers, opts, None).await
}

/// Build the inventory of already listed sandboxes and containers, asking
/// the runtime only about what `cache` does not hold yet (see
/// [`StatusCache`]); `None`: ask about everything. The cache is pruned to
/// the listed ids afterwards.
pub(crate) async fn inventory_with(
    client: &CriClient,
    sandboxes: Vec<proto::PodSandbox>,
    all_containers: Vec<proto::Container>,
    opts: &InventoryOptions,
    cache: Option<&std::sync::Arc<StatusCache>>,
) -> Result<Inventory, CriError> {
    if let Some(c) = cache {
        c.retain(&sandboxes, &all_containers);
    }
    let mut by_sandbox: HashMap<String, Vec<proto::Container>> = HashMap::new();
    for c in all_containers {
        by_sandbox
            .entry(c.pod_sandbox_id.clone())
            .or_default()
            .push(c);
    }
    let groups: Vec<(proto::PodSandbox, Vec<proto::Container>)> = sandboxes
        .into_iter()
        .map(|sb| {
            let containers = by_sandbox.remove(&sb.id).unwrap_or_default();
            (sb, containers)
        })
        .collect();
    let mut answers = ask_statuses(client, &groups, cache.map(|c| &**c)).await?;
    let mut inv = Inventory::default();
    for (idx, (sb, containers)) in groups.into_iter().enumerate() {
        let facts = match answers.sandboxes[idx].take() {
            Some(Ok(f)) => f,
            Some(Err(reason)) => {
                inv.skipped.push(Skipped {
                    sandbox_id: sb.id.clone(),
                    reason,
                });
                continue;
            }
            None => unreachable!("every sandbox is answered"),
        };
        match build_pod(
            &sb,
            facts,
            containers,
            &answers.containers,
            opts,
            cache.is_some(),
        ) {
            Ok(p) => inv.pods.push(p),
            Err(reason) => inv.skipped.push(Skipped {
                sandbox_id: sb.id.clone(),
                reason,
            }),
        }
    }
    inv.pods.sort_by(|a, b| {
        (&a.pod.namespace, &a.pod.name, &a.sandbox_id).cmp(&(
            &b.pod.namespace,
            &b.pod.name,
            &b.sandbox_id,
        ))
    });
    Ok(inv)
}

/// What the runtime said about sandboxes and containers that does not
/// change while their id lives, kept so that a listing asks only about new
/// ids: the verbose `PodSandboxStatus` (labels, annotations, metadata and
/// the cgroup parent parsed from the info blob; the state comes from each
/// `ListPodSandbox`) and each container's status, re-asked when the
/// container's listed state changes or after a resync
/// ([`Source::resync`](crate::pods::Source::resync); in-place resource
/// updates do not show in any listing). Entries of ids no longer listed
/// are dropped at each listing.
#[derive(Debug, Default)]
pub struct StatusCache {
    pub(super) sandboxes: std::sync::Mutex<HashMap<String, SandboxFacts>>,
    pub(super) containers: std::sync::Mutex<HashMap<String, ContainerFacts>>,
    /// Bumped at every change of the entries (see [`super::persist`]).
    pub(super) generation: std::sync::atomic::AtomicU64,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) struct SandboxFacts {
    pub(super) status: proto::PodSandboxStatus,
    pub(super) cgroup_parent: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) struct ContainerFacts {
    /// The listed state this status was read at.
    pub(super) listed_state: i32,
    pub(super) state: i32,
    pub(super) res: Option<proto::LinuxContainerResources>,
    pub(super) origin: ResourcesOrigin,
    /// Asked about again at the next listing, kept until then (see
    /// [`StatusCache::distrust_containers`]).
    pub(super) unverified: bool,
}

impl StatusCache {
    /// Drop the entries of ids that are not listed any more.
    pub(super) fn retain(&self, sandboxes: &[proto::PodSandbox], containers: &[proto::Container]) {
        let sb: std::collections::HashSet<&str> = sandboxes.iter().map(|s| s.id.as_str()).collect();
        let ct: std::collections::HashSet<&str> =
            containers.iter().map(|c| c.id.as_str()).collect();
        let before = self.len();
        lock(&self.sandboxes).retain(|k, _| sb.contains(k.as_str()));
        lock(&self.containers).retain(|k, _| ct.contains(k.as_str()));
        if self.len() != before {
            self.changed();
        }
    }

    /// Ask every container's status again at the next listing (a resync:
    /// in-place resource updates change a status without changing a listing).
    pub(crate) fn forget_containers(&self) {
        lock(&self.containers).clear();
        self.changed();
    }

    /// Ask these containers' statuses again at the next listing (updated
    /// in place, as the runtime's events said).
    pub(crate) fn forget_container_ids(&self, ids: &[String]) {
        let mut g = lock(&self.containers);
        let before = g.len();
        for id in ids {
            g.remove(id);
        }
        let changed = g.len() != before;
        drop(g);
        if changed {
            self.changed();
        }
    }

    /// Ask every container's status again at the next listing, keeping the
    /// entries until the answers replace them (so a cache written in
    /// between still holds them).
    pub(crate) fn distrust_containers(&self) {
        for f in lock(&self.containers).values_mut() {
            f.unverified = true;
        }
    }

    pub(super) fn changed(&self) {
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Changes whenever the entries do.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// (sandboxes, containers) held.
    pub(crate) fn len(&self) -> (usize, usize) {
        (lock(&self.sandboxes).len(), lock(&self.containers).len())
    }
}

pub(super) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Status calls (`PodSandboxStatus`, `ContainerStatus`) a listing keeps
/// in flight at once over the one connection.
pub(crate) const STATUS_CONCURRENCY: usize = 32;

/// A container's status as a listing learnt it: `None` when the container
/// vanished before its status was read.
type ContainerAnswer = Option<ContainerFacts>;

/// What a listing knows about each sandbox and container: from the cache,
/// or asked.
struct Answers {
    /// By sandbox index: the facts, or why the sandbox is skipped.
    sandboxes: Vec<Option<Result<SandboxFacts, String>>>,
    /// By container id.
    containers: HashMap<String, ContainerAnswer>,
}

/// One status call of a listing.
enum Asked {
    Sandbox(usize, Result<Box<SandboxFacts>, String>),
    Container(String, ContainerAnswer),
}

/// Take what `cache` holds and ask the runtime about the rest: every
/// missing sandbox status and container status at once, at most
/// [`STATUS_CONCURRENCY`] in flight (sandboxes first: their verbose status
/// is the slower call). The answers are keyed, so their order does not
/// depend on which call returns first. A sandbox or container that is gone
/// by the time it is asked about is an answer (skipped, vanished); any
/// other failed call fails the listing (and cancels the calls left).
async fn ask_statuses(
    client: &CriClient,
    groups: &[(proto::PodSandbox, Vec<proto::Container>)],
    cache: Option<&StatusCache>,
) -> Result<Answers, CriError> {
    let mut answers = Answers {
        sandboxes: Vec::with_capacity(groups.len()),
        containers: HashMap::new(),
    };
    let mut ask_sandboxes = Vec::new();
    let mut ask_containers = Vec::new();
    for (idx, (sb, containers)) in groups.iter().enumerate() {
        let cached = cache.and_then(|c| lock(&c.sandboxes).get(&sb.id).cloned());
        if cached.is_none() {
            ask_sandboxes.push((idx, sb.id.clone()));
        }
        answers.sandboxes.push(cached.map(Ok));
        for c in containers {
            let hit = cache.and_then(|k| {
                lock(&k.containers)
                    .get(&c.id)
                    .filter(|f| f.listed_state == c.state && !f.unverified)
                    .cloned()
            });
            match hit {
                Some(f) => {
                    answers.containers.insert(c.id.clone(), Some(f));
                }
                None => ask_containers.push((c.id.clone(), c.state)),
            }
        }
    }
    if ask_sandboxes.is_empty() && ask_containers.is_empty() {
        return Ok(answers);
    }
    let (asked_sandboxes, asked_containers) = (ask_sandboxes.len(), ask_containers.len());
    let started = std::time::Instant::now();
    let limit = std::sync::Arc::new(tokio::sync::Semaphore::new(STATUS_CONCURRENCY));
    let mut tasks = tokio::task::JoinSet::new();
    for (idx, id) in ask_sandboxes {
        let client = client.clone();
        let limit = limit.clone();
        tasks.spawn(async move {
            let _permit = limit.acquire_owned().await;
            ask_sandbox(&client, &id)
                .await
                .map(|r| Asked::Sandbox(idx, r.map(Box::new)))
        });
    }
    for (id, listed_state) in ask_containers {
        let client = client.clone();
        let limit = limit.clone();
        tasks.spawn(async move {
            let _permit = limit.acquire_owned().await;
            ask_container(&client, &id, listed_state)
                .await
                .map(|r| Asked::Container(id, r))
        });
    }
    while let Some(joined) = tasks.join_next().await {
        match joined.expect("status task panicked")? {
            Asked::Sandbox(idx, r) => {
                let r = r.map(|f| *f);
                if let (Ok(f), Some(c)) = (&r, cache) {
                    lock(&c.sandboxes).insert(groups[idx].0.id.clone(), f.clone());
                    c.changed();
                }
                answers.sandboxes[idx] = Some(r);
            }
            Asked::Container(id, r) => {
                if let (Some(f), Some(k)) = (&r, cache) {
                    lock(&k.containers).insert(id.clone(), f.clone());
                    k.changed();
                }
                answers.containers.insert(id, r);
            }
        }
    }
    tracing::debug!(
        target: STATUS_TIMING_TARGET,
        sandboxes = asked_sandboxes,
        containers = asked_containers,
        ms = started.elapsed().as_secs_f64() * 1e3,
        "status calls answered"
    );
    Ok(answers)
}

/// Target of the status calls' timing line (debug), e.g.
/// `QOSD_LOG=info,qosd::cri::timing=debug`.
pub(crate) const STATUS_TIMING_TARGET: &str = "qosd::cri::timing";

/// A sandbox's verbose status; `Ok(Err(reason))` when it is gone.
async fn ask_sandbox(
    client: &CriClient,
    id: &str,
) -> Result<Result<SandboxFacts, String>, CriError> {
    let resp = match client.pod_sandbox_status(id, true).await {
        Ok(s) => s,
        Err(e) if e.is_not_found() => {
            return Ok(Err(format!(
                "removed between ListPodSandbox and PodSandboxStatus ({e})"
            )))
        }
        Err(e) => return Err(e),
    };
    Ok(Ok(SandboxFacts {
        cgroup_parent: cgroup_parent_from_info(&resp.info),
        status: resp.status.unwrap_or_default(),
    }))
}

/// A container's status (and, from runtimes that report no resources in
/// it, its verbose config); `Ok(None)` when it is gone.
async fn ask_container(
    client: &CriClient,
    id: &str,
    listed_state: i32,
) -> Result<ContainerAnswer, CriError> {
    let st = match client.container_status(id, false).await {
        Ok(s) => s,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(e),
    };
    let cs = st.status.unwrap_or_default();
    let mut origin = ResourcesOrigin::Status;
    let mut res = cs.resources.as_ref().and_then(|r| r.linux.clone());
    if res.is_none() {
        // Older runtimes: ask again verbosely and read the config.
        if let Ok(v) = client.container_status(id, true).await {
            res = resources_from_info(&v.info);
            origin = ResourcesOrigin::VerboseConfig;
        }
    }
    Ok(Some(ContainerFacts {
        listed_state,
        state: cs.state,
        res,
        origin,
        unverified: false,
    }))
}

/// Pull `linux.cgroup_parent` out of a verbose info map: containerd puts
/// the sandbox config under `info` → `config`; otherwise derive it from the
/// OCI spec's `linux.cgroupsPath` (parent of the sandbox's own cgroup).
pub fn cgroup_parent_from_info(info: &HashMap<String, String>) -> Option<String> {
    let mut keys: Vec<&String> = info.keys().collect();
    keys.sort_by_key(|k| (k.as_str() != "info", k.as_str()));
    for k in &keys {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&info[*k]) else {
            continue;
        };
        if let Some(p) = v
            .pointer("/config/linux/cgroup_parent")
            .and_then(|p| p.as_str())
            .filter(|p| !p.is_empty())
        {
            return Some(p.to_string());
        }
    }
    for k in &keys {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&info[*k]) else {
            continue;
        };
        if let Some(p) = v
            .pointer("/runtimeSpec/linux/cgroupsPath")
            .and_then(|p| p.as_str())
        {
            // systemd form "slice:prefix:name" → the slice; cgroupfs → dirname.
            let parent = match p.split(':').collect::<Vec<_>>().as_slice() {
                [slice, _, _] => slice.to_string(),
                _ => match p.trim_end_matches('/').rsplit_once('/') {
                    Some((dir, _)) if !dir.is_empty() => dir.to_string(),
                    _ => continue,
                },
            };
            return Some(parent);
        }
    }
    None
}

/// Container resources from a verbose container info map (containerd:
/// `info` → `config.linux.resources`, CRI JSON field names).
pub fn resources_from_info(
    info: &HashMap<String, String>,
) -> Option<proto::LinuxContainerResources> {
    for v in info.values() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(v) else {
            continue;
        };
        let Some(r) = v.pointer("/config/linux/resources") else {
            continue;
        };
        let int = |k: &str| r.get(k).and_then(|x| x.as_i64()).unwrap_or(0);
        let mut out = proto::LinuxContainerResources {
            cpu_period: int("cpu_period"),
            cpu_quota: int("cpu_quota"),
            cpu_shares: int("cpu_shares"),
            memory_limit_in_bytes: int("memory_limit_in_bytes"),
            oom_score_adj: int("oom_score_adj"),
            memory_swap_limit_in_bytes: int("memory_swap_limit_in_bytes"),
            cpuset_cpus: r
                .get("cpuset_cpus")
                .and_then(|x| x.as_str())
                .unwrap_or_default()
                .to_string(),
            ..Default::default()
        };
        // The OCI spec follows UpdateContainerResources; the config does not.
        if let Some(cpus) = v
            .pointer("/runtimeSpec/linux/resources/cpu/cpus")
            .and_then(|x| x.as_str())
        {
            out.cpuset_cpus = cpus.to_string();
        }
        // The OCI spec holds the value actually applied (after clamping).
        if let Some(adj) = v
            .pointer("/runtimeSpec/process/oomScoreAdj")
            .and_then(|x| x.as_i64())
        {
            out.oom_score_adj = adj;
        }
        if let Some(u) = r.get("unified").and_then(|u| u.as_object()) {
            for (k, val) in u {
                if let Some(s) = val.as_str() {
                    out.unified.insert(k.clone(), s.to_string());
                }
            }
        }
        return Some(out);
    }
    None
}

fn label<'a>(maps: [&'a HashMap<String, String>; 2], key: &str) -> Option<&'a str> {
    maps.iter()
        .find_map(|m| m.get(key))
        .map(String::as_str)
        .filter(|s| !s.is_empty())
}

fn container_state(s: i32) -> &'static str {
    match proto::ContainerState::try_from(s) {
        Ok(proto::ContainerState::ContainerCreated) => "created",
        Ok(proto::ContainerState::ContainerRunning) => "running",
        Ok(proto::ContainerState::ContainerExited) => "exited",
        _ => "unknown",
    }
}

/// `Err(reason)`: the sandbox is rejected (bad labels).
fn build_pod(
    sb: &proto::PodSandbox,
    facts: SandboxFacts,
    containers: Vec<proto::Container>,
    answers: &HashMap<String, ContainerAnswer>,
    opts: &InventoryOptions,
    cached: bool,
) -> Result<LivePod, String> {
    let SandboxFacts {
        mut status,
        cgroup_parent,
    } = facts;
    // The listing's state is current; a cached status's may not be.
    if cached {
        status.state = sb.state;
    }
    let mut warnings = Vec::new();
    let mut notes = Vec::new();
    let (uid, namespace, name) = identity(sb, &status, &mut notes, &mut warnings)?;
    let state = match proto::PodSandboxState::try_from(status.state) {
        Ok(proto::PodSandboxState::SandboxReady) => SandboxState::Ready,
        _ => SandboxState::NotReady,
    };
    let parsed = cgroup_parent.as_deref().and_then(parse_cgroup_parent);
    match (&cgroup_parent, &parsed) {
        (None, _) => notes.push("the runtime does not report the cgroup parent".to_string()),
        (Some(p), None) => notes.push(format!("cgroup parent {p:?} has no kubepods QoS segment")),
        (Some(p), Some(pp)) if pp.uid != uid => warnings.push(format!(
            "cgroup parent {p:?} names pod uid {:?}, labels say {uid:?}",
            pp.uid
        )),
        _ => {}
    }
    let live = live_containers(containers, answers, &mut warnings);
    let settings: Vec<ContainerSettings> = live
        .iter()
        .filter(|c| c.counted)
        .map(LiveContainer::settings)
        .collect();
    let rec = reconstruct(
        parsed.as_ref().map(|p| p.class),
        &settings,
        opts.memory_capacity_bytes,
    );
    notes.extend(rec.notes);
    warnings.extend(rec.warnings);

    let mut pod = Pod::new(uid, namespace, name);
    pod.containers = rec.containers;
    pod.annotations = status
        .annotations
        .iter()
        .chain(sb.annotations.iter())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    pod.origin = PodOrigin::Cri(sb.id.clone());
    pod.qos_override = Some(rec.class);
    Ok(LivePod {
        pod,
        sandbox_id: sb.id.clone(),
        state,
        qos_class: rec.class,
        qos_source: rec.source,
        cgroup_parent,
        created_at: sb.created_at,
        containers: live,
        notes,
        warnings,
        sources: qosd_model::core::model::provenance_all(
            qosd_model::core::model::ValueSource::Inferred,
        ),
    })
}

/// The pod's (uid, namespace, name) from the kubelet's labels, else the
/// sandbox metadata; `Err` when there is no valid uid.
fn identity(
    sb: &proto::PodSandbox,
    status: &proto::PodSandboxStatus,
    notes: &mut Vec<String>,
    warnings: &mut Vec<String>,
) -> Result<(String, String, String), String> {
    let meta = status
        .metadata
        .clone()
        .or_else(|| sb.metadata.clone())
        .unwrap_or_default();
    let labels = [&status.labels, &sb.labels];
    let uid = match label(labels, LABEL_POD_UID) {
        Some(u) => {
            if !meta.uid.is_empty() && meta.uid != u {
                warnings.push(format!(
                    "label {LABEL_POD_UID}={u:?} differs from the sandbox metadata uid {:?}",
                    meta.uid
                ));
            }
            u.to_string()
        }
        None if !meta.uid.is_empty() => {
            notes.push(format!(
                "no {LABEL_POD_UID} label; uid from the sandbox metadata"
            ));
            meta.uid.clone()
        }
        None => return Err("no pod uid (no label, no metadata)".to_string()),
    };
    if let Err(e) = validate_uid(&uid) {
        return Err(format!("rejected: {e}"));
    }
    let name = label(labels, LABEL_POD_NAME)
        .unwrap_or(&meta.name)
        .to_string();
    let namespace = label(labels, LABEL_POD_NAMESPACE)
        .unwrap_or(&meta.namespace)
        .to_string();
    Ok((uid, namespace, name))
}

/// The sandbox's containers with their settings, sorted by name (newest
/// attempt first); per name the latest attempt, preferring one that has not
/// exited, is `counted` in the pod's resources.
fn live_containers(
    mut containers: Vec<proto::Container>,
    answers: &HashMap<String, ContainerAnswer>,
    warnings: &mut Vec<String>,
) -> Vec<LiveContainer> {
    containers.sort_by(|a, b| {
        let key = |c: &proto::Container| {
            (
                c.metadata.as_ref().map(|m| m.attempt).unwrap_or(0),
                c.created_at,
            )
        };
        key(b).cmp(&key(a))
    });
    let mut counted_by_name: BTreeMap<String, (usize, bool)> = BTreeMap::new();
    let mut live = Vec::new();
    for c in &containers {
        let cname = c
            .metadata
            .as_ref()
            .map(|m| m.name.clone())
            .filter(|n| !n.is_empty())
            .or_else(|| c.labels.get(LABEL_CONTAINER_NAME).cloned())
            .unwrap_or_else(|| c.id.clone());
        let Some(facts) = answers.get(&c.id).cloned().flatten() else {
            warnings.push(format!(
                "container {cname} ({}) vanished before its status was read",
                c.id
            ));
            continue;
        };
        let lc = live_container(c, cname, facts, warnings);
        let exited = lc.state == "exited";
        let take = match counted_by_name.get(&lc.name) {
            None => true,
            Some(&(_, prev_exited)) => prev_exited && !exited,
        };
        if take {
            counted_by_name.insert(lc.name.clone(), (live.len(), exited));
        }
        live.push(lc);
    }
    for (idx, _) in counted_by_name.values() {
        live[*idx].counted = true;
    }
    live.sort_by(|a, b| (&a.name, b.attempt).cmp(&(&b.name, a.attempt)));
    live
}

/// One container as its status reported it (not counted yet).
fn live_container(
    c: &proto::Container,
    name: String,
    facts: ContainerFacts,
    warnings: &mut Vec<String>,
) -> LiveContainer {
    let ContainerFacts {
        state,
        res,
        mut origin,
        ..
    } = facts;
    let settings = res.as_ref().map(|r| ContainerSettings::from_cri(&name, r));
    if settings.is_none() {
        origin = ResourcesOrigin::None;
        warnings.push(format!(
            "container {name}: the runtime reports no resources"
        ));
    }
    let s = settings.unwrap_or_default();
    LiveContainer {
        id: c.id.clone(),
        name,
        state: container_state(state).to_string(),
        attempt: c.metadata.as_ref().map(|m| m.attempt).unwrap_or(0),
        cpu_shares: s.cpu_shares,
        cpu_quota: s.cpu_quota,
        cpu_period: s.cpu_period,
        memory_limit_bytes: s.memory_limit_bytes,
        oom_score_adj: s.oom_score_adj,
        memory_min_bytes: s.memory_min_bytes,
        resources_origin: origin,
        cpuset_cpus: res
            .as_ref()
            .map(|r| r.cpuset_cpus.clone())
            .filter(|c| !c.is_empty()),
        counted: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parent_from_containerd_info() {
        let mut info = HashMap::new();
        info.insert(
            "info".to_string(),
            r#"{"pid":1,"config":{"linux":{"cgroup_parent":"/kubepods/besteffort/podabc"}},
                "runtimeSpec":{"linux":{"cgroupsPath":"/kubepods/besteffort/podabc/0123"}}}"#
                .to_string(),
        );
        assert_eq!(
            cgroup_parent_from_info(&info).as_deref(),
            Some("/kubepods/besteffort/podabc")
        );
        // CRI-O-like: only the OCI spec, systemd form.
        let mut info = HashMap::new();
        info.insert(
            "info".to_string(),
            r#"{"runtimeSpec":{"linux":{"cgroupsPath":"kubepods-burstable-podx_y.slice:crio:0123"}}}"#
                .to_string(),
        );
        assert_eq!(
            cgroup_parent_from_info(&info).as_deref(),
            Some("kubepods-burstable-podx_y.slice")
        );
        let mut info = HashMap::new();
        info.insert("info".to_string(), "not json".to_string());
        assert_eq!(cgroup_parent_from_info(&info), None);
        assert_eq!(cgroup_parent_from_info(&HashMap::new()), None);
    }

    #[test]
    fn resources_from_verbose_info() {
        let mut info = HashMap::new();
        info.insert(
            "info".to_string(),
            r#"{"config":{"linux":{"resources":{"cpu_period":100000,"cpu_quota":50000,
                "cpu_shares":512,"memory_limit_in_bytes":268435456,"oom_score_adj":-997,
                "unified":{"memory.min":"1048576"}}}},
                "runtimeSpec":{"process":{"oomScoreAdj":0}}}"#
                .to_string(),
        );
        let r = resources_from_info(&info).unwrap();
        assert_eq!(
            (
                r.cpu_period,
                r.cpu_quota,
                r.cpu_shares,
                r.memory_limit_in_bytes,
                r.oom_score_adj
            ),
            (100_000, 50_000, 512, 268_435_456, 0)
        );
        assert_eq!(
            r.unified.get("memory.min").map(String::as_str),
            Some("1048576")
        );
    }
}

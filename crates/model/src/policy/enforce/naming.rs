//! Names and paths of the kubepods cgroup hierarchy, exactly as the kubelet
//! builds them (pkg/kubelet/cm/cgroup_manager_linux.go, `CgroupName`).
//!
//! A cgroup name is a list of components: node `[root.., "kubepods"]`, QoS
//! `[.., "burstable"|"besteffort"]` (Guaranteed pods sit under the node
//! cgroup), pod `[.., "pod<uid>"]`.
//! * cgroupfs driver: components joined with `/`:
//!   `kubepods/burstable/pod<uid>`;
//! * systemd driver: every component escaped (`-` → `_`), joined with `-`,
//!   suffixed `.slice` and expanded into the slice path:
//!   `kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid with _>.slice`.
//!
//! `--cgroup-root` (kubelet meaning: the cgroup under which `kubepods`
//! lives; default `/`) contributes leading components. With the systemd
//! driver a root that is already a slice path (`/foo.slice/foo-bar.slice`)
//! is parsed back into components (`foo`, `bar`) first.
//!
//! Relative cgroup paths in this module have no leading `/` and are
//! relative to the hierarchy root (the cgroupfs mount, or a v1 controller
//! directory). Absolute file paths:
//! * v1: `<cgroupfs>/<controller dir>/<cgroup>/<file>` (`cpu.*` under the
//!   `cpu` directory, which is the `cpu,cpuacct` co-mount's usual symlink;
//!   `memory.*` under `memory`; `pids.*` under `pids`);
//! * v2: `<cgroupfs>/<cgroup>/<file>`.

use std::path::{Path, PathBuf};

use crate::core::model::{CgroupDriver, CgroupVersion, QosClass};

/// The node-allocatable cgroup's name (`defaultNodeAllocatableCgroupName`).
pub(crate) const KUBEPODS: &str = "kubepods";

/// Directory names of the v1 controllers under the cgroupfs mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct V1ControllerDirs {
    /// The cpu controller's directory (`cpu`, or `cpu,cpuacct` where co-mounted).
    pub cpu: String,
    pub(crate) memory: String,
    pub(crate) pids: String,
}

impl Default for V1ControllerDirs {
    fn default() -> Self {
        V1ControllerDirs {
            cpu: "cpu".to_string(),
            memory: "memory".to_string(),
            pids: "pids".to_string(),
        }
    }
}

/// Where and how the kubepods hierarchy is laid out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupLayout {
    /// cgroup v1 or v2.
    pub version: CgroupVersion,
    /// The kubelet's `cgroupDriver`: how cgroups are named.
    pub driver: CgroupDriver,
    /// Mount point of the cgroup filesystem (`/sys/fs/cgroup`).
    pub cgroupfs: PathBuf,
    /// kubelet `--cgroup-root` (`/` by default).
    pub cgroup_root: String,
    /// v1 only: controller directory names.
    pub v1_dirs: V1ControllerDirs,
}

impl CgroupLayout {
    /// The kubelet's defaults: cgroupfs at `/sys/fs/cgroup`, `--cgroup-root` `/`, v1 controllers
    /// under their own names.
    pub fn new(version: CgroupVersion, driver: CgroupDriver) -> CgroupLayout {
        CgroupLayout {
            version,
            driver,
            cgroupfs: PathBuf::from("/sys/fs/cgroup"),
            cgroup_root: "/".to_string(),
            v1_dirs: V1ControllerDirs::default(),
        }
    }

    /// Set the cgroup filesystem's mount point.
    pub fn with_cgroupfs(mut self, p: impl Into<PathBuf>) -> Self {
        self.cgroupfs = p.into();
        self
    }

    /// Set `--cgroup-root`.
    pub fn with_cgroup_root(mut self, r: impl Into<String>) -> Self {
        self.cgroup_root = r.into();
        self
    }

    /// Components of `--cgroup-root`.
    pub(crate) fn root_components(&self) -> Vec<String> {
        let parts: Vec<&str> = self
            .cgroup_root
            .split('/')
            .filter(|p| !p.is_empty())
            .collect();
        if self.driver == CgroupDriver::Systemd
            && parts.last().is_some_and(|p| p.ends_with(".slice"))
        {
            // ParseSystemdToCgroupName: each slice's own part, unescaped.
            let mut out = Vec::new();
            let mut prefix = String::new();
            for p in parts {
                let base = p.strip_suffix(".slice").unwrap_or(p);
                let own = base.strip_prefix(&prefix).unwrap_or(base);
                out.push(own.replace('_', "-"));
                prefix = format!("{base}-");
            }
            return out;
        }
        parts.into_iter().map(str::to_string).collect()
    }

    /// Render a cgroup name (components) as a path relative to the
    /// hierarchy root, per driver.
    pub(crate) fn render(&self, components: &[String]) -> String {
        match self.driver {
            CgroupDriver::Cgroupfs => components.join("/"),
            CgroupDriver::Systemd => systemd_path(components),
        }
    }

    pub(crate) fn node_components(&self) -> Vec<String> {
        let mut c = self.root_components();
        c.push(KUBEPODS.to_string());
        c
    }

    pub(crate) fn qos_components(&self, class: QosClass) -> Vec<String> {
        let mut c = self.node_components();
        if let Some(seg) = class.cgroup_segment() {
            c.push(seg.to_string());
        }
        c
    }

    pub(crate) fn pod_components(&self, class: QosClass, uid: &str) -> Vec<String> {
        let mut c = self.qos_components(class);
        c.push(format!("pod{uid}"));
        c
    }

    /// `kubepods` (cgroupfs) or `kubepods.slice` (systemd), under the root.
    pub fn node_cgroup(&self) -> String {
        self.render(&self.node_components())
    }

    /// The QoS-level cgroup (Guaranteed: the node cgroup).
    pub fn qos_cgroup(&self, class: QosClass) -> String {
        self.render(&self.qos_components(class))
    }

    /// The pod's cgroup.
    pub fn pod_cgroup(&self, class: QosClass, uid: &str) -> String {
        self.render(&self.pod_components(class, uid))
    }

    /// Precomputed names for naming many pods quickly (the planner).
    pub(crate) fn pod_namer(&self) -> PodNamer {
        let classes = [
            QosClass::Guaranteed,
            QosClass::Burstable,
            QosClass::BestEffort,
        ];
        PodNamer {
            driver: self.driver,
            qos: classes.map(|c| self.qos_cgroup(c)),
            slice_prefix: classes.map(|c| {
                let parts: Vec<String> = self
                    .qos_components(c)
                    .iter()
                    .map(|p| p.replace('-', "_"))
                    .collect();
                parts.join("-")
            }),
        }
    }

    /// What the kubelet hands the runtime as `cgroup_parent` for a pod:
    /// cgroupfs `/kubepods/burstable/pod<uid>`; systemd the slice's name
    /// `kubepods-burstable-pod<uid>.slice`.
    pub(crate) fn cri_cgroup_parent(&self, class: QosClass, uid: &str) -> String {
        let rel = self.pod_cgroup(class, uid);
        match self.driver {
            CgroupDriver::Cgroupfs => format!("/{rel}"),
            CgroupDriver::Systemd => rel.rsplit('/').next().unwrap_or("").to_string(),
        }
    }

    /// Directory of a v1 controller under the mount (`cpu`, `memory`,
    /// `pids`; other names as given).
    pub fn v1_controller_dir<'a>(&'a self, controller: &'a str) -> &'a str {
        match controller {
            "cpu" => &self.v1_dirs.cpu,
            "memory" => &self.v1_dirs.memory,
            "pids" => &self.v1_dirs.pids,
            other => other,
        }
    }

    /// Absolute directory of `cgroup` (relative path) for `controller`
    /// (ignored on v2).
    pub fn dir(&self, cgroup: &str, controller: &str) -> PathBuf {
        let base: PathBuf = match self.version {
            CgroupVersion::V2 => self.cgroupfs.clone(),
            CgroupVersion::V1 => self.cgroupfs.join(self.v1_controller_dir(controller)),
        };
        join_rel(&base, cgroup)
    }

    /// Absolute path of interface file `file` (e.g. `cpu.shares`) of
    /// `cgroup`; the v1 controller is the file name's prefix.
    pub fn file(&self, cgroup: &str, file: &str) -> PathBuf {
        let controller = file.split('.').next().unwrap_or(file);
        self.dir(cgroup, controller).join(file)
    }
}

fn join_rel(base: &Path, rel: &str) -> PathBuf {
    let rel = rel.trim_matches('/');
    if rel.is_empty() {
        base.to_path_buf()
    } else {
        base.join(rel)
    }
}

/// Pod cgroup names from precomputed QoS prefixes
/// ([`CgroupLayout::pod_namer`]); same result as [`CgroupLayout::pod_cgroup`].
#[derive(Debug, Clone)]
pub(crate) struct PodNamer {
    driver: CgroupDriver,
    qos: [String; 3],
    slice_prefix: [String; 3],
}

impl PodNamer {
    pub(crate) fn pod_cgroup(&self, class: QosClass, uid: &str) -> String {
        let i = class as usize;
        match self.driver {
            CgroupDriver::Cgroupfs => format!("{}/pod{uid}", self.qos[i]),
            CgroupDriver::Systemd => format!(
                "{}/{}-pod{}.slice",
                self.qos[i],
                self.slice_prefix[i],
                uid.replace('-', "_")
            ),
        }
    }
}

/// `CgroupName.ToSystemd()` + `ExpandSlice`, without the leading `/`.
fn systemd_path(components: &[String]) -> String {
    let escaped: Vec<String> = components.iter().map(|c| c.replace('-', "_")).collect();
    let mut out = Vec::with_capacity(escaped.len());
    let mut prefix = String::new();
    for part in &escaped {
        out.push(format!("{prefix}{part}.slice"));
        prefix.push_str(part);
        prefix.push('-');
    }
    out.join("/")
}

/// Map a CRI sandbox `cgroup_parent` back to (QoS class, pod uid).
///
/// Accepts cgroupfs paths (`/kubepods/burstable/pod<uid>`,
/// `/kubepods/pod<uid>`, possibly under a cgroup-root prefix) and systemd
/// names or paths (`kubepods-besteffort-pod<uid_>.slice`,
/// `/kubepods.slice/kubepods-pod<uid_>.slice`, possibly with a root
/// prefix such as `foo-kubepods-...`). Returns `None` for anything else.
pub fn parse_cgroup_parent(parent: &str) -> Option<(QosClass, String)> {
    let trimmed = parent.trim_end_matches('/');
    let last = trimmed.rsplit('/').next()?;
    if let Some(name) = last.strip_suffix(".slice") {
        // systemd: components separated by '-', '-' inside escaped to '_'.
        let parts: Vec<&str> = name.split('-').collect();
        let (pod, before) = parts.split_last()?;
        let uid = pod.strip_prefix("pod")?;
        let class = class_of(before.last()?, before)?;
        if uid.is_empty() {
            return None;
        }
        return Some((class, uid.replace('_', "-")));
    }
    let parts: Vec<&str> = trimmed.split('/').filter(|p| !p.is_empty()).collect();
    let (pod, before) = parts.split_last()?;
    let uid = pod.strip_prefix("pod")?;
    if uid.is_empty() {
        return None;
    }
    let class = class_of(before.last()?, before)?;
    Some((class, uid.to_string()))
}

fn class_of(seg: &str, before: &[&str]) -> Option<QosClass> {
    match seg {
        KUBEPODS => Some(QosClass::Guaranteed),
        "burstable" | "besteffort" if before.len() >= 2 && before[before.len() - 2] == KUBEPODS => {
            Some(if seg == "burstable" {
                QosClass::Burstable
            } else {
                QosClass::BestEffort
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use CgroupDriver::*;
    use CgroupVersion::*;
    use QosClass::*;

    const UID: &str = "1234-abcd-5678";

    #[test]
    fn names_per_driver() {
        let fs = CgroupLayout::new(V1, Cgroupfs);
        assert_eq!(fs.node_cgroup(), "kubepods");
        assert_eq!(fs.qos_cgroup(Burstable), "kubepods/burstable");
        assert_eq!(fs.qos_cgroup(Guaranteed), "kubepods");
        assert_eq!(
            fs.pod_cgroup(BestEffort, UID),
            "kubepods/besteffort/pod1234-abcd-5678"
        );
        assert_eq!(fs.pod_cgroup(Guaranteed, UID), "kubepods/pod1234-abcd-5678");
        let sd = CgroupLayout::new(V2, Systemd);
        assert_eq!(sd.node_cgroup(), "kubepods.slice");
        assert_eq!(
            sd.qos_cgroup(BestEffort),
            "kubepods.slice/kubepods-besteffort.slice"
        );
        assert_eq!(
            sd.pod_cgroup(Burstable, UID),
            "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd_5678.slice"
        );
        assert_eq!(
            sd.pod_cgroup(Guaranteed, UID),
            "kubepods.slice/kubepods-pod1234_abcd_5678.slice"
        );
    }

    #[test]
    fn pod_namer_agrees() {
        for driver in [Cgroupfs, Systemd] {
            for root in ["/", "/qosd-test-1", "/a-b/c", "/foo.slice/foo-bar.slice"] {
                let l = CgroupLayout::new(V2, driver).with_cgroup_root(root);
                let n = l.pod_namer();
                for class in [Guaranteed, Burstable, BestEffort] {
                    assert_eq!(
                        n.pod_cgroup(class, UID),
                        l.pod_cgroup(class, UID),
                        "{driver} {root}"
                    );
                }
            }
        }
    }

    #[test]
    fn cgroup_root() {
        let fs = CgroupLayout::new(V2, Cgroupfs).with_cgroup_root("/qosd-test-42/");
        assert_eq!(
            fs.pod_cgroup(Burstable, "u"),
            "qosd-test-42/kubepods/burstable/podu"
        );
        let sd = CgroupLayout::new(V2, Systemd).with_cgroup_root("/qosd-test-42");
        assert_eq!(
            sd.pod_cgroup(Burstable, "u"),
            "qosd_test_42.slice/qosd_test_42-kubepods.slice/qosd_test_42-kubepods-burstable.slice/qosd_test_42-kubepods-burstable-podu.slice"
        );
        let sd = CgroupLayout::new(V2, Systemd).with_cgroup_root("/foo.slice/foo-bar.slice");
        assert_eq!(sd.root_components(), vec!["foo", "bar"]);
        assert_eq!(
            sd.node_cgroup(),
            "foo.slice/foo-bar.slice/foo-bar-kubepods.slice"
        );
    }

    #[test]
    fn files() {
        let v1 = CgroupLayout::new(V1, Cgroupfs);
        assert_eq!(
            v1.file("kubepods/burstable/podu", "cpu.shares"),
            PathBuf::from("/sys/fs/cgroup/cpu/kubepods/burstable/podu/cpu.shares")
        );
        assert_eq!(
            v1.file("kubepods", "memory.limit_in_bytes"),
            PathBuf::from("/sys/fs/cgroup/memory/kubepods/memory.limit_in_bytes")
        );
        assert_eq!(
            v1.file("kubepods", "pids.max"),
            PathBuf::from("/sys/fs/cgroup/pids/kubepods/pids.max")
        );
        let mut co = v1.clone();
        co.v1_dirs.cpu = "cpu,cpuacct".into();
        assert_eq!(
            co.file("kubepods", "cpu.cfs_quota_us"),
            PathBuf::from("/sys/fs/cgroup/cpu,cpuacct/kubepods/cpu.cfs_quota_us")
        );
        let v2 = CgroupLayout::new(V2, Systemd).with_cgroupfs("/tmp/x");
        assert_eq!(
            v2.file("kubepods.slice", "cpu.weight"),
            PathBuf::from("/tmp/x/kubepods.slice/cpu.weight")
        );
    }

    #[test]
    fn cri_parent_round_trip() {
        for driver in [Cgroupfs, Systemd] {
            for root in ["/", "/qosd-test-7", "/a/b"] {
                let l = CgroupLayout::new(V2, driver).with_cgroup_root(root);
                for class in [Guaranteed, Burstable, BestEffort] {
                    let parent = l.cri_cgroup_parent(class, UID);
                    assert_eq!(
                        parse_cgroup_parent(&parent),
                        Some((class, UID.to_string())),
                        "{driver} {root} {parent}"
                    );
                    let full = format!("/{}", l.pod_cgroup(class, UID));
                    assert_eq!(
                        parse_cgroup_parent(&full),
                        Some((class, UID.to_string())),
                        "{full}"
                    );
                }
            }
        }
        assert_eq!(
            parse_cgroup_parent("kubepods-burstable-pod1234_abcd.slice"),
            Some((Burstable, "1234-abcd".into()))
        );
        assert_eq!(
            parse_cgroup_parent("/kubepods/besteffort/podabc"),
            Some((BestEffort, "abc".into()))
        );
        for bad in [
            "",
            "/",
            "/system.slice",
            "/kubepods",
            "/kubepods/burstable",
            "/foo/podabc",
            "/kubepods/burstable/pod",
            "system-foo.slice",
            "/burstable/podx",
        ] {
            assert_eq!(parse_cgroup_parent(bad), None, "{bad}");
        }
    }
}

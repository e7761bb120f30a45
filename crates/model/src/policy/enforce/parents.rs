//! Refuse to build a parallel tree: the cgroup parents the runtime reports
//! for its pods must be the ones the configured `cgroupRoot` and
//! `cgroupDriver` produce. Otherwise qosd would write a second, empty
//! `kubepods` tree beside the real one and report success.

use crate::core::model::{CgroupDriver, QosClass};
use crate::policy::enforce::naming::{parse_cgroup_parent, CgroupLayout};

/// A pod whose reported parent differs from the planned one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Misplaced {
    /// `namespace/name (uid)`.
    pub(crate) pod: String,
    /// What the runtime reports.
    pub(crate) reported: String,
    /// What the configuration would produce.
    pub(crate) planned: String,
}

/// Every misplaced pod and the settings that would match them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.message())]
pub struct ParentMismatch {
    /// The misplaced pods.
    pub pods: Vec<Misplaced>,
    /// The configured `cgroupRoot` and `cgroupDriver`.
    pub(crate) cgroup_root: String,
    pub(crate) driver: CgroupDriver,
    /// `cgroupRoot` / `cgroupDriver` that would produce the reported parents.
    pub(crate) matching_root: Option<String>,
    pub(crate) matching_driver: CgroupDriver,
}

impl ParentMismatch {
    fn message(&self) -> String {
        let mut s = format!(
            "refusing to build a parallel cgroup tree: {} pod(s) live under a cgroup parent that cgroupRoot {:?} with cgroupDriver {} would not produce:",
            self.pods.len(),
            self.cgroup_root,
            self.driver
        );
        for p in self.pods.iter().take(10) {
            s.push_str(&format!(
                "\n  {}: runtime reports {:?}, qosd would use {:?}",
                p.pod, p.reported, p.planned
            ));
        }
        if self.pods.len() > 10 {
            s.push_str(&format!("\n  … and {} more", self.pods.len() - 10));
        }
        match &self.matching_root {
            Some(root) => s.push_str(&format!(
                "\nset cgroupRoot: {root:?} and cgroupDriver: {} (--cgroup-root {root} --cgroup-driver {}) to match the runtime",
                self.matching_driver, self.matching_driver
            )),
            None => s.push_str("\nno cgroupRoot/cgroupDriver reproduces these parents; check the runtime's cgroup configuration"),
        }
        s
    }
}

/// One live pod: identity, the class qosd gives it and the reported parent.
#[derive(Debug, Clone)]
pub struct Reported<'a> {
    /// `namespace` and `name` (put together only for a misplaced pod: the
    /// check runs at every reconcile).
    pub namespace: &'a str,
    /// The pod's name (see `namespace`).
    pub name: &'a str,
    /// The pod's uid.
    pub uid: &'a str,
    /// The QoS class qosd gives the pod.
    pub class: QosClass,
    /// The cgroup parent the runtime reports for the pod's sandbox.
    pub parent: &'a str,
}

/// Check every reported parent against the layout (pods without a parent
/// or whose parent names no pod cgroup are not judged).
pub fn check(layout: &CgroupLayout, pods: &[Reported<'_>]) -> Result<(), ParentMismatch> {
    let mut bad = Vec::new();
    let mut guess: Option<(Option<String>, CgroupDriver)> = None;
    for p in pods {
        let reported = p.parent.trim_end_matches('/');
        if parse_cgroup_parent(reported).is_none() {
            continue;
        }
        let planned = layout.cri_cgroup_parent(p.class, p.uid);
        let same = match layout.driver {
            CgroupDriver::Cgroupfs => reported == planned,
            // A systemd parent is a slice name (or a path ending in it).
            CgroupDriver::Systemd => reported.rsplit('/').next() == Some(planned.as_str()),
        };
        if !same {
            if guess.is_none() {
                guess = Some(matching_settings(reported));
            }
            bad.push(Misplaced {
                pod: format!("{}/{} ({})", p.namespace, p.name, p.uid),
                reported: reported.to_string(),
                planned,
            });
        }
    }
    if bad.is_empty() {
        return Ok(());
    }
    let (matching_root, matching_driver) = guess.unwrap_or((None, layout.driver));
    Err(ParentMismatch {
        pods: bad,
        cgroup_root: layout.cgroup_root.clone(),
        driver: layout.driver,
        matching_root,
        matching_driver,
    })
}

/// The `cgroupRoot` and driver that produce a reported parent.
fn matching_settings(reported: &str) -> (Option<String>, CgroupDriver) {
    let last = reported.rsplit('/').next().unwrap_or("");
    if let Some(name) = last.strip_suffix(".slice") {
        // `<root>-kubepods-…-pod<uid>.slice`: the root is the prefix.
        let root = match name.find("kubepods") {
            Some(0) => Some("/".to_string()),
            Some(i) => Some(format!("/{}.slice", name[..i].trim_end_matches('-'))),
            None => None,
        };
        return (root, CgroupDriver::Systemd);
    }
    let root = reported.find("/kubepods").map(|i| {
        let r = &reported[..i];
        if r.is_empty() {
            "/".to_string()
        } else {
            r.to_string()
        }
    });
    (root, CgroupDriver::Cgroupfs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::CgroupVersion;

    fn pod<'a>(uid: &'a str, class: QosClass, parent: &'a str) -> Reported<'a> {
        Reported {
            namespace: "default",
            name: uid,
            uid,
            class,
            parent,
        }
    }

    #[test]
    fn matching_parents_pass() {
        let l = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs);
        let pods = [
            pod("a", QosClass::Burstable, "/kubepods/burstable/poda"),
            pod("b", QosClass::Guaranteed, "/kubepods/podb/"),
            pod("c", QosClass::BestEffort, "not-a-pod-cgroup"),
        ];
        assert_eq!(check(&l, &pods), Ok(()));
        let l = CgroupLayout::new(CgroupVersion::V2, CgroupDriver::Systemd);
        let pods = [pod(
            "a-1",
            QosClass::BestEffort,
            "kubepods-besteffort-poda_1.slice",
        )];
        assert_eq!(check(&l, &pods), Ok(()));
    }

    #[test]
    fn other_root_is_named_with_the_matching_setting() {
        let l = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs);
        let pods = [
            pod(
                "a",
                QosClass::Burstable,
                "/qosd-test-1/kubepods/burstable/poda",
            ),
            pod("b", QosClass::Burstable, "/kubepods/burstable/podb"),
        ];
        let e = check(&l, &pods).unwrap_err();
        assert_eq!(e.pods.len(), 1);
        assert_eq!(e.matching_root.as_deref(), Some("/qosd-test-1"));
        let m = e.to_string();
        assert!(m.contains("default/a (a)"), "{m}");
        assert!(
            m.contains("\"/qosd-test-1/kubepods/burstable/poda\""),
            "{m}"
        );
        assert!(m.contains("cgroupRoot: \"/qosd-test-1\""), "{m}");
        let l = CgroupLayout::new(CgroupVersion::V2, CgroupDriver::Cgroupfs);
        let pods = [pod(
            "a",
            QosClass::BestEffort,
            "kubepods-besteffort-poda.slice",
        )];
        let e = check(&l, &pods).unwrap_err();
        assert_eq!(e.matching_driver, CgroupDriver::Systemd);
        assert_eq!(e.matching_root.as_deref(), Some("/"));
    }
}

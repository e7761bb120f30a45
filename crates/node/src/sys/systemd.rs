//! The systemd cgroup driver done the kubelet's way: the kubepods, QoS and
//! pod slices are systemd units, created with `StartTransientUnit` and
//! updated with `SetUnitProperties(runtime=true)` over D-Bus (a pure-Rust
//! client, zbus; no libdbus), then the cgroup files are read back.
//!
//! * `probe` decides whether systemd manages the tree: `/run/systemd/system`
//!   is a directory (sd_booted), PID 1 is `systemd`, and its manager answers
//!   on the system bus. Otherwise qosd writes cgroupfs directly, with a
//!   warning ([`Driver::choose`]).
//! * `SystemdApplier::apply` is the applier of a systemd-driver plan: per
//!   slice, in plan order (parents first), it reads the planned files; a
//!   slice that is not a unit yet is started as a transient unit with all
//!   its properties; a unit whose files differ gets its properties set; a
//!   unit seen for the first time (qosd restarted, or a pod slice that runc
//!   created implicitly for a pod's scopes) has its properties compared and
//!   set when they differ, so a later `daemon-reload` cannot bring back other
//!   values. Then the files are read again until they hold the plan (a
//!   value systemd did not set is written to cgroupfs, as libcontainer
//!   does, with a warning). Steady state: file reads only, no D-Bus call.
//! * Dry run never calls a D-Bus method that changes anything: it is the
//!   cgroupfs applier's dry run.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use zbus::blocking::Connection;
use zbus::zvariant::{OwnedObjectPath, OwnedValue, Value};

use crate::sys::apply::{self, Applier, ApplyError, ApplyReport, Mode};
use crate::sys::cgroupfs::{self, CgroupFsError};
use qosd_model::core::model::CgroupWrite;
use qosd_model::policy::enforce::units::{self, UnitProperty};

const DEST: &str = "org.freedesktop.systemd1";
const MANAGER_PATH: &str = "/org/freedesktop/systemd1";
const MANAGER: &str = "org.freedesktop.systemd1.Manager";
const UNIT: &str = "org.freedesktop.systemd1.Unit";
const SLICE: &str = "org.freedesktop.systemd1.Slice";
const PROPERTIES: &str = "org.freedesktop.DBus.Properties";
const NO_SUCH_UNIT: &str = "org.freedesktop.systemd1.NoSuchUnit";

/// The default system bus socket.
pub(crate) const SYSTEM_BUS: &str = "unix:path=/run/dbus/system_bus_socket";

/// Errors of the systemd driver, with the unit and what was asked.
#[derive(Debug, thiserror::Error)]
pub enum SystemdError {
    /// The system was not booted with systemd.
    #[error("systemd is not running: {marker} is not a directory (sd_booted)")]
    NotBooted {
        /// The directory that marks it (`/run/systemd/system`).
        marker: PathBuf,
    },
    /// PID 1 is another init.
    #[error("PID 1 is {comm:?}, not systemd ({path})")]
    Pid1 {
        /// The file naming PID 1 (`/proc/1/comm`).
        path: PathBuf,
        /// Its command name.
        comm: String,
    },
    /// The system bus could not be reached.
    #[error("cannot reach systemd on the D-Bus system bus {address}: {source}")]
    Bus {
        /// The bus address.
        address: String,
        /// The D-Bus error.
        #[source]
        source: Box<zbus::Error>,
    },
    /// A systemd manager call failed.
    #[error("systemd {method} {unit}: {source}")]
    Call {
        /// The D-Bus method.
        method: &'static str,
        /// The unit it was about.
        unit: String,
        /// The D-Bus error.
        #[source]
        source: Box<zbus::Error>,
    },
    /// A unit started did not become active in time.
    #[error("systemd unit {unit} did not become active within {waited:?} (state {state})")]
    NotActive {
        /// The unit.
        unit: String,
        /// Its last `ActiveState`.
        state: String,
        /// How long it waited.
        waited: Duration,
    },
}

/// Where to look for systemd (every path a parameter).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemdProbe {
    /// `/run/systemd/system` (exists as a directory iff booted with systemd).
    pub(crate) booted_marker: PathBuf,
    /// `/proc/1/comm`.
    pub(crate) pid1_comm: PathBuf,
    /// The D-Bus address of the system bus.
    pub(crate) bus_address: String,
}

impl Default for SystemdProbe {
    fn default() -> Self {
        SystemdProbe {
            booted_marker: PathBuf::from("/run/systemd/system"),
            pid1_comm: PathBuf::from("/proc/1/comm"),
            bus_address: std::env::var("DBUS_SYSTEM_BUS_ADDRESS")
                .unwrap_or_else(|_| SYSTEM_BUS.to_string()),
        }
    }
}

/// Is systemd PID 1 and reachable? The connection to its manager if so.
pub(crate) fn probe(p: &SystemdProbe) -> Result<Systemd, SystemdError> {
    if !p.booted_marker.is_dir() {
        return Err(SystemdError::NotBooted {
            marker: p.booted_marker.clone(),
        });
    }
    let comm = std::fs::read_to_string(&p.pid1_comm)
        .unwrap_or_default()
        .trim()
        .to_string();
    if comm != "systemd" {
        return Err(SystemdError::Pid1 {
            path: p.pid1_comm.clone(),
            comm,
        });
    }
    Systemd::connect(&p.bus_address)
}

/// A unit's state as systemd reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UnitState {
    pub(crate) path: OwnedObjectPath,
    /// `active`, `inactive`, `activating`, `failed`, …
    pub(crate) active_state: String,
}

/// A connection to systemd's manager (org.freedesktop.systemd1).
pub(crate) struct Systemd {
    conn: Connection,
    address: String,
}

impl std::fmt::Debug for Systemd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Systemd")
            .field("address", &self.address)
            .finish()
    }
}

fn prop_value(p: &UnitProperty) -> Value<'static> {
    Value::U64(p.value)
}

impl Systemd {
    /// Connect to the bus at `address` and check the manager answers.
    pub(crate) fn connect(address: &str) -> Result<Systemd, SystemdError> {
        let bus = |source| SystemdError::Bus {
            address: address.to_string(),
            source: Box::new(source),
        };
        let conn = zbus::blocking::connection::Builder::address(address)
            .map_err(bus)?
            .method_timeout(Duration::from_secs(15))
            .build()
            .map_err(bus)?;
        let sd = Systemd {
            conn,
            address: address.to_string(),
        };
        sd.version().map_err(|e| match e {
            SystemdError::Call { source, .. } => bus(*source),
            other => other,
        })?;
        Ok(sd)
    }

    fn call<B>(
        &self,
        method: &'static str,
        unit: &str,
        body: &B,
    ) -> Result<zbus::message::Message, SystemdError>
    where
        B: serde::Serialize + zbus::zvariant::DynamicType,
    {
        self.conn
            .call_method(Some(DEST), MANAGER_PATH, Some(MANAGER), method, body)
            .map_err(|source| SystemdError::Call {
                method,
                unit: unit.to_string(),
                source: Box::new(source),
            })
    }

    fn get(
        &self,
        path: &OwnedObjectPath,
        iface: &str,
        prop: &str,
        unit: &str,
    ) -> Result<OwnedValue, SystemdError> {
        let m = self
            .conn
            .call_method(
                Some(DEST),
                path.as_str(),
                Some(PROPERTIES),
                "Get",
                &(iface, prop),
            )
            .map_err(|source| SystemdError::Call {
                method: "Get",
                unit: unit.to_string(),
                source: Box::new(source),
            })?;
        m.body()
            .deserialize::<OwnedValue>()
            .map_err(|source| SystemdError::Call {
                method: "Get",
                unit: unit.to_string(),
                source: Box::new(source),
            })
    }

    /// The manager's `Version` property (e.g. `252.33-1~deb12u1`).
    pub(crate) fn version(&self) -> Result<String, SystemdError> {
        let path = OwnedObjectPath::try_from(MANAGER_PATH).expect("valid path");
        let v = self.get(&path, MANAGER, "Version", "(manager)")?;
        Ok(String::try_from(v).unwrap_or_default())
    }

    /// The unit's object path and state; `None` when systemd has no such unit
    /// loaded.
    pub(crate) fn unit_state(&self, unit: &str) -> Result<Option<UnitState>, SystemdError> {
        let m = match self.conn.call_method(
            Some(DEST),
            MANAGER_PATH,
            Some(MANAGER),
            "GetUnit",
            &(unit,),
        ) {
            Ok(m) => m,
            Err(zbus::Error::MethodError(name, _, _)) if name.as_str() == NO_SUCH_UNIT => {
                return Ok(None)
            }
            Err(source) => {
                return Err(SystemdError::Call {
                    method: "GetUnit",
                    unit: unit.to_string(),
                    source: Box::new(source),
                })
            }
        };
        let path: OwnedObjectPath =
            m.body()
                .deserialize()
                .map_err(|source: zbus::Error| SystemdError::Call {
                    method: "GetUnit",
                    unit: unit.to_string(),
                    source: Box::new(source),
                })?;
        let state = self.get(&path, UNIT, "ActiveState", unit)?;
        Ok(Some(UnitState {
            path,
            active_state: String::try_from(state).unwrap_or_default(),
        }))
    }

    /// Current values of a slice's resource properties (`names`).
    pub(crate) fn slice_properties(
        &self,
        state: &UnitState,
        unit: &str,
        names: &[&str],
    ) -> Result<HashMap<String, u64>, SystemdError> {
        let mut out = HashMap::new();
        for n in names {
            let v = self.get(&state.path, SLICE, n, unit)?;
            if let Ok(x) = u64::try_from(v) {
                out.insert((*n).to_string(), x);
            }
        }
        Ok(out)
    }

    /// `StartTransientUnit(unit, "replace")` for a slice under `parent`
    /// (`Wants=` the parent, like libcontainer), accounting on, no default
    /// dependencies, with `props`.
    pub(crate) fn start_transient_slice(
        &self,
        unit: &str,
        parent: &str,
        props: &[UnitProperty],
    ) -> Result<(), SystemdError> {
        let mut all: Vec<(&str, Value<'_>)> = vec![
            (
                "Description",
                Value::from(format!("qosd: kubelet cgroup {unit}")),
            ),
            ("DefaultDependencies", Value::Bool(false)),
            ("CPUAccounting", Value::Bool(true)),
            ("MemoryAccounting", Value::Bool(true)),
            ("TasksAccounting", Value::Bool(true)),
            ("IOAccounting", Value::Bool(true)),
        ];
        if parent != "-.slice" {
            all.push(("Wants", Value::from(vec![parent.to_string()])));
        }
        all.extend(props.iter().map(|p| (p.name, prop_value(p))));
        let aux: Vec<(&str, Vec<(&str, Value<'_>)>)> = Vec::new();
        self.call("StartTransientUnit", unit, &(unit, "replace", all, aux))?;
        Ok(())
    }

    /// `SetUnitProperties(unit, runtime=true, props)`: kept in
    /// /run/systemd/system.control until reboot, survives `daemon-reload`.
    pub(crate) fn set_properties(
        &self,
        unit: &str,
        props: &[UnitProperty],
    ) -> Result<(), SystemdError> {
        let mut all: Vec<(&str, Value<'_>)> = vec![
            ("CPUAccounting", Value::Bool(true)),
            ("MemoryAccounting", Value::Bool(true)),
            ("TasksAccounting", Value::Bool(true)),
        ];
        all.extend(props.iter().map(|p| (p.name, prop_value(p))));
        self.call("SetUnitProperties", unit, &(unit, true, all))?;
        Ok(())
    }

    /// `StartUnit(unit, "replace")` (a loaded but inactive slice).
    pub(crate) fn start_unit(&self, unit: &str) -> Result<(), SystemdError> {
        self.call("StartUnit", unit, &(unit, "replace"))?;
        Ok(())
    }

    /// `StopUnit(unit, "replace")`.
    pub(crate) fn stop_unit(&self, unit: &str) -> Result<(), SystemdError> {
        self.call("StopUnit", unit, &(unit, "replace"))?;
        Ok(())
    }

    /// Wait until the unit is active (a started job has run).
    pub(crate) fn wait_active(
        &self,
        unit: &str,
        timeout: Duration,
    ) -> Result<UnitState, SystemdError> {
        let start = Instant::now();
        loop {
            let st = self.unit_state(unit)?;
            match st {
                Some(s) if s.active_state == "active" => return Ok(s),
                other if start.elapsed() >= timeout => {
                    return Err(SystemdError::NotActive {
                        unit: unit.to_string(),
                        state: other.map(|s| s.active_state).unwrap_or("(none)".into()),
                        waited: start.elapsed(),
                    })
                }
                _ => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    }
}

/// What the systemd applier did to units in one pass (besides the report).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct UnitActions {
    /// Units started with StartTransientUnit.
    pub(crate) started: Vec<String>,
    /// Units whose properties were set (drift, plan change, adoption).
    pub(crate) set: Vec<String>,
    /// Files systemd did not bring to the planned value, written directly.
    pub(crate) direct_writes: Vec<PathBuf>,
}

/// The applier of a systemd-driver plan; see the module docs.
#[derive(Debug)]
pub struct SystemdApplier {
    sd: Systemd,
    bases: Vec<PathBuf>,
    /// Units whose properties were checked against the plan this run.
    checked: HashSet<String>,
    /// How long to wait for systemd to realise a unit's cgroup values.
    pub(crate) settle: Duration,
    /// The last pass's unit actions.
    pub(crate) last: UnitActions,
}

fn read_opt(file: &Path) -> Result<Option<String>, CgroupFsError> {
    match cgroupfs::read(file) {
        Ok(v) => Ok(Some(v)),
        Err(CgroupFsError::Read { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// One slice's planned files as they were before this pass.
struct SliceFiles<'a> {
    /// The slice's planned writes, in plan order.
    writes: &'a [&'a CgroupWrite],
    /// What each file held (`None`: missing).
    before: Vec<Option<String>>,
    /// Whether each file differed from its planned value.
    differs: Vec<bool>,
}

impl<'a> SliceFiles<'a> {
    /// Read the files; `None` (the error reported) when one cannot be read.
    fn read(writes: &'a [&'a CgroupWrite], report: &mut ApplyReport) -> Option<SliceFiles<'a>> {
        let mut before: Vec<Option<String>> = Vec::with_capacity(writes.len());
        for w in writes {
            match read_opt(&w.file) {
                Ok(v) => before.push(v),
                Err(e) => {
                    report.errors.push(ApplyError {
                        file: w.file.clone(),
                        value: w.value.clone(),
                        error: e,
                    });
                    return None;
                }
            }
        }
        let differs = writes
            .iter()
            .zip(&before)
            .map(|(w, cur)| {
                !cur.as_deref()
                    .is_some_and(|c| apply::values_equal(&w.file, c, &w.value))
            })
            .collect();
        Some(SliceFiles {
            writes,
            before,
            differs,
        })
    }

    /// Every write of the slice failed with `e`.
    fn fail(&self, report: &mut ApplyReport, e: &dyn std::fmt::Display) {
        for w in self.writes {
            report.errors.push(ApplyError {
                file: w.file.clone(),
                value: w.value.clone(),
                error: CgroupFsError::Write {
                    path: w.file.clone(),
                    value: w.value.clone(),
                    source: std::io::Error::other(e.to_string()),
                },
            });
        }
    }
}

impl SystemdApplier {
    pub(crate) fn new(sd: Systemd, bases: Vec<PathBuf>) -> SystemdApplier {
        SystemdApplier {
            sd,
            bases,
            checked: HashSet::new(),
            settle: Duration::from_secs(3),
            last: UnitActions::default(),
        }
    }

    /// Apply `writes` through systemd (see the module docs).
    pub(crate) fn apply(&mut self, writes: &[CgroupWrite]) -> ApplyReport {
        let mut report = ApplyReport::default();
        self.last = UnitActions::default();
        // Group by cgroup in plan order (parents first).
        let mut order: Vec<&str> = Vec::new();
        let mut groups: HashMap<&str, Vec<&CgroupWrite>> = HashMap::new();
        for w in writes {
            let guard = cgroupfs::check_within(&w.file, &self.bases).and_then(|()| {
                match units::unit_of(&w.cgroup) {
                    Some(_) => Ok(()),
                    None => Err(cgroupfs::outside(&w.file, &self.bases)),
                }
            });
            if let Err(error) = guard {
                report.errors.push(ApplyError {
                    file: w.file.clone(),
                    value: w.value.clone(),
                    error,
                });
                continue;
            }
            let g = groups.entry(w.cgroup.as_str()).or_default();
            if g.is_empty() {
                order.push(w.cgroup.as_str());
            }
            g.push(w);
        }
        for cgroup in order {
            self.apply_unit(&groups[cgroup], &mut report);
        }
        report
    }

    /// One slice's writes: read its files; unless the unit is known to
    /// hold the plan and every file does, bring the unit to the plan over
    /// D-Bus (start it, or set its properties); then wait for systemd to
    /// realise the values and write to cgroupfs what it did not.
    fn apply_unit(&mut self, ws: &[&CgroupWrite], report: &mut ApplyReport) {
        let unit = units::unit_of(&ws[0].cgroup)
            .unwrap_or_default()
            .to_string();
        let Some(files) = SliceFiles::read(ws, report) else {
            return;
        };
        let any_diff = files.differs.iter().any(|d| *d);
        if !any_diff && self.checked.contains(&unit) {
            report.unchanged += ws.len();
            return;
        }
        let (props, files_only) = match units::properties_for(ws) {
            Ok(p) => p,
            Err(e) => return files.fail(report, &e),
        };
        let state = match self.sd.unit_state(&unit) {
            Ok(s) => s,
            Err(e) => return files.fail(report, &e),
        };
        let result = match &state {
            None => self.start_slice(&unit, ws, &props, report),
            Some(st) => {
                let need_set = match self.needs_properties(st, &unit, &props, any_diff) {
                    Ok(n) => n,
                    Err(e) => return files.fail(report, &e),
                };
                self.update_unit(st, &unit, &props, need_set)
            }
        };
        if let Err(e) = result {
            tracing::warn!(unit = %unit, error = %e, "systemd driver: unit not updated");
            return files.fail(report, &e);
        }
        self.checked.insert(unit.clone());
        // Only files a property sets are awaited: systemd never writes the
        // others (hugetlb.*.max), and waiting for them would stall every
        // pass that makes a pod slice by the whole settle time.
        let awaited = awaited_files(ws, &files_only);
        let now_ok = self.wait_realised(ws, &awaited);
        self.write_the_rest(&unit, &files, &now_ok, &awaited, report);
    }

    /// A slice that is not a unit yet: start it as a transient unit with
    /// all its properties and wait until it is active.
    fn start_slice(
        &mut self,
        unit: &str,
        ws: &[&CgroupWrite],
        props: &[UnitProperty],
        report: &mut ApplyReport,
    ) -> Result<(), SystemdError> {
        let dir_existed = ws[0].dir.is_dir();
        let parent = units::parent_slice(unit);
        self.sd
            .start_transient_slice(unit, &parent, props)
            .and_then(|()| self.sd.wait_active(unit, self.settle))
            .map(|_| {
                tracing::info!(unit = %unit, properties = %render(props), "systemd: started transient slice unit");
                self.last.started.push(unit.to_string());
                if !dir_existed {
                    report.created_dirs.push(ws[0].dir.clone());
                }
            })
    }

    /// Whether an existing unit's properties must be set: when a file
    /// differs, and on first sight of the unit (qosd restarted, or a pod
    /// slice runc created implicitly) when its properties differ from the
    /// plan, or a daemon-reload would bring back others.
    fn needs_properties(
        &self,
        st: &UnitState,
        unit: &str,
        props: &[UnitProperty],
        any_diff: bool,
    ) -> Result<bool, SystemdError> {
        if any_diff {
            return Ok(true);
        }
        let names: Vec<&str> = props.iter().map(|p| p.name).collect();
        let cur = self.sd.slice_properties(st, unit, &names)?;
        Ok(props.iter().any(|p| cur.get(p.name) != Some(&p.value)))
    }

    /// An existing unit: start it when it is not active, then set its
    /// properties when `need_set`.
    fn update_unit(
        &mut self,
        st: &UnitState,
        unit: &str,
        props: &[UnitProperty],
        need_set: bool,
    ) -> Result<(), SystemdError> {
        if st.active_state != "active" {
            self.sd.start_unit(unit)?;
            self.sd.wait_active(unit, self.settle)?;
        }
        if need_set {
            self.sd.set_properties(unit, props)?;
            tracing::info!(unit = %unit, properties = %render(props), "systemd: set unit properties (runtime)");
            self.last.set.push(unit.to_string());
        }
        Ok(())
    }

    /// systemd realises the values from its event loop: read the files back
    /// until the awaited ones hold the plan (or the settle time is up).
    /// Returns which files hold their planned value.
    fn wait_realised(&self, ws: &[&CgroupWrite], awaited: &[bool]) -> Vec<bool> {
        let deadline = Instant::now() + self.settle;
        loop {
            let now_ok: Vec<bool> = ws
                .iter()
                .map(|w| {
                    read_opt(&w.file)
                        .ok()
                        .flatten()
                        .is_some_and(|c| apply::values_equal(&w.file, &c, &w.value))
                })
                .collect();
            let done = now_ok.iter().zip(awaited).all(|(ok, a)| *ok || !*a);
            if done || Instant::now() >= deadline {
                return now_ok;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Report the slice's files: unchanged ones, and for those that
    /// differed, the write systemd made or, where it did not bring the file
    /// to the plan, a direct cgroupfs write (as libcontainer does after
    /// SetUnitProperties).
    fn write_the_rest(
        &mut self,
        unit: &str,
        files: &SliceFiles<'_>,
        now_ok: &[bool],
        awaited: &[bool],
        report: &mut ApplyReport,
    ) {
        for (i, w) in files.writes.iter().enumerate() {
            if !files.differs[i] {
                report.unchanged += 1;
                continue;
            }
            if !now_ok[i] {
                // Not set by systemd (no property for it, or systemd chose
                // otherwise): write the file.
                if let Err(e) = cgroupfs::write_walked(&w.file, &w.value, &self.bases) {
                    report.errors.push(ApplyError {
                        file: w.file.clone(),
                        value: w.value.clone(),
                        error: e,
                    });
                    continue;
                }
                if awaited[i] {
                    tracing::warn!(unit = %unit, file = %w.file.display(), value = %w.value, "systemd did not set this file to the planned value; wrote it to cgroupfs (a daemon-reload may undo it)");
                } else {
                    tracing::debug!(unit = %unit, file = %w.file.display(), value = %w.value, "no systemd property sets this file; wrote it to cgroupfs");
                }
                self.last.direct_writes.push(w.file.clone());
            }
            report.written.push((*w).clone());
            report.previous.push(files.before[i].clone());
        }
    }

    /// Stop an orphaned pod slice unit (its pod is gone and it is empty).
    pub fn stop_slice(&self, unit: &str) -> Result<(), SystemdError> {
        self.sd.stop_unit(unit)
    }
}

/// Which of a unit's planned files systemd sets from its properties (and
/// so are worth waiting for): all but `files_only`, the files no property
/// expresses (see [`units::properties_for`]).
fn awaited_files(ws: &[&CgroupWrite], files_only: &[String]) -> Vec<bool> {
    ws.iter()
        .map(|w| !files_only.contains(&w.file.display().to_string()))
        .collect()
}

/// The slice unit of a pod cgroup directory when the tree below it holds no
/// process (so stopping the unit kills nothing), by the one pid walk
/// ([`crate::sys::kill::cgroup_tree_pids`]); `None` when the tree cannot be
/// read (or is gone).
pub fn empty_slice_unit(dir: &Path) -> Option<String> {
    let name = dir.file_name()?.to_str()?;
    units::unit_of(name)?;
    let pids = crate::sys::kill::cgroup_tree_pids(dir).ok()?;
    pids.is_empty().then(|| name.to_string())
}

fn render(props: &[UnitProperty]) -> String {
    props
        .iter()
        .map(UnitProperty::render)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The cgroup driver the reconciler applies plans with.
#[derive(Debug)]
pub enum Driver {
    /// Direct cgroupfs writes (the cgroupfs driver, dry runs, and the
    /// systemd naming when systemd does not manage the tree).
    Cgroupfs(Applier),
    /// Through systemd's D-Bus API.
    Systemd(Box<SystemdApplier>),
}

impl Driver {
    /// `systemd_wanted`: the plan uses systemd naming on the real cgroup
    /// mount. Then, unless this is a dry run, systemd is probed; when it is
    /// not PID 1 or not reachable qosd warns and writes cgroupfs.
    pub fn choose(fs: Applier, systemd_wanted: bool, probe_with: &SystemdProbe) -> Driver {
        if !systemd_wanted || !fs.mode().writes() {
            return Driver::Cgroupfs(fs);
        }
        match probe(probe_with) {
            Ok(sd) => {
                tracing::info!(bus = %probe_with.bus_address, version = %sd.version().unwrap_or_default(), "cgroupDriver systemd: kubepods slices are managed as systemd units over D-Bus");
                Driver::Systemd(Box::new(SystemdApplier::new(
                    sd,
                    fs.allowed_bases().to_vec(),
                )))
            }
            Err(e) => {
                tracing::warn!(error = %e, "cgroupDriver systemd, but systemd does not manage this cgroup tree: writing the systemd-named cgroups through cgroupfs directly");
                Driver::Cgroupfs(fs)
            }
        }
    }

    /// Apply `writes` with the driver's applier.
    pub fn apply(&mut self, writes: &[CgroupWrite]) -> ApplyReport {
        match self {
            Driver::Cgroupfs(a) => a.apply(writes),
            Driver::Systemd(s) => s.apply(writes),
        }
    }

    /// The applier's mode (the systemd applier always writes).
    pub fn mode(&self) -> Mode {
        match self {
            Driver::Cgroupfs(a) => a.mode(),
            Driver::Systemd(_) => Mode::Real,
        }
    }

    #[cfg(test)]
    /// `systemd` or `cgroupfs`: who performs the writes.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Driver::Cgroupfs(_) => "cgroupfs",
            Driver::Systemd(_) => "systemd",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_property_backed_files_are_awaited() {
        // A new pod slice: systemd sets cpu.weight, cpu.max and memory.max
        // from the unit's properties, never hugetlb.2MB.max (no property):
        // waiting for that one cost every new pod the whole settle time.
        let dir = PathBuf::from("/sys/fs/cgroup/kubepods.slice/kubepods-podx.slice");
        let ws: Vec<CgroupWrite> = [
            ("cpu.weight", "39"),
            ("hugetlb.2MB.max", "0"),
            ("cpu.max", "100000 100000"),
            ("memory.max", "33554432"),
        ]
        .iter()
        .map(|(f, v)| CgroupWrite {
            file: dir.join(f),
            value: v.to_string(),
            dir: dir.clone(),
            cgroup: "kubepods.slice/kubepods-podx.slice".into(),
            level: qosd_model::core::model::CgroupLevel::Pod,
        })
        .collect();
        let refs: Vec<&CgroupWrite> = ws.iter().collect();
        let (props, files_only) = units::properties_for(&refs).unwrap();
        assert_eq!(props.len(), 4, "{props:?}");
        assert_eq!(awaited_files(&refs, &files_only), [true, false, true, true]);
        assert_eq!(awaited_files(&refs, &[]), [true; 4]);
    }

    #[test]
    fn an_empty_slice_is_one_whose_whole_tree_has_no_process() {
        let t = tempfile::tempdir().unwrap();
        let pod = t.path().join("kubepods-besteffort-podx.slice");
        let ctr = pod.join("cri-containerd-abc.scope");
        std::fs::create_dir_all(&ctr).unwrap();
        std::fs::write(pod.join("cgroup.procs"), "").unwrap();
        std::fs::write(ctr.join("cgroup.procs"), "").unwrap();
        assert_eq!(
            empty_slice_unit(&pod).as_deref(),
            Some("kubepods-besteffort-podx.slice")
        );
        // A process in a child cgroup: not empty.
        std::fs::write(ctr.join("cgroup.procs"), "4242\n").unwrap();
        assert_eq!(empty_slice_unit(&pod), None);
        // Not a slice, or gone: nothing to stop.
        assert_eq!(empty_slice_unit(&ctr), None);
        assert_eq!(empty_slice_unit(&t.path().join("gone-pody.slice")), None);
    }

    #[test]
    fn probe_reports_not_booted_and_pid1() {
        let d = tempfile::tempdir().unwrap();
        let p = SystemdProbe {
            booted_marker: d.path().join("run/systemd/system"),
            pid1_comm: d.path().join("comm"),
            bus_address: "unix:path=/nonexistent".into(),
        };
        let e = probe(&p).unwrap_err();
        assert!(matches!(e, SystemdError::NotBooted { .. }), "{e}");
        std::fs::create_dir_all(&p.booted_marker).unwrap();
        std::fs::write(&p.pid1_comm, "init\n").unwrap();
        let e = probe(&p).unwrap_err();
        assert!(e.to_string().contains("\"init\""), "{e}");
        std::fs::write(&p.pid1_comm, "systemd\n").unwrap();
        let e = probe(&p).unwrap_err();
        assert!(matches!(e, SystemdError::Bus { .. }), "{e}");
        assert!(e.to_string().contains("/nonexistent"), "{e}");
    }

    #[test]
    fn dry_run_and_cgroupfs_never_probe() {
        let p = SystemdProbe {
            booted_marker: PathBuf::from("/nonexistent"),
            ..SystemdProbe::default()
        };
        let a = Applier::new(Mode::DryRun, PathBuf::from("/tmp/x"));
        assert_eq!(Driver::choose(a, true, &p).name(), "cgroupfs");
        let a = Applier::new(Mode::Real, PathBuf::from("/tmp/x"));
        assert_eq!(Driver::choose(a, true, &p).name(), "cgroupfs");
    }
}

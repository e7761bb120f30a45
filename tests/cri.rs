//! qosd against a real, private containerd (tests/support): pods, events,
//! plans from the runtime, the runtime misbehaving, `qosd run` end to end,
//! in-place resize, the status cache and configuration reloads.
//!
//! One test binary for the files in tests/cri/ (each a module named
//! after its file): `cargo test --test cri <module>::` runs one of them.

mod support;

#[path = "cri/cri_events.rs"]
mod cri_events;
#[path = "cri/cri_plan.rs"]
mod cri_plan;
#[path = "cri/cri_pods.rs"]
mod cri_pods;
#[path = "cri/cri_runtime.rs"]
mod cri_runtime;
#[path = "cri/e2e_run.rs"]
mod e2e_run;
#[path = "cri/ops_reload.rs"]
mod ops_reload;
#[path = "cri/resize.rs"]
mod resize;
#[path = "cri/status_cache.rs"]
mod status_cache;

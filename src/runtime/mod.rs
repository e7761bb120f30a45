//! The long-running parts of `qosd run`: the reconcile loop and its pod
//! source ([`daemon`]), the eviction loop ([`eviction`], [`eviction_service`]),
//! the evictor backends ([`evictor`]) and the supervisor that turns a panic
//! or a stall of any loop into a failing `/healthz` and a non-zero exit
//! ([`supervisor`]).

pub(crate) mod cpu_manager;
pub(crate) mod daemon;
pub mod eviction;
pub mod eviction_service;
pub(crate) mod hook;
pub(crate) mod instance_lock;
pub(crate) mod kube_side;
pub(crate) mod oom_score;
pub(crate) mod reaction;
pub mod reconcile;
pub(crate) mod runtime_events;
pub(crate) mod stop_guard;
pub mod supervisor;

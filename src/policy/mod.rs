//! Pure policy: what the kubelet would do, as functions of the model and
//! the settings. No I/O (see docs/design.md).

pub mod enforce;

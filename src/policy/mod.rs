//! Pure policy logic (no I/O): decisions computed from the pod model and
//! node facts. See docs/design.md.

pub mod cpu;

//! The project's own thin, typed cgroupfs layer (see docs/design.md for why
//! not cgroups-rs): naming, detection, file I/O and the plan applier.

pub mod apply;
pub mod detect;
pub mod fs;
pub mod paths;

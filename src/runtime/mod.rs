//! Long-running services of `qosd run`.

pub mod cpu_manager;

//! Kernel and OS I/O: every path is a parameter.

pub mod cpu_topology;

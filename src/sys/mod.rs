//! Kernel and OS I/O (every path a parameter).

pub mod hugepages;

//! Eviction manager: signals → thresholds → ranking → evictor.

pub mod evictor;
pub mod manager;
pub mod rank;
pub mod signals;
pub mod threshold;

//! The pure core: quantities, the pod model, QoS classification, effective
//! resources and node arithmetic. Standard library only; no I/O.

pub mod backoff;
pub mod duration;
pub mod limits;
pub mod model;
pub mod node;
pub mod qos;
pub mod quantity;
pub mod resources;
pub mod uid;

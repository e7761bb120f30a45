//! CRI (`runtime.v1`) client and the live pod inventory.

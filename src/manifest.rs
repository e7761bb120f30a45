//! Pod manifests (YAML/JSON, Pod / List / multi-document, directories) → [`Pod`]s.
//! (stub: the core branch writes it)

use std::path::PathBuf;

use crate::model::Pod;

#[derive(Debug, thiserror::Error)]
#[error("{file}: {message}")]
pub struct ManifestError {
    pub file: PathBuf,
    pub message: String,
}

/// Load every pod from the given files and directories.
pub fn load_paths(_paths: &[PathBuf]) -> Result<Vec<Pod>, ManifestError> {
    unimplemented!("core branch")
}

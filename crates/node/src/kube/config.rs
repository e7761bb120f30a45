//! Where the API server is and how to authenticate: in-cluster (the
//! service account's token and CA, `KUBERNETES_SERVICE_HOST`/`_PORT`) or a
//! kubeconfig file (current context; token, token file or client
//! certificate; CA file or data). Reading files is the only I/O here.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde::Deserialize;

/// The service account directory mounted into every pod.
pub(crate) const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// How requests authenticate.
#[derive(Clone, PartialEq, Eq)]
pub enum Auth {
    None,
    /// A fixed bearer token.
    Token(String),
    /// A bearer token re-read from a file before each request (projected
    /// service account tokens rotate).
    TokenFile(PathBuf),
    /// A client certificate and key (PEM).
    ClientCert {
        cert_pem: Vec<u8>,
        key_pem: Vec<u8>,
    },
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auth::None => f.write_str("None"),
            Auth::Token(_) => f.write_str("Token(<redacted>)"),
            Auth::TokenFile(p) => write!(f, "TokenFile({})", p.display()),
            Auth::ClientCert { .. } => f.write_str("ClientCert(<redacted>)"),
        }
    }
}

/// A resolved connection config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeConfig {
    /// `https://host:port` (no trailing slash; a path prefix is kept).
    pub server: String,
    /// PEM bundle of the CAs that sign the server's certificate.
    pub ca_pem: Vec<u8>,
    pub auth: Auth,
    /// Where this came from, for messages (`in-cluster`, a kubeconfig path).
    pub origin: String,
}

/// A config that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("kubeconfig {path}: {message}")]
    Kubeconfig { path: PathBuf, message: String },
    #[error("not in a cluster: {0}")]
    NotInCluster(String),
}

/// In-cluster config: `host`/`port` are KUBERNETES_SERVICE_HOST/PORT,
/// `sa_dir` the service account directory (token, ca.crt).
pub(crate) fn in_cluster(
    host: Option<&str>,
    port: Option<&str>,
    sa_dir: &Path,
) -> Result<KubeConfig, ConfigError> {
    let (Some(host), Some(port)) = (
        host.filter(|h| !h.is_empty()),
        port.filter(|p| !p.is_empty()),
    ) else {
        return Err(ConfigError::NotInCluster(
            "KUBERNETES_SERVICE_HOST / KUBERNETES_SERVICE_PORT are not set".into(),
        ));
    };
    let token = sa_dir.join("token");
    if !token.is_file() {
        return Err(ConfigError::NotInCluster(format!(
            "no service account token at {}",
            token.display()
        )));
    }
    let ca = sa_dir.join("ca.crt");
    let ca_pem = read_input(&ca)?;
    // An IPv6 service address needs brackets.
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    Ok(KubeConfig {
        server: format!("https://{host}:{port}"),
        ca_pem,
        auth: Auth::TokenFile(token),
        origin: "in-cluster".into(),
    })
}

/// In-cluster config from the process environment and the standard
/// service account directory.
pub fn in_cluster_from_env() -> Result<KubeConfig, ConfigError> {
    in_cluster(
        std::env::var("KUBERNETES_SERVICE_HOST").ok().as_deref(),
        std::env::var("KUBERNETES_SERVICE_PORT").ok().as_deref(),
        Path::new(SERVICE_ACCOUNT_DIR),
    )
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case", default)]
struct RawKubeconfig {
    current_context: String,
    clusters: Vec<Named<RawCluster>>,
    contexts: Vec<Named<RawContext>>,
    users: Vec<Named<RawUser>>,
}

#[derive(Debug, Deserialize)]
struct Named<T> {
    name: String,
    #[serde(alias = "cluster", alias = "context", alias = "user")]
    value: Option<T>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case", default)]
struct RawCluster {
    server: String,
    certificate_authority: Option<PathBuf>,
    certificate_authority_data: Option<String>,
    insecure_skip_tls_verify: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case", default)]
struct RawContext {
    cluster: String,
    user: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case", default)]
struct RawUser {
    token: Option<String>,
    token_file: Option<PathBuf>,
    client_certificate: Option<PathBuf>,
    client_certificate_data: Option<String>,
    client_key: Option<PathBuf>,
    client_key_data: Option<String>,
    exec: Option<serde_json::Value>,
    auth_provider: Option<serde_json::Value>,
}

/// Read a kubeconfig file and resolve its current context.
pub fn from_kubeconfig(path: &Path) -> Result<KubeConfig, ConfigError> {
    let text = crate::sys::input::read_text(path).map_err(|e| ConfigError::Read {
        path: path.to_path_buf(),
        source: e.into_io(),
    })?;
    kubeconfig_from_str(&text, path)
}

/// A credential or certificate file: regular files only, size-capped,
/// symlinks followed (service-account volumes are symlinks).
fn read_input(p: &Path) -> Result<Vec<u8>, ConfigError> {
    use crate::sys::input::{read_bytes, Symlinks, MAX_INPUT_BYTES};
    read_bytes(p, MAX_INPUT_BYTES, Symlinks::Follow).map_err(|e| ConfigError::Read {
        path: p.to_path_buf(),
        source: e.into_io(),
    })
}

/// Resolve kubeconfig text; relative file paths are relative to `path`'s directory.
pub(crate) fn kubeconfig_from_str(text: &str, path: &Path) -> Result<KubeConfig, ConfigError> {
    let bad = |message: String| ConfigError::Kubeconfig {
        path: path.to_path_buf(),
        message,
    };
    let raw: RawKubeconfig = yaml_serde::from_str(text).map_err(|e| bad(e.to_string()))?;
    let base = path.parent().unwrap_or(Path::new("."));
    let resolve = |p: &Path| {
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            base.join(p)
        }
    };
    let read = |p: &Path| {
        let p = resolve(p);
        read_input(&p)
    };
    let decode = |what: &str, d: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(d.trim())
            .map_err(|e| bad(format!("{what}: not base64: {e}")))
    };
    let ctx_name = if raw.current_context.is_empty() {
        match raw.contexts.as_slice() {
            [only] => only.name.clone(),
            _ => return Err(bad("no current-context".into())),
        }
    } else {
        raw.current_context.clone()
    };
    let ctx = raw
        .contexts
        .iter()
        .find(|c| c.name == ctx_name)
        .and_then(|c| c.value.as_ref())
        .ok_or_else(|| bad(format!("context {ctx_name:?} not found")))?;
    let cluster = raw
        .clusters
        .iter()
        .find(|c| c.name == ctx.cluster)
        .and_then(|c| c.value.as_ref())
        .ok_or_else(|| bad(format!("cluster {:?} not found", ctx.cluster)))?;
    if cluster.insecure_skip_tls_verify {
        return Err(bad(format!(
            "cluster {:?} sets insecure-skip-tls-verify: qosd always verifies the server",
            ctx.cluster
        )));
    }
    if !cluster.server.starts_with("https://") {
        return Err(bad(format!(
            "cluster {:?}: server {:?} is not https://",
            ctx.cluster, cluster.server
        )));
    }
    let ca_pem = match (
        &cluster.certificate_authority_data,
        &cluster.certificate_authority,
    ) {
        (Some(d), _) => decode("certificate-authority-data", d)?,
        (None, Some(p)) => read(p)?,
        (None, None) => {
            return Err(bad(format!(
                "cluster {:?} has no certificate-authority(-data)",
                ctx.cluster
            )))
        }
    };
    let user = raw
        .users
        .iter()
        .find(|u| u.name == ctx.user)
        .and_then(|u| u.value.as_ref());
    let auth = match user {
        None => Auth::None,
        Some(u) if u.exec.is_some() || u.auth_provider.is_some() => {
            return Err(bad(format!(
                "user {:?} uses an exec/auth-provider plugin, which qosd does not run; use a token or a client certificate",
                ctx.user
            )))
        }
        Some(u) => match (&u.token, &u.token_file) {
            (Some(t), _) => Auth::Token(t.clone()),
            (None, Some(f)) => Auth::TokenFile(resolve(f)),
            (None, None) => {
                let cert = match (&u.client_certificate_data, &u.client_certificate) {
                    (Some(d), _) => Some(decode("client-certificate-data", d)?),
                    (None, Some(p)) => Some(read(p)?),
                    _ => None,
                };
                let key = match (&u.client_key_data, &u.client_key) {
                    (Some(d), _) => Some(decode("client-key-data", d)?),
                    (None, Some(p)) => Some(read(p)?),
                    _ => None,
                };
                match (cert, key) {
                    (Some(cert_pem), Some(key_pem)) => Auth::ClientCert { cert_pem, key_pem },
                    (None, None) => Auth::None,
                    _ => return Err(bad(format!(
                        "user {:?}: a client certificate needs both the certificate and the key",
                        ctx.user
                    ))),
                }
            }
        },
    };
    Ok(KubeConfig {
        server: cluster.server.trim_end_matches('/').to_string(),
        ca_pem,
        auth,
        origin: path.display().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubeconfig_current_context_token_and_ca_data() {
        let d = tempfile::tempdir().unwrap();
        let text = r#"
apiVersion: v1
kind: Config
current-context: b
clusters:
- name: c1
  cluster:
    server: https://10.0.0.1:6443/
    certificate-authority-data: LS0tLS1CRUdJTg==
contexts:
- name: a
  context: {cluster: nope, user: nope}
- name: b
  context: {cluster: c1, user: u1}
users:
- name: u1
  user:
    token: abc
"#;
        let c = kubeconfig_from_str(text, &d.path().join("kc")).unwrap();
        assert_eq!(c.server, "https://10.0.0.1:6443");
        assert_eq!(c.ca_pem, b"-----BEGIN");
        assert_eq!(c.auth, Auth::Token("abc".into()));
    }

    #[test]
    fn kubeconfig_refusals() {
        let p = Path::new("/x/kc");
        let insecure = "current-context: a\ncontexts: [{name: a, context: {cluster: c, user: u}}]\nclusters: [{name: c, cluster: {server: 'https://h', insecure-skip-tls-verify: true}}]\n";
        let e = kubeconfig_from_str(insecure, p).unwrap_err().to_string();
        assert!(e.contains("insecure-skip-tls-verify"), "{e}");
        let exec = "current-context: a\ncontexts: [{name: a, context: {cluster: c, user: u}}]\nclusters: [{name: c, cluster: {server: 'https://h', certificate-authority-data: 'eA=='}}]\nusers: [{name: u, user: {exec: {command: aws}}}]\n";
        let e = kubeconfig_from_str(exec, p).unwrap_err().to_string();
        assert!(e.contains("exec"), "{e}");
        let http = "current-context: a\ncontexts: [{name: a, context: {cluster: c, user: u}}]\nclusters: [{name: c, cluster: {server: 'http://h'}}]\n";
        assert!(kubeconfig_from_str(http, p).is_err());
    }

    #[test]
    fn in_cluster_needs_env_and_token() {
        let d = tempfile::tempdir().unwrap();
        assert!(matches!(
            in_cluster(None, Some("443"), d.path()),
            Err(ConfigError::NotInCluster(_))
        ));
        assert!(matches!(
            in_cluster(Some("10.96.0.1"), Some("443"), d.path()),
            Err(ConfigError::NotInCluster(_))
        ));
        std::fs::write(d.path().join("token"), "t").unwrap();
        std::fs::write(d.path().join("ca.crt"), "pem").unwrap();
        let c = in_cluster(Some("fd00::1"), Some("443"), d.path()).unwrap();
        assert_eq!(c.server, "https://[fd00::1]:443");
        assert_eq!(c.auth, Auth::TokenFile(d.path().join("token")));
    }
}

//! Where the API server is and how to authenticate: in-cluster (the
//! service account's token and CA, `KUBERNETES_SERVICE_HOST`/`_PORT`) or a
//! kubeconfig file (current context; token, token file or client
//! certificate; CA file or data). Reading files is the only I/O here.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use rustls_pki_types::ServerName;
use serde::Deserialize;

/// The service account directory mounted into every pod.
pub(crate) const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// How requests authenticate.
#[derive(Clone, PartialEq, Eq)]
pub enum Auth {
    /// No credentials.
    None,
    /// A fixed bearer token.
    Token(String),
    /// A bearer token re-read from a file before each request (projected
    /// service account tokens rotate).
    TokenFile(PathBuf),
    /// A client certificate and key (PEM).
    ClientCert {
        /// The client certificate chain (PEM).
        cert_pem: Vec<u8>,
        /// The certificate's private key (PEM).
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
    /// How requests authenticate.
    pub auth: Auth,
    /// Where this came from, for messages (`in-cluster`, a kubeconfig path).
    pub origin: String,
    /// The name the server certificate is verified against (and sent as
    /// SNI) instead of the URL's host (kubeconfig `tls-server-name`).
    pub tls_server_name: Option<String>,
    /// An HTTP proxy reached with CONNECT (kubeconfig `proxy-url`).
    pub proxy: Option<Proxy>,
}

/// An `http://` proxy: qosd opens its TLS connection to the API server
/// through an HTTP CONNECT tunnel.
#[derive(Clone, PartialEq, Eq)]
pub struct Proxy {
    /// The proxy's host name or address.
    pub(crate) host: String,
    /// The proxy's port (80 when the URL gives none).
    pub(crate) port: u16,
    /// `user[:password]` from the URL (percent-decoded), sent as
    /// `Proxy-Authorization: Basic`.
    pub(crate) basic_auth: Option<String>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Proxy(http://{}:{}", self.host, self.port)?;
        if self.basic_auth.is_some() {
            f.write_str(", <credentials redacted>")?;
        }
        f.write_str(")")
    }
}

impl Proxy {
    /// Parse `http://[user[:password]@]host[:port][/]` (port 80 when
    /// absent); any other form is refused with the reason.
    pub(crate) fn parse(url: &str) -> Result<Proxy, String> {
        let Some(rest) = url.strip_prefix("http://") else {
            let scheme = url.split_once("://").map(|(s, _)| s).unwrap_or("");
            return Err(if scheme.is_empty() {
                "not a URL (qosd supports http:// proxies, reached with CONNECT)".into()
            } else {
                format!("scheme {scheme}:// is not supported (qosd supports http:// proxies, reached with CONNECT)")
            });
        };
        let rest = rest.trim_end_matches('/');
        if rest.contains('/') || rest.contains('?') || rest.contains('#') {
            return Err("a proxy URL has no path".into());
        }
        let (basic_auth, authority) = match rest.rsplit_once('@') {
            Some((u, a)) => (Some(userinfo(u)?), a),
            None => (None, rest),
        };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, after) = v6.split_once(']').ok_or("unclosed [")?;
            (h.to_string(), after.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), Some(p)),
                None => (authority.to_string(), None),
            }
        };
        if host.is_empty() {
            return Err("no host".into());
        }
        let port = match port {
            None => 80,
            Some(p) => p.parse().map_err(|_| format!("bad port {p:?}"))?,
        };
        Ok(Proxy {
            host,
            port,
            basic_auth,
        })
    }
}

/// A URL's `user[:password]`, each part percent-decoded (as Go's URL
/// parser gives them to the proxy's Basic authentication). The message of
/// an error never shows the credentials.
fn userinfo(raw: &str) -> Result<String, String> {
    let decode = |part: &str| -> Result<String, String> {
        let b = part.as_bytes();
        let mut out = Vec::with_capacity(b.len());
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'%' {
                let hex = b
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or("bad percent-encoding in the credentials")?;
                out.push(hex);
                i += 3;
            } else {
                out.push(b[i]);
                i += 1;
            }
        }
        String::from_utf8(out).map_err(|_| "the credentials are not UTF-8".to_string())
    };
    Ok(match raw.split_once(':') {
        Some((user, password)) => format!("{}:{}", decode(user)?, decode(password)?),
        None => decode(raw)?,
    })
}

/// A config that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A file (kubeconfig, token, CA or client certificate) could not be
    /// read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The read error.
        source: std::io::Error,
    },
    /// The kubeconfig is malformed or lacks what qosd needs.
    #[error("kubeconfig {path}: {message}")]
    Kubeconfig {
        /// The kubeconfig file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// In-cluster config was asked for outside a pod
    /// (`KUBERNETES_SERVICE_HOST`/`_PORT` unset, or no service account
    /// token).
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
        tls_server_name: None,
        proxy: None,
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
    tls_server_name: Option<String>,
    proxy_url: Option<String>,
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
    /// client-go's key is camelCase (`tokenFile`), unlike its neighbours.
    #[serde(rename = "tokenFile")]
    token_file: Option<PathBuf>,
    /// Not a kubeconfig key: refused with the right name.
    #[serde(rename = "token-file")]
    legacy_token_file: Option<serde_json::Value>,
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
    let raw: RawKubeconfig = yaml_serde::from_str(text).map_err(|e| ConfigError::Kubeconfig {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    let r = Resolver { path };
    let (ctx, cluster) = r.context_and_cluster(&raw)?;
    let tls_server_name = r.tls_server_name(&ctx.cluster, cluster)?;
    let proxy = r.proxy(&ctx.cluster, cluster)?;
    let ca_pem = r.ca(&ctx.cluster, cluster)?;
    let user = raw
        .users
        .iter()
        .find(|u| u.name == ctx.user)
        .and_then(|u| u.value.as_ref());
    let auth = match user {
        None => Auth::None,
        Some(u) => r.auth(&ctx.user, u)?,
    };
    Ok(KubeConfig {
        server: cluster.server.trim_end_matches('/').to_string(),
        ca_pem,
        auth,
        origin: path.display().to_string(),
        tls_server_name,
        proxy,
    })
}

/// Resolves the parts of one kubeconfig file (paths relative to its
/// directory, errors naming it).
struct Resolver<'a> {
    path: &'a Path,
}

impl Resolver<'_> {
    fn bad(&self, message: String) -> ConfigError {
        ConfigError::Kubeconfig {
            path: self.path.to_path_buf(),
            message,
        }
    }

    fn resolve(&self, p: &Path) -> PathBuf {
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.path.parent().unwrap_or(Path::new(".")).join(p)
        }
    }

    fn read(&self, p: &Path) -> Result<Vec<u8>, ConfigError> {
        read_input(&self.resolve(p))
    }

    fn decode(&self, what: &str, d: &str) -> Result<Vec<u8>, ConfigError> {
        base64::engine::general_purpose::STANDARD
            .decode(d.trim())
            .map_err(|e| self.bad(format!("{what}: not base64: {e}")))
    }

    /// The current context (or the only one) and its cluster, checked.
    fn context_and_cluster<'r>(
        &self,
        raw: &'r RawKubeconfig,
    ) -> Result<(&'r RawContext, &'r RawCluster), ConfigError> {
        let ctx_name = if raw.current_context.is_empty() {
            match raw.contexts.as_slice() {
                [only] => only.name.clone(),
                _ => return Err(self.bad("no current-context".into())),
            }
        } else {
            raw.current_context.clone()
        };
        let ctx = raw
            .contexts
            .iter()
            .find(|c| c.name == ctx_name)
            .and_then(|c| c.value.as_ref())
            .ok_or_else(|| self.bad(format!("context {ctx_name:?} not found")))?;
        let cluster = raw
            .clusters
            .iter()
            .find(|c| c.name == ctx.cluster)
            .and_then(|c| c.value.as_ref())
            .ok_or_else(|| self.bad(format!("cluster {:?} not found", ctx.cluster)))?;
        if cluster.insecure_skip_tls_verify {
            return Err(self.bad(format!(
                "cluster {:?} sets insecure-skip-tls-verify: qosd always verifies the server",
                ctx.cluster
            )));
        }
        if !cluster.server.starts_with("https://") {
            return Err(self.bad(format!(
                "cluster {:?}: server {:?} is not https://",
                ctx.cluster, cluster.server
            )));
        }
        Ok((ctx, cluster))
    }

    fn ca(&self, name: &str, cluster: &RawCluster) -> Result<Vec<u8>, ConfigError> {
        match (
            &cluster.certificate_authority_data,
            &cluster.certificate_authority,
        ) {
            (Some(d), _) => self.decode("certificate-authority-data", d),
            (None, Some(p)) => self.read(p),
            (None, None) => Err(self.bad(format!(
                "cluster {name:?} has no certificate-authority(-data)"
            ))),
        }
    }

    /// `tls-server-name`: the name the server's certificate is checked
    /// against (and sent as SNI) instead of the URL's host.
    fn tls_server_name(
        &self,
        name: &str,
        cluster: &RawCluster,
    ) -> Result<Option<String>, ConfigError> {
        let Some(n) = cluster.tls_server_name.as_deref().filter(|n| !n.is_empty()) else {
            return Ok(None);
        };
        ServerName::try_from(n.to_string()).map_err(|e| {
            self.bad(format!(
                "cluster {name:?}: tls-server-name {n:?} is not a DNS name or an IP address: {e}"
            ))
        })?;
        Ok(Some(n.to_string()))
    }

    /// `proxy-url`: an `http://` proxy (HTTP CONNECT) is used; any other
    /// scheme (`https://`, `socks5://`) is refused.
    fn proxy(&self, name: &str, cluster: &RawCluster) -> Result<Option<Proxy>, ConfigError> {
        let Some(url) = cluster.proxy_url.as_deref().filter(|u| !u.is_empty()) else {
            return Ok(None);
        };
        Proxy::parse(url)
            .map(Some)
            .map_err(|why| self.bad(format!("cluster {name:?}: proxy-url {url:?}: {why}")))
    }

    /// The user's credentials: a token (inline, or `tokenFile` re-read on
    /// each call; the inline one wins when both are set, as in client-go)
    /// or a client certificate.
    fn auth(&self, name: &str, u: &RawUser) -> Result<Auth, ConfigError> {
        if u.exec.is_some() || u.auth_provider.is_some() {
            return Err(self.bad(format!(
                "user {name:?} uses an exec/auth-provider plugin, which qosd does not run; use a token or a client certificate"
            )));
        }
        if let Some(key) = u.legacy_token_file.as_ref().map(|_| "token-file") {
            return Err(self.bad(format!(
                "user {name:?}: {key:?} is not a kubeconfig key; the token file key is \"tokenFile\""
            )));
        }
        if let Some(t) = u.token.as_ref().filter(|t| !t.is_empty()) {
            return Ok(Auth::Token(t.clone()));
        }
        if let Some(f) = u.token_file.as_ref().filter(|f| !f.as_os_str().is_empty()) {
            return Ok(Auth::TokenFile(self.resolve(f)));
        }
        let cert = match (&u.client_certificate_data, &u.client_certificate) {
            (Some(d), _) => Some(self.decode("client-certificate-data", d)?),
            (None, Some(p)) => Some(self.read(p)?),
            _ => None,
        };
        let key = match (&u.client_key_data, &u.client_key) {
            (Some(d), _) => Some(self.decode("client-key-data", d)?),
            (None, Some(p)) => Some(self.read(p)?),
            _ => None,
        };
        match (cert, key) {
            (Some(cert_pem), Some(key_pem)) => Ok(Auth::ClientCert { cert_pem, key_pem }),
            (None, None) => Ok(Auth::None),
            _ => Err(self.bad(format!(
                "user {name:?}: a client certificate needs both the certificate and the key"
            ))),
        }
    }
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

    /// The real client-go keys: `tokenFile` (camelCase), `tls-server-name`,
    /// `proxy-url`; an inline token wins over a token file.
    #[test]
    fn kubeconfig_real_keys() {
        let p = Path::new("/x/kc");
        let head = "current-context: a\ncontexts: [{name: a, context: {cluster: c, user: u}}]\n";
        let cluster = |extra: &str| {
            format!("clusters: [{{name: c, cluster: {{server: 'https://10.0.0.1:6443', certificate-authority-data: 'eA==' {extra}}}}}]\n")
        };
        let text = format!(
            "{head}{}users: [{{name: u, user: {{tokenFile: tok}}}}]\n",
            cluster(", tls-server-name: api.internal, proxy-url: 'http://me:pw@[fd00::9]:3128/'")
        );
        let c = kubeconfig_from_str(&text, p).unwrap();
        assert_eq!(c.auth, Auth::TokenFile("/x/tok".into()));
        assert_eq!(c.tls_server_name.as_deref(), Some("api.internal"));
        let proxy = c.proxy.unwrap();
        assert_eq!((proxy.host.as_str(), proxy.port), ("fd00::9", 3128));
        assert_eq!(proxy.basic_auth.as_deref(), Some("me:pw"));
        assert!(!format!("{proxy:?}").contains("pw"), "credentials redacted");
        // Percent-encoded credentials are decoded (as client-go's proxy
        // authentication sends them); a bad escape does not show them.
        let decoded = Proxy::parse("http://me%40corp:p%3Aw%25d@h:3128").unwrap();
        assert_eq!(decoded.basic_auth.as_deref(), Some("me@corp:p:w%d"));
        let e = Proxy::parse("http://me:secret%zz@h").unwrap_err();
        assert!(!e.contains("secret"), "{e}");

        let both = format!(
            "{head}{}users: [{{name: u, user: {{token: inline, tokenFile: /t}}}}]\n",
            cluster("")
        );
        assert_eq!(
            kubeconfig_from_str(&both, p).unwrap().auth,
            Auth::Token("inline".into())
        );

        for (extra, key) in [
            (", proxy-url: 'socks5://h:1080'", "proxy-url"),
            (", proxy-url: 'https://h:3128'", "proxy-url"),
            (", tls-server-name: 'bad name!'", "tls-server-name"),
        ] {
            let text = format!("{head}{}", cluster(extra));
            let e = kubeconfig_from_str(&text, p).unwrap_err().to_string();
            assert!(e.contains(key) && e.contains("/x/kc"), "{e}");
        }
        let legacy = format!(
            "{head}{}users: [{{name: u, user: {{token-file: /t}}}}]\n",
            cluster("")
        );
        let e = kubeconfig_from_str(&legacy, p).unwrap_err().to_string();
        assert!(e.contains("\"tokenFile\""), "{e}");
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

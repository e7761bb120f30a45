//! An async CRI `runtime.v1` client over a UNIX socket, with a connect
//! timeout, a per-call deadline and retries with backoff while the runtime
//! is down or restarting.

use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

use super::proto;
use super::proto::image_service_client::ImageServiceClient;
use super::proto::runtime_service_client::RuntimeServiceClient;

/// The CRI API version qosd speaks.
pub(crate) const CRI_API_VERSION: &str = "v1";

/// containerd's default CRI socket.
pub const DEFAULT_ENDPOINT: &str = "unix:///run/containerd/containerd.sock";

/// Largest message qosd accepts from the runtime (the kubelet's limit).
pub(crate) const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// How long and how often to retry while the runtime is unreachable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// First delay between attempts.
    pub initial_delay: Duration,
    /// Delays double up to this.
    pub max_delay: Duration,
    /// Give up once this much time has passed since the first attempt
    /// (zero: a single attempt).
    pub max_elapsed: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            initial_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(1),
            max_elapsed: Duration::from_secs(10),
        }
    }
}

impl RetryPolicy {
    /// One attempt, no retries.
    pub fn none() -> Self {
        RetryPolicy {
            max_elapsed: Duration::ZERO,
            ..RetryPolicy::default()
        }
    }

    /// Delay before attempt number `attempt` (1-based: the delay after the
    /// first failure is `delay(1)`).
    pub(crate) fn delay(&self, attempt: u32) -> Duration {
        qosd_model::core::backoff::Backoff::new(self.initial_delay, self.max_delay).delay(attempt)
    }
}

/// Options of [`CriClient::connect`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectOptions {
    /// Timeout of one attempt to open the socket.
    pub connect_timeout: Duration,
    /// Deadline of each RPC.
    pub call_timeout: Duration,
    /// Retries while the runtime is down or restarting (connect and calls).
    pub retry: RetryPolicy,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            connect_timeout: Duration::from_secs(2),
            call_timeout: Duration::from_secs(10),
            retry: RetryPolicy::default(),
        }
    }
}

/// Errors of the CRI client.
#[derive(Debug, thiserror::Error)]
pub enum CriError {
    /// The runtime endpoint is not a usable UNIX socket address.
    #[error("invalid runtime endpoint {endpoint:?}: {reason}")]
    BadEndpoint {
        /// The endpoint as given.
        endpoint: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The socket could not be reached before the retry policy gave up.
    #[error(
        "container runtime at {endpoint} is not reachable ({attempts} attempt(s) over {:.1}s): {detail}",
        elapsed.as_secs_f64()
    )]
    Unreachable {
        /// The endpoint dialled.
        endpoint: String,
        /// Connection attempts made.
        attempts: u32,
        /// Time from the first attempt to giving up.
        elapsed: Duration,
        /// The last attempt's error.
        detail: String,
    },
    /// The runtime answered, but `runtime.v1.RuntimeService/Version` is
    /// unimplemented (a runtime that speaks only `v1alpha2`).
    #[error(
        "container runtime at {endpoint} does not serve the CRI runtime.v1 API ({detail}); it may speak \
         only the older v1alpha2 API: qosd needs CRI v1 (containerd >= 1.6, CRI-O >= 1.23)"
    )]
    OldApi {
        /// The endpoint dialled.
        endpoint: String,
        /// The runtime's answer to `Version`.
        detail: String,
    },
    /// `Version` reports a CRI API version other than `v1`.
    #[error(
        "container runtime at {endpoint} ({runtime_name} {runtime_version}) reports CRI API version \
         {api_version:?}; qosd needs {CRI_API_VERSION}"
    )]
    UnsupportedVersion {
        /// The endpoint dialled.
        endpoint: String,
        /// `VersionResponse.runtime_name` (e.g. `containerd`).
        runtime_name: String,
        /// `VersionResponse.runtime_version`.
        runtime_version: String,
        /// `VersionResponse.runtime_api_version`.
        api_version: String,
    },
    /// An RPC failed with a gRPC status (after any retries).
    #[error("CRI {method} failed: {code:?}: {message}")]
    Call {
        /// The CRI method, e.g. `ListPodSandbox`.
        method: &'static str,
        /// The gRPC status code.
        code: Code,
        /// The gRPC status message.
        message: String,
    },
    /// An RPC succeeded but its answer lacks a field qosd needs.
    #[error("CRI {method}: the runtime's answer lacks {what}")]
    Malformed {
        /// The CRI method.
        method: &'static str,
        /// The missing field.
        what: String,
    },
}

impl CriError {
    /// The runtime answered with a message above the 16 MiB limit
    /// (e.g. a huge ListPodSandbox): it is reachable, but its answer is
    /// not usable.
    pub fn is_too_large(&self) -> bool {
        match self {
            CriError::Call { code, message, .. } => {
                matches!(code, Code::OutOfRange | Code::ResourceExhausted)
                    && message.contains("too large")
            }
            _ => false,
        }
    }

    /// The object asked about does not exist (any more).
    pub fn is_not_found(&self) -> bool {
        match self {
            CriError::Call { code, message, .. } => {
                *code == Code::NotFound
                    || (*code == Code::Unknown
                        && message.to_ascii_lowercase().contains("not found"))
            }
            _ => false,
        }
    }

    #[cfg(test)]
    /// The runtime could not be reached (down, restarting, hung).
    pub(crate) fn is_unavailable(&self) -> bool {
        match self {
            CriError::Unreachable { .. } => true,
            CriError::Call { code, .. } => {
                matches!(code, Code::Unavailable | Code::DeadlineExceeded)
            }
            _ => false,
        }
    }
}

/// Whether a failed call is worth retrying: the connection is down or being
/// re-established (the runtime restarts), not an answer from the runtime.
fn retryable(status: &Status) -> bool {
    match status.code() {
        Code::Unavailable => true,
        Code::Unknown => {
            let m = status.message().to_ascii_lowercase();
            m.contains("transport") || m.contains("connect") || m.contains("broken pipe")
        }
        _ => false,
    }
}

/// Parse `unix:///path`, `unix:/path` or a bare absolute path into a socket path.
pub fn parse_endpoint(endpoint: &str) -> Result<PathBuf, CriError> {
    let bad = |reason: &str| CriError::BadEndpoint {
        endpoint: endpoint.to_string(),
        reason: reason.to_string(),
    };
    let path = if let Some(rest) = endpoint.strip_prefix("unix://") {
        rest
    } else if let Some(rest) = endpoint.strip_prefix("unix:") {
        rest
    } else if endpoint.contains("://") {
        return Err(bad("only unix:// sockets are supported"));
    } else {
        endpoint
    };
    if path.is_empty() {
        return Err(bad("empty socket path"));
    }
    if !path.starts_with('/') {
        return Err(bad("the socket path must be absolute"));
    }
    if path.contains('\0') {
        return Err(bad("NUL in socket path"));
    }
    Ok(PathBuf::from(path))
}

/// Called after every CRI call (method, duration including retries, ok).
pub(crate) type CallObserver = Box<dyn Fn(&'static str, Duration, bool) + Send + Sync>;

static CALL_OBSERVER: std::sync::OnceLock<CallObserver> = std::sync::OnceLock::new();

/// Install the process's CRI call observer (the daemon's metrics); only
/// the first call takes effect.
pub fn set_call_observer(f: CallObserver) {
    let _ = CALL_OBSERVER.set(f);
}

fn observe_call(method: &'static str, start: Instant, ok: bool) {
    if let Some(f) = CALL_OBSERVER.get() {
        f(method, start.elapsed(), ok);
    }
}

/// A connected CRI client (cheap to clone; calls may run concurrently).
#[derive(Debug, Clone)]
pub struct CriClient {
    opts: ConnectOptions,
    runtime: RuntimeServiceClient<Channel>,
    image: ImageServiceClient<Channel>,
    version: proto::VersionResponse,
}

impl CriClient {
    /// Connect to the runtime at `endpoint` and check that it speaks CRI
    /// `runtime.v1` (with `Version`). Retries per `opts.retry` while the
    /// socket is missing or refuses connections (a runtime starting or
    /// restarting); an answer that the API is absent fails at once.
    pub async fn connect(endpoint: &str, opts: ConnectOptions) -> Result<CriClient, CriError> {
        let path = parse_endpoint(endpoint)?;
        let uri = format!("unix://{}", path.display());
        let ep = Endpoint::from_shared(uri.clone())
            .map_err(|e| CriError::BadEndpoint {
                endpoint: endpoint.to_string(),
                reason: e.to_string(),
            })?
            .connect_timeout(opts.connect_timeout)
            .timeout(opts.call_timeout);
        let start = Instant::now();
        let mut attempts = 0u32;
        let channel = loop {
            attempts += 1;
            let err = match ep.connect().await {
                Ok(ch) => break ch,
                Err(e) => {
                    let mut detail = if path.exists() {
                        String::new()
                    } else {
                        format!("socket {} does not exist; ", path.display())
                    };
                    detail.push_str(&error_chain(&e));
                    detail
                }
            };
            let delay = opts.retry.delay(attempts);
            if start.elapsed() + delay > opts.retry.max_elapsed {
                return Err(CriError::Unreachable {
                    endpoint: endpoint.to_string(),
                    attempts,
                    elapsed: start.elapsed(),
                    detail: err,
                });
            }
            tracing::debug!(endpoint, attempts, ?delay, error = %err, "CRI runtime not reachable; retrying");
            tokio::time::sleep(delay).await;
        };
        let runtime = RuntimeServiceClient::new(channel.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        let image = ImageServiceClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        let mut client = CriClient {
            opts,
            runtime,
            image,
            version: proto::VersionResponse::default(),
        };
        let remaining = opts.retry.max_elapsed.saturating_sub(start.elapsed());
        let version = client
            .retrying("Version", remaining, |mut c| async move {
                c.version(proto::VersionRequest {
                    version: CRI_API_VERSION.to_string(),
                })
                .await
            })
            .await
            .map_err(|e| match e {
                CriError::Call {
                    code: Code::Unimplemented,
                    message,
                    ..
                } => CriError::OldApi {
                    endpoint: endpoint.to_string(),
                    detail: format!("Version: Unimplemented: {message}"),
                },
                other => other,
            })?;
        check_version(endpoint, &version)?;
        client.version = version;
        Ok(client)
    }

    #[cfg(test)]
    /// The `Version` answer seen at connect time.
    pub(crate) fn runtime_version(&self) -> &proto::VersionResponse {
        &self.version
    }

    /// Run one RuntimeService RPC, retrying while the connection is down,
    /// for at most `budget`.
    async fn retrying<T, F, Fut>(
        &self,
        method: &'static str,
        budget: Duration,
        mut f: F,
    ) -> Result<T, CriError>
    where
        F: FnMut(RuntimeServiceClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let start = Instant::now();
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            match f(self.runtime.clone()).await {
                Ok(r) => {
                    observe_call(method, start, true);
                    return Ok(r.into_inner());
                }
                Err(s) => {
                    let delay = self.opts.retry.delay(attempt);
                    if !retryable(&s) || start.elapsed() + delay > budget {
                        observe_call(method, start, false);
                        return Err(call_error(method, s));
                    }
                    tracing::debug!(method, attempt, ?delay, status = %s, "CRI call failed; retrying");
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }

    async fn call<T, F, Fut>(&self, method: &'static str, f: F) -> Result<T, CriError>
    where
        F: FnMut(RuntimeServiceClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        self.retrying(method, self.opts.retry.max_elapsed, f).await
    }

    /// `Status` (runtime conditions; `verbose` adds the runtime's info).
    pub(crate) async fn status(&self, verbose: bool) -> Result<proto::StatusResponse, CriError> {
        self.call("Status", |mut c| async move {
            c.status(proto::StatusRequest { verbose }).await
        })
        .await
    }

    #[cfg(test)]
    /// `RuntimeConfig`: the runtime's cgroup driver. `Ok(None)` when the
    /// runtime does not serve it (older than CRI 1.28, e.g. containerd 1.6).
    pub(crate) async fn runtime_config(
        &self,
    ) -> Result<Option<qosd_model::core::model::CgroupDriver>, CriError> {
        let r = self
            .call("RuntimeConfig", |mut c| async move {
                c.runtime_config(proto::RuntimeConfigRequest {}).await
            })
            .await;
        match r {
            Ok(resp) => {
                Ok(resp
                    .linux
                    .map(|l| match proto::CgroupDriver::try_from(l.cgroup_driver) {
                        Ok(proto::CgroupDriver::Cgroupfs) => {
                            qosd_model::core::model::CgroupDriver::Cgroupfs
                        }
                        _ => qosd_model::core::model::CgroupDriver::Systemd,
                    }))
            }
            Err(CriError::Call {
                code: Code::Unimplemented,
                ..
            }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `ListPodSandbox` (all states).
    pub async fn list_pod_sandboxes(&self) -> Result<Vec<proto::PodSandbox>, CriError> {
        self.call("ListPodSandbox", |mut c| async move {
            c.list_pod_sandbox(proto::ListPodSandboxRequest { filter: None })
                .await
        })
        .await
        .map(|r| r.items)
    }

    /// `PodSandboxStatus`; `verbose` asks for the runtime's info map (holds
    /// the sandbox config with its cgroup parent on containerd).
    pub(crate) async fn pod_sandbox_status(
        &self,
        pod_sandbox_id: &str,
        verbose: bool,
    ) -> Result<proto::PodSandboxStatusResponse, CriError> {
        self.call("PodSandboxStatus", |mut c| {
            let pod_sandbox_id = pod_sandbox_id.to_string();
            async move {
                c.pod_sandbox_status(proto::PodSandboxStatusRequest {
                    pod_sandbox_id,
                    verbose,
                })
                .await
            }
        })
        .await
    }

    /// `ListContainers` (all states; optionally of one sandbox).
    pub(crate) async fn list_containers(
        &self,
        pod_sandbox_id: Option<&str>,
    ) -> Result<Vec<proto::Container>, CriError> {
        let filter = pod_sandbox_id.map(|id| proto::ContainerFilter {
            pod_sandbox_id: id.to_string(),
            ..Default::default()
        });
        self.call("ListContainers", |mut c| {
            let filter = filter.clone();
            async move {
                c.list_containers(proto::ListContainersRequest { filter })
                    .await
            }
        })
        .await
        .map(|r| r.containers)
    }

    /// `ContainerStatus`; `verbose` adds the runtime's info map.
    pub async fn container_status(
        &self,
        container_id: &str,
        verbose: bool,
    ) -> Result<proto::ContainerStatusResponse, CriError> {
        self.call("ContainerStatus", |mut c| {
            let container_id = container_id.to_string();
            async move {
                c.container_status(proto::ContainerStatusRequest {
                    container_id,
                    verbose,
                })
                .await
            }
        })
        .await
    }

    /// `ListContainerStats` (all running containers).
    pub async fn list_container_stats(&self) -> Result<Vec<proto::ContainerStats>, CriError> {
        self.call("ListContainerStats", |mut c| async move {
            c.list_container_stats(proto::ListContainerStatsRequest { filter: None })
                .await
        })
        .await
        .map(|r| r.stats)
    }

    /// `UpdateContainerResources` (Linux resources).
    pub async fn update_container_resources(
        &self,
        container_id: &str,
        linux: proto::LinuxContainerResources,
    ) -> Result<(), CriError> {
        self.call("UpdateContainerResources", |mut c| {
            let req = proto::UpdateContainerResourcesRequest {
                container_id: container_id.to_string(),
                linux: Some(linux.clone()),
                ..Default::default()
            };
            async move { c.update_container_resources(req).await }
        })
        .await
        .map(|_| ())
    }

    /// `StopContainer` with a grace period in seconds (0: kill at once).
    pub(crate) async fn stop_container(
        &self,
        container_id: &str,
        timeout_seconds: i64,
    ) -> Result<(), CriError> {
        self.call("StopContainer", |mut c| {
            let container_id = container_id.to_string();
            async move {
                c.stop_container(proto::StopContainerRequest {
                    container_id,
                    timeout: timeout_seconds,
                })
                .await
            }
        })
        .await
        .map(|_| ())
    }

    /// `StopPodSandbox` (idempotent).
    pub async fn stop_pod_sandbox(&self, pod_sandbox_id: &str) -> Result<(), CriError> {
        self.call("StopPodSandbox", |mut c| {
            let pod_sandbox_id = pod_sandbox_id.to_string();
            async move {
                c.stop_pod_sandbox(proto::StopPodSandboxRequest { pod_sandbox_id })
                    .await
            }
        })
        .await
        .map(|_| ())
    }

    /// `RemovePodSandbox` (idempotent).
    pub async fn remove_pod_sandbox(&self, pod_sandbox_id: &str) -> Result<(), CriError> {
        self.call("RemovePodSandbox", |mut c| {
            let pod_sandbox_id = pod_sandbox_id.to_string();
            async move {
                c.remove_pod_sandbox(proto::RemovePodSandboxRequest { pod_sandbox_id })
                    .await
            }
        })
        .await
        .map(|_| ())
    }

    /// `ListImages` (ImageService).
    pub async fn list_images(&self) -> Result<Vec<proto::Image>, CriError> {
        let mut c = self.image.clone();
        c.list_images(proto::ListImagesRequest { filter: None })
            .await
            .map(|r| r.into_inner().images)
            .map_err(|s| call_error("ListImages", s))
    }

    /// `RemoveImage` (ImageService; idempotent).
    pub(crate) async fn remove_image(&self, image: &str) -> Result<(), CriError> {
        let mut c = self.image.clone();
        c.remove_image(proto::RemoveImageRequest {
            image: Some(proto::ImageSpec {
                image: image.to_string(),
                ..Default::default()
            }),
        })
        .await
        .map(|_| ())
        .map_err(|s| call_error("RemoveImage", s))
    }

    /// `RemoveContainer` (idempotent).
    pub(crate) async fn remove_container(&self, container_id: &str) -> Result<(), CriError> {
        self.call("RemoveContainer", |mut c| {
            let container_id = container_id.to_string();
            async move {
                c.remove_container(proto::RemoveContainerRequest { container_id })
                    .await
            }
        })
        .await
        .map(|_| ())
    }

    /// The raw RuntimeService client, for RPCs this wrapper does not cover
    /// (the test support creates pods with it).
    pub fn runtime_service(&self) -> RuntimeServiceClient<Channel> {
        self.runtime.clone()
    }
}

fn check_version(endpoint: &str, v: &proto::VersionResponse) -> Result<(), CriError> {
    let api = v.runtime_api_version.trim();
    let api_ok = api == CRI_API_VERSION
        || (api.starts_with(CRI_API_VERSION) && !api.contains("alpha") && !api.contains("beta"));
    if api_ok {
        Ok(())
    } else {
        Err(CriError::UnsupportedVersion {
            endpoint: endpoint.to_string(),
            runtime_name: v.runtime_name.clone(),
            runtime_version: v.runtime_version.clone(),
            api_version: v.runtime_api_version.clone(),
        })
    }
}

fn call_error(method: &'static str, s: Status) -> CriError {
    let mut message = s.message().to_string();
    if let Some(src) = std::error::Error::source(&s) {
        let chain = error_chain(src);
        if !chain.is_empty() && !message.contains(&chain) {
            message = format!("{message}: {chain}");
        }
    }
    // tonic reports its own per-request timeout as Cancelled.
    let code = if s.code() == Code::Cancelled && message.contains("Timeout expired") {
        Code::DeadlineExceeded
    } else {
        s.code()
    };
    CriError::Call {
        method,
        code,
        message,
    }
}

pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(s) = cur {
        let t = s.to_string();
        if !parts.iter().any(|p| p.contains(&t)) {
            parts.push(t);
        }
        cur = s.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        let ok = [
            (
                "unix:///run/containerd/containerd.sock",
                "/run/containerd/containerd.sock",
            ),
            ("unix:/var/run/crio/crio.sock", "/var/run/crio/crio.sock"),
            ("/tmp/x.sock", "/tmp/x.sock"),
        ];
        for (e, p) in ok {
            assert_eq!(parse_endpoint(e).unwrap(), PathBuf::from(p), "{e}");
        }
        for e in [
            "tcp://127.0.0.1:1",
            "unix://",
            "relative.sock",
            "unix://a\0b",
            "",
        ] {
            assert!(parse_endpoint(e).is_err(), "{e:?} accepted");
        }
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let p = RetryPolicy {
            initial_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(700),
            max_elapsed: Duration::from_secs(5),
        };
        let d: Vec<u128> = (1..=6).map(|a| p.delay(a).as_millis()).collect();
        assert_eq!(d, [100, 200, 400, 700, 700, 700]);
        assert_eq!(p.delay(200), Duration::from_millis(700));
    }

    #[test]
    fn versions() {
        let v = |api: &str| proto::VersionResponse {
            version: "0.1.0".into(),
            runtime_name: "containerd".into(),
            runtime_version: "1.6.20".into(),
            runtime_api_version: api.into(),
        };
        assert!(check_version("e", &v("v1")).is_ok());
        for old in ["v1alpha2", "0.1.0", ""] {
            let e = check_version("e", &v(old)).unwrap_err();
            assert!(e.to_string().contains("needs v1"), "{e}");
        }
    }

    #[test]
    fn retryable_statuses() {
        assert!(retryable(&Status::unavailable("connection refused")));
        assert!(retryable(&Status::unknown("transport error")));
        assert!(!retryable(&Status::not_found("no such sandbox")));
        assert!(!retryable(&Status::unimplemented("")));
        let nf = call_error(
            "PodSandboxStatus",
            Status::not_found("an error occurred when try to find sandbox"),
        );
        assert!(nf.is_not_found());
        let nf2 = call_error("X", Status::unknown("sandbox \"x\" not found"));
        assert!(nf2.is_not_found());
    }
}

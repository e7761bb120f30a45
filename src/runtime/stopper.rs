//! Stops and removes pod sandboxes through the CRI for the evictor.
use std::sync::Mutex;
use std::time::Duration;

// ------------------------------------------------------- CRI pod stopper

/// Stops and removes pod sandboxes through the CRI for the evictor. It runs
/// on the eviction thread and connects lazily (evictions are rare; the
/// reconcile loop's client lives on the async side).
pub struct CriStopper {
    endpoint: String,
    handle: tokio::runtime::Handle,
    client: Mutex<Option<crate::cri::CriClient>>,
}

impl CriStopper {
    pub fn new(endpoint: String, handle: tokio::runtime::Handle) -> CriStopper {
        CriStopper {
            endpoint,
            handle,
            client: Mutex::new(None),
        }
    }

    fn with_client<T>(
        &self,
        f: impl FnOnce(crate::cri::CriClient) -> Result<T, crate::cri::CriError>,
    ) -> Result<T, String> {
        let mut guard = self.client.lock().map_err(|e| e.to_string())?;
        let client = match guard.as_ref() {
            Some(c) => c.clone(),
            None => {
                let opts = crate::cri::ConnectOptions {
                    retry: crate::cri::RetryPolicy {
                        max_elapsed: Duration::from_secs(2),
                        ..Default::default()
                    },
                    ..Default::default()
                };
                let c = self
                    .handle
                    .block_on(crate::cri::CriClient::connect(&self.endpoint, opts))
                    .map_err(|e| e.to_string())?;
                *guard = Some(c.clone());
                c
            }
        };
        drop(guard);
        f(client).map_err(|e| e.to_string())
    }
}

impl crate::runtime::evictor::PodStopper for CriStopper {
    fn stop_pod(&self, sandbox_id: &str, grace: Duration) -> Result<(), String> {
        let handle = self.handle.clone();
        self.with_client(|c| {
            handle.block_on(async {
                if !grace.is_zero() {
                    // StopPodSandbox has no grace period: stop the
                    // containers first with it (TERM, grace, KILL).
                    for ctr in c.list_containers(Some(sandbox_id)).await? {
                        c.stop_container(&ctr.id, grace.as_secs() as i64).await?;
                    }
                }
                c.stop_pod_sandbox(sandbox_id).await
            })
        })
    }

    fn remove_pod(&self, sandbox_id: &str) -> Result<(), String> {
        let handle = self.handle.clone();
        self.with_client(|c| handle.block_on(c.remove_pod_sandbox(sandbox_id)))
    }
}

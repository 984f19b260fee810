//! A kubelet for the harness, which has none.
//!
//! It watches the Sluice worker pods of the namespaces tests register and
//! does what a kubelet would, through the real API server: binds each new pod
//! to a node, starts its container as a local process — `sluice-worker` with
//! exactly the pod's args and env, and the pod's ConfigMap/Secret volumes
//! written under a per-pod root directory (paths under a mount are translated
//! into it, as a container's filesystem would be) — reports `Running` and,
//! following the readiness probe (/readyz), `Ready`. When a pod is deleted it
//! sends SIGTERM, waits for the process to exit, and only then removes the
//! pod, so graceful termination behaves as on a node. A process that dies is
//! restarted (restartPolicy Always). The one necessary deviation: all
//! processes share the host network, so each gets its own HTTP port through
//! `SLUICE_WORKER__HTTP_PORT` instead of the pod's port.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use serde_json::json;

use crate::worker::{Worker, http_get_at, worker_bin};

/// One container run, for assertions about who ran when.
#[derive(Debug, Clone)]
pub struct ProcessRecord {
    pub namespace: String,
    pub pod: String,
    pub pid: u32,
    /// The worker config document the process was started with.
    pub config: String,
    pub started: Instant,
    pub ready: Option<Instant>,
    pub stopped: Option<Instant>,
    pub exit_ok: Option<bool>,
}

struct Running {
    worker: Worker,
    record: usize,
    ready: bool,
    terminating_since: Option<Instant>,
}

#[derive(Default)]
struct State {
    namespaces: BTreeSet<String>,
    records: Vec<ProcessRecord>,
    /// (namespace, pod) → its current process.
    running: HashMap<(String, String), Running>,
}

/// The harness's kubelet (one per test process).
pub struct FakeKubelet {
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for FakeKubelet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FakeKubelet")
    }
}

const NODE: &str = "sluice-fake-node";
const SELECTOR: &str = "app.kubernetes.io/name=sluice-worker";

/// The shared kubelet, started on first use.
pub fn kubelet() -> &'static FakeKubelet {
    static KUBELET: OnceLock<FakeKubelet> = OnceLock::new();
    KUBELET.get_or_init(|| {
        let state = Arc::new(Mutex::new(State::default()));
        let shared = Arc::clone(&state);
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            rt.block_on(async move {
                let client = client().await;
                loop {
                    sync(&client, &shared).await;
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            });
        });
        FakeKubelet { state }
    })
}

async fn client() -> Client {
    let kubeconfig = Kubeconfig::read_from(&crate::harness().kubeconfig).expect("read kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await.expect("kube config");
    Client::try_from(config).expect("kube client")
}

/// While alive, the kubelet runs `namespace`'s pods; dropping it kills them.
#[derive(Debug)]
pub struct Managed {
    namespace: String,
}

impl FakeKubelet {
    pub fn manage(&self, namespace: &str) -> Managed {
        if let Ok(mut s) = self.state.lock() {
            s.namespaces.insert(namespace.to_owned());
        }
        Managed { namespace: namespace.to_owned() }
    }

    /// Every container run in `namespace` so far.
    pub fn history(&self, namespace: &str) -> Vec<ProcessRecord> {
        self.state
            .lock()
            .map(|s| s.records.iter().filter(|r| r.namespace == namespace).cloned().collect())
            .unwrap_or_default()
    }

    /// `/metrics` of each of `namespace`'s running processes.
    pub fn metrics(&self, namespace: &str) -> String {
        self.each_running(namespace, |_, w| w.get("/metrics").map(|(_, body)| body))
    }

    /// Logs of `namespace`'s running processes (for failure messages).
    pub fn logs(&self, namespace: &str) -> String {
        self.each_running(namespace, |pod, w| Some(format!("--- {pod}\n{}", w.log())))
    }

    /// `f(pod, process)` of each of `namespace`'s running processes, joined.
    fn each_running(&self, namespace: &str, f: impl Fn(&str, &Worker) -> Option<String>) -> String {
        self.state
            .lock()
            .map(|s| {
                s.running
                    .iter()
                    .filter(|((ns, _), _)| ns == namespace)
                    .filter_map(|((_, pod), r)| f(pod, &r.worker))
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default()
    }
}

impl Drop for Managed {
    fn drop(&mut self) {
        if let Ok(mut s) = kubelet().state.lock() {
            s.namespaces.remove(&self.namespace);
            let ns = self.namespace.clone();
            s.running.retain(|(n, _), _| *n != ns); // Worker handles kill their process on drop
        }
    }
}

/// Writes the pod's ConfigMap and Secret volumes under `root` at their mount
/// paths; returns (mount path, local path) pairs.
async fn materialize_volumes(
    client: &Client,
    namespace: &str,
    pod: &Pod,
    root: &Path,
) -> Vec<(String, std::path::PathBuf)> {
    let Some(spec) = &pod.spec else { return Vec::new() };
    let volumes = spec.volumes.clone().unwrap_or_default();
    let mounts = spec.containers.first().and_then(|c| c.volume_mounts.clone()).unwrap_or_default();
    let mut out = Vec::new();
    for m in mounts {
        let Some(v) = volumes.iter().find(|v| v.name == m.name) else { continue };
        let local = root.join(m.mount_path.trim_start_matches('/'));
        std::fs::create_dir_all(&local).ok();
        let files: Vec<(String, Vec<u8>)> = if let Some(cm) = &v.config_map {
            match Api::<ConfigMap>::namespaced(client.clone(), namespace).get_opt(&cm.name).await {
                Ok(Some(c)) => c.data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.into_bytes())).collect(),
                _ => Vec::new(),
            }
        } else if let Some(name) = v.secret.as_ref().and_then(|s| s.secret_name.clone()) {
            match Api::<Secret>::namespaced(client.clone(), namespace).get_opt(&name).await {
                Ok(Some(s)) => s.data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect(),
                _ => Vec::new(),
            }
        } else {
            Vec::new()
        };
        for (file, bytes) in files {
            std::fs::write(local.join(file), bytes).ok();
        }
        out.push((m.mount_path.clone(), local));
    }
    out
}

/// Starts the pod's container as a local process; returns it and its config.
async fn start(client: &Client, namespace: &str, pod: &Pod) -> Option<(Worker, String)> {
    let name = pod.metadata.name.clone()?;
    let container = pod.spec.as_ref()?.containers.first()?.clone();
    let root = crate::harness().run_dir.join("pods").join(namespace).join(&name);
    let mounts = materialize_volumes(client, namespace, pod, &root).await;
    let translate = |arg: &str| -> String {
        mounts
            .iter()
            .find(|(m, _)| arg.starts_with(m.as_str()))
            .map(|(m, local)| format!("{}{}", local.display(), &arg[m.len()..]))
            .unwrap_or_else(|| arg.to_owned())
    };
    assert_eq!(container.command.as_ref().and_then(|c| c.first()).map(String::as_str), Some("sluice-worker"));
    let args: Vec<String> = container.args.clone().unwrap_or_default().iter().map(|a| translate(a)).collect();
    let config_path = args.iter().skip_while(|a| *a != "--config").nth(1).cloned().unwrap_or_default();
    let config = std::fs::read_to_string(&config_path).unwrap_or_default();
    let mut cmd = std::process::Command::new(worker_bin());
    cmd.args(&args);
    for e in container.env.clone().unwrap_or_default() {
        let field = e.value_from.as_ref().and_then(|v| v.field_ref.as_ref()).map(|f| f.field_path.as_str());
        let value = match (e.value, field) {
            (Some(v), _) => v,
            (None, Some("metadata.name")) => name.clone(),
            (None, Some("metadata.namespace")) => namespace.to_owned(),
            _ => continue,
        };
        cmd.env(e.name, value);
    }
    if let Some((_, secrets)) = mounts.iter().find(|(m, _)| m.starts_with("/etc/sluice/secrets/")) {
        cmd.env("SLUICE_WORKER__SECRETS_DIR", secrets.parent().unwrap_or(secrets));
    }
    // The local state volume (an emptyDir or a claim): a directory of the
    // pod's, kept across its container's restarts.
    if let Some((_, dir)) = mounts.iter().find(|(m, _)| m == sluice_crds::contract::STATE_DIR) {
        cmd.env("SLUICE_WORKER__STATE_DIR", dir);
    }
    // The pod's own address and the port its container declares, as on a
    // cluster: the operator reaches a worker at podIP:port.
    let port = container.ports.as_ref().and_then(|p| p.first()).map_or(9400, |p| p.container_port);
    let ip = pod_ip();
    cmd.env("SLUICE_WORKER__HTTP_PORT", port.to_string()).env("SLUICE_WORKER__HTTP_ADDRESS", &ip);
    cmd.env("SLUICE_WORKER__PIN_CORES", "false");
    std::fs::create_dir_all(&root).ok();
    let log = root.join("stdout.log");
    Some((Worker::container(cmd, &ip, u16::try_from(port).unwrap_or(9400), &log), config))
}

/// A loopback address of its own for each pod (Linux routes all of
/// 127.0.0.0/8 to lo), so every worker listens on its pod's declared port
/// like on a cluster. The second octet comes from this process's id, so two
/// test processes do not hand out the same address.
fn pod_ip() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("127.{}.{}.{}", 1 + std::process::id() % 250, (n / 250) % 250, n % 250 + 1)
}

/// Whether the API server took the patch.
async fn patch_status(api: &Api<Pod>, pod: &str, ip: Option<&str>, ready: bool) -> bool {
    let now = "2026-01-01T00:00:00Z";
    let status = if ready { "True" } else { "False" };
    let patch = json!({
        "status": {
            "phase": "Running",
            "podIP": ip,
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
                {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                {"type": "ContainersReady", "status": status, "lastTransitionTime": now},
                {"type": "Ready", "status": status, "lastTransitionTime": now},
            ],
        }
    });
    api.patch_status(pod, &PatchParams::default(), &Patch::Merge(&patch)).await.is_ok()
}

fn finish(s: &mut State, key: &(String, String), ok: bool) {
    if let Some(r) = s.running.remove(key) {
        let rec = &mut s.records[r.record];
        rec.stopped = Some(Instant::now());
        rec.exit_ok = Some(ok);
    }
}

async fn sync(client: &Client, state: &Arc<Mutex<State>>) {
    let namespaces: Vec<String> = state.lock().map(|s| s.namespaces.iter().cloned().collect()).unwrap_or_default();
    for ns in namespaces {
        let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let Ok(list) = api.list(&ListParams::default().labels(SELECTOR)).await else { continue };
        let names: BTreeSet<String> = list.items.iter().filter_map(|p| p.metadata.name.clone()).collect();
        // Pods that vanished (force-deleted): kill their processes.
        let gone: Vec<(String, String)> = state
            .lock()
            .map(|s| s.running.keys().filter(|(n, p)| *n == ns && !names.contains(p)).cloned().collect())
            .unwrap_or_default();
        for key in gone {
            if let Ok(mut s) = state.lock() {
                if let Some(r) = s.running.get_mut(&key) {
                    r.worker.signal("KILL");
                }
                finish(&mut s, &key, false);
            }
        }
        for pod in &list.items {
            let Some(name) = pod.metadata.name.clone() else { continue };
            let key = (ns.clone(), name.clone());
            let deleting = pod.metadata.deletion_timestamp.is_some();
            let bound = pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
            if !bound {
                if !deleting {
                    let binding = json!({
                        "apiVersion": "v1", "kind": "Binding",
                        "metadata": {"name": name, "namespace": ns},
                        "target": {"apiVersion": "v1", "kind": "Node", "name": NODE},
                    });
                    let _ = api
                        .create_subresource::<serde_json::Value, serde_json::Value>(
                            "binding",
                            &name,
                            &PostParams::default(),
                            &binding,
                        )
                        .await;
                }
                continue;
            }
            if deleting {
                // Graceful termination: SIGTERM, wait for exit, then remove the pod.
                let grace = pod.spec.as_ref().and_then(|s| s.termination_grace_period_seconds).unwrap_or(30);
                let exited = match state.lock() {
                    Ok(mut s) => {
                        let outcome = s.running.get_mut(&key).map(|r| {
                            if r.terminating_since.is_none() {
                                r.worker.signal("TERM");
                                r.terminating_since = Some(Instant::now());
                            }
                            let since = r.terminating_since.unwrap_or_else(Instant::now);
                            match r.worker.try_exit() {
                                Some(ok) => Some(ok),
                                None if since.elapsed() > Duration::from_secs(grace.unsigned_abs()) => {
                                    r.worker.signal("KILL");
                                    Some(false)
                                }
                                None => None,
                            }
                        });
                        match outcome {
                            None => true,
                            Some(Some(ok)) => {
                                finish(&mut s, &key, ok);
                                true
                            }
                            Some(None) => false,
                        }
                    }
                    Err(_) => false,
                };
                if exited {
                    let _ = api
                        .delete(&name, &DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::default() })
                        .await;
                }
                continue;
            }
            // A crashed container restarts (restartPolicy Always).
            let crashed = state.lock().ok().and_then(|mut s| s.running.get_mut(&key).and_then(|r| r.worker.try_exit()));
            if let Some(ok) = crashed {
                if let Ok(mut s) = state.lock() {
                    finish(&mut s, &key, ok);
                }
                let _ = patch_status(&api, &name, None, false).await;
            }
            let running = state.lock().map(|s| s.running.contains_key(&key)).unwrap_or(true);
            if !running {
                let mut ip = None;
                if let Some((worker, config)) = start(client, &ns, pod).await
                    && let Ok(mut s) = state.lock()
                {
                    ip = Some(worker.http_host.clone());
                    if !s.namespaces.contains(&ns) {
                        // The test let go of the namespace while this
                        // process started: stop it (dropping `worker` kills
                        // it), or it would outlive the test unseen.
                        continue;
                    }
                    let record = s.records.len();
                    s.records.push(ProcessRecord {
                        namespace: ns.clone(),
                        pod: name.clone(),
                        pid: worker.pid(),
                        config,
                        started: Instant::now(),
                        ready: None,
                        stopped: None,
                        exit_ok: None,
                    });
                    s.running.insert(key.clone(), Running { worker, record, ready: false, terminating_since: None });
                }
                let _ = patch_status(&api, &name, ip.as_deref(), false).await;
                continue;
            }
            // Readiness probe.
            let probe = state
                .lock()
                .ok()
                .and_then(|s| s.running.get(&key).map(|r| (r.worker.http_host.clone(), r.worker.http_port, r.ready)));
            let Some((host, port, was_ready)) = probe else { continue };
            if !was_ready {
                // A real kubelet refreshes mounted ConfigMaps some time
                // after they change; a worker waiting for its current
                // config sees the update the same way here.
                let root = crate::harness().run_dir.join("pods").join(&ns).join(&name);
                materialize_volumes(client, &ns, pod, &root).await;
            }
            let ready = matches!(http_get_at(&host, port, "/readyz"), Some((200, _)));
            // Recorded only once the API server took it: a patch that
            // failed (a timeout on a loaded machine) is tried again at the
            // next probe, as a kubelet's status manager retries.
            if ready != was_ready
                && patch_status(&api, &name, Some(&host), ready).await
                && let Ok(mut s) = state.lock()
                && let Some(r) = s.running.get_mut(&key)
            {
                r.ready = ready;
                let record = r.record;
                if ready && s.records[record].ready.is_none() {
                    s.records[record].ready = Some(Instant::now());
                }
            }
        }
    }
}

//! Loading a [`WorkerConfig`].
//!
//! * `serve`: built-in defaults → the mounted config file → `SLUICE_*`
//!   environment variables. A variable names a field path with `__` between
//!   levels and SCREAMING_SNAKE_CASE for camelCase: `SLUICE_WORKER__HTTP_PORT=9500`
//!   sets `worker.httpPort`. Values are read as JSON when they parse (numbers,
//!   booleans), else as strings. Unknown fields are rejected, naming the path.
//! * `run -f job.yaml`: the StreamJob manifest a user would `kubectl apply`,
//!   turned into the same document (one worker, local partitions).

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Map, Value};
use sluice_crds::{JobIdentity, SourcePartitions, SourceSpec, StreamJob, WorkerConfig, WorkerSettings};

use crate::Error;

/// Top-level keys of the worker config document.
const SECTIONS: [&str; 5] = ["job", "spec", "partitions", "assignmentEpoch", "worker"];

/// Reads the config file and applies environment overrides.
pub fn load_layered(path: &str, env: impl IntoIterator<Item = (String, String)>) -> Result<WorkerConfig, Error> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(format!("read config {path}"), e))?;
    parse_layered(path, &text, env)
}

/// Reads the config file once it is the document this pod was rendered
/// with: `expected` is its hash from the pod template
/// ([`sluice_crds::EXPECTED_CONFIG_HASH_ENV`]). The kubelet updates a
/// mounted ConfigMap some time after a new pod starts, so the file may
/// still hold the previous assignment generation; consuming by it would
/// run two generations' ownership at once. Re-reads every `poll` until it
/// matches; nothing is consumed meanwhile, and the caller ends the wait on
/// SIGTERM by dropping the future.
pub async fn read_current(path: &str, expected: Option<&str>, poll: Duration) -> Result<String, Error> {
    let mut waited = 0u32;
    loop {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(format!("read config {path}"), e))?;
        let hash = sluice_crds::config_hash(&text);
        match expected {
            Some(want) if want != hash => {
                if waited.is_multiple_of(10) {
                    tracing::warn!(
                        path,
                        read = %hash,
                        expected = want,
                        "the mounted config is from another generation; waiting for it to be updated"
                    );
                }
                waited += 1;
                tokio::time::sleep(poll).await;
            }
            _ => return Ok(text),
        }
    }
}

/// Parses a config document (`path` names it in errors) and applies
/// environment overrides.
pub fn parse_layered(
    path: &str,
    text: &str,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<WorkerConfig, Error> {
    let mut doc: Value =
        serde_saphyr::from_str(text).map_err(|e| Error::Config(format!("{path}: not valid YAML/JSON: {e}")))?;
    for (name, value) in env {
        let Some(rest) = name.strip_prefix("SLUICE_") else { continue };
        // `HTTP_PORT` → `httpPort`.
        let path: Vec<String> = rest.split("__").map(|p| sluice_crds::camel_case(&p.to_ascii_lowercase())).collect();
        // Only variables naming a section of the document are overrides;
        // others (SLUICE_LOG, ...) belong to someone else.
        if !path.first().is_some_and(|p| SECTIONS.contains(&p.as_str())) {
            continue;
        }
        set_path(&mut doc, &path, parse_value(&value)).map_err(|e| Error::Config(format!("{name}: {e}")))?;
    }
    let config: WorkerConfig =
        serde_json::from_value(doc).map_err(|e| Error::Config(format!("{path} (with SLUICE_* overrides): {e}")))?;
    // Checked, not guessed: a typo would otherwise log text where a
    // collector expects JSON.
    if !matches!(config.worker.log_format.as_str(), "text" | "json") {
        return Err(Error::Config(format!(
            "{path}: worker.logFormat is `{}`; it is `text` or `json`",
            config.worker.log_format
        )));
    }
    Ok(config)
}

fn parse_value(v: &str) -> Value {
    serde_json::from_str(v).unwrap_or_else(|_| Value::String(v.to_owned()))
}

fn set_path(doc: &mut Value, path: &[String], value: Value) -> Result<(), String> {
    let Some((last, parents)) = path.split_last() else { return Ok(()) };
    let mut node = doc;
    for p in parents {
        if !node.is_object() {
            return Err(format!("`{p}` is not an object"));
        }
        node = node
            .as_object_mut()
            .map(|m| m.entry(p.clone()).or_insert_with(|| Value::Object(Map::new())))
            .ok_or_else(|| format!("`{p}` is not an object"))?;
    }
    node.as_object_mut().ok_or_else(|| format!("cannot set `{last}`"))?.insert(last.clone(), value);
    Ok(())
}

/// The worker's ordinal: from the config, else the pod name's suffix
/// (`<job>-<n>`, the StatefulSet convention), else 0 for local runs.
pub fn ordinal(config: &WorkerConfig, pod_name: Option<&str>) -> Result<i32, Error> {
    if let Some(o) = config.worker.ordinal {
        return Ok(o);
    }
    match pod_name {
        Some(name) => name
            .rsplit_once('-')
            .and_then(|(_, n)| n.parse().ok())
            .ok_or_else(|| Error::Config(format!("cannot tell this worker's ordinal from pod name {name:?}"))),
        None => Ok(0),
    }
}

/// Builds the config of a local run from a StreamJob manifest: one worker
/// with `cores` engine threads, partitions looked up in Kafka for Kafka
/// sources (simulated for datagen, one for files).
pub fn from_manifest(text: &str, cores: Option<i32>, settings: WorkerSettings) -> Result<WorkerConfig, Error> {
    let job: StreamJob =
        serde_saphyr::from_str(text).map_err(|e| Error::Config(format!("not a valid StreamJob manifest: {e}")))?;
    job.spec.validate().map_err(|e| Error::Config(e.to_string()))?;
    let mut spec = job.spec;
    let available = std::thread::available_parallelism().map(|n| i32::try_from(n.get()).unwrap_or(1)).unwrap_or(1);
    let cores = cores.unwrap_or_else(|| (spec.workers * spec.cores_per_worker).min(available)).max(1);
    spec.workers = 1;
    spec.cores_per_worker = cores;
    let mut partitions = Vec::with_capacity(spec.sources.len());
    for s in &spec.sources {
        partitions.push(SourcePartitions { source: s.name.clone(), partitions: source_partitions(s, &settings)? });
    }
    let name = job.metadata.name.unwrap_or_else(|| "local".to_owned());
    let namespace = job.metadata.namespace.unwrap_or_else(|| "local".to_owned());
    Ok(WorkerConfig {
        job: JobIdentity { name, namespace },
        spec,
        partitions,
        assignment_epoch: 0,
        earlier_slots: Vec::new(),
        worker: WorkerSettings { ordinal: Some(0), ..settings },
    })
}

/// How many partitions a source has.
pub fn source_partitions(s: &SourceSpec, settings: &WorkerSettings) -> Result<i32, Error> {
    match (&s.kafka, &s.file, &s.datagen) {
        (Some(k), _, _) => {
            let config = crate::kafka::client_config(k.connection(), &settings.secrets_dir)?;
            crate::kafka::partition_count(&config, &k.topic, Duration::from_secs(15))
        }
        (None, Some(_), _) => Ok(1),
        (None, None, Some(d)) => Ok(d.partitions),
        _ => Err(Error::Config(format!("source {} has no kafka, file or datagen", s.name))),
    }
}

/// Environment variables, for [`load_layered`].
pub fn process_env() -> BTreeMap<String, String> {
    std::env::vars().filter(|(k, _)| k.starts_with("SLUICE_")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = r#"
job: { name: demo, namespace: prod }
partitions: [ { source: t, partitions: 4 } ]
spec:
  sql: SELECT a FROM t
  sources:
    - name: t
      kafka: { bootstrapServers: "k:9092", topic: t }
      schema: { columns: [ { name: a, type: bigint } ] }
  sink: { kafka: { bootstrapServers: "k:9092", topic: out } }
  workers: 2
"#;

    #[test]
    fn environment_overrides_the_file_and_typos_are_rejected() {
        let dir = std::env::temp_dir().join(format!("sluice-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("worker.yaml");
        std::fs::write(&path, CONFIG).unwrap();
        let path = path.to_str().unwrap();
        let env = [
            ("SLUICE_WORKER__HTTP_PORT".to_owned(), "9555".to_owned()),
            ("SLUICE_SPEC__ENGINE__BATCH_LINGER_MILLIS".to_owned(), "7".to_owned()),
            ("SLUICE_WORKER__LOG_FORMAT".to_owned(), "json".to_owned()),
            ("SLUICE_HARNESS".to_owned(), "1".to_owned()),
        ];
        let c = load_layered(path, env).unwrap();
        assert_eq!(c.worker.http_port, 9555);
        assert_eq!(c.worker.log_format, "json");
        assert_eq!(c.spec.engine.batch_linger_millis, 7);
        assert_eq!(c.spec.engine.batch_max_records, 4096, "defaults fill the rest");
        let err =
            load_layered(path, [("SLUICE_WORKER__HTTP_PROT".to_owned(), "1".to_owned())]).unwrap_err().to_string();
        assert!(err.contains("httpProt"), "{err}");
        let err =
            load_layered(path, [("SLUICE_WORKER__LOG_FORMAT".to_owned(), "jsno".to_owned())]).unwrap_err().to_string();
        assert!(err.contains("worker.logFormat is `jsno`; it is `text` or `json`"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn ordinal_comes_from_the_pod_name() {
        let c: WorkerConfig = serde_saphyr::from_str(CONFIG).unwrap();
        assert_eq!(ordinal(&c, Some("demo-job-3")).unwrap(), 3);
        assert!(ordinal(&c, Some("demo")).is_err());
        assert_eq!(ordinal(&c, None).unwrap(), 0);
    }

    #[test]
    fn manifests_become_one_local_worker() {
        let text =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../manifests/examples/quickstart.yaml"))
                .unwrap();
        let c = from_manifest(&text, Some(2), WorkerSettings::default()).unwrap();
        assert_eq!((c.spec.workers, c.spec.cores_per_worker), (1, 2));
        assert_eq!(c.partitions, vec![SourcePartitions { source: "trades".into(), partitions: 4 }]);
        assert_eq!(c.worker.ordinal, Some(0));
        let err = from_manifest(
            "apiVersion: sluice.dev/v1alpha1\nkind: StreamJob\nmetadata: {name: x}\nspec: {sql: 1, bogus: 2}",
            None,
            WorkerSettings::default(),
        );
        assert!(err.unwrap_err().to_string().contains("bogus"));
    }

    /// A worker whose mounted config is still the previous generation's
    /// waits until the kubelet updates it, then reads the new one.
    #[test]
    fn waits_for_the_config_of_its_own_generation() {
        let dir = std::env::temp_dir().join(format!("sluice-config-gen-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("worker.yaml");
        std::fs::write(&path, "assignmentEpoch: 1\n").unwrap();
        let new = "assignmentEpoch: 2\n";
        let expected = sluice_crds::config_hash(new);
        // Before the writer starts: on a loaded machine this thread may
        // run again only after the writer slept and wrote.
        let started = std::time::Instant::now();
        let writer = {
            let path = path.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(300));
                std::fs::write(&path, new).unwrap();
            })
        };
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let text =
            rt.block_on(read_current(path.to_str().unwrap(), Some(&expected), Duration::from_millis(20))).unwrap();
        writer.join().unwrap();
        assert_eq!(text, new);
        assert!(started.elapsed() >= Duration::from_millis(250), "it waited for the update");
        let unchecked = rt.block_on(read_current(path.to_str().unwrap(), None, Duration::from_millis(20))).unwrap();
        assert_eq!(unchecked, new, "no expectation (local runs): the file as it is");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

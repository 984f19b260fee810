//! Columns from the Schema Registry (`schema.registry`): the operator
//! reads each subject's schema when it reconciles the job, derives the
//! columns (`StreamJobSpec::with_registry_columns`, the function
//! `sluice-worker validate` and the workers use too), validates and plans
//! the job with them, and writes them into the workers' config — so every
//! pod of a generation reads the same columns. `latest` is read at every
//! reconcile: a new version registered while the job runs is picked up as
//! a change of the job (docs/formats.md, "Columns from the registry").

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::Api;

use sluice_crds::{ResolvedSchema, StreamJobSpec, SubjectSchema, reasons, requested_version};

use crate::registry_http::{client, fetch, unavailable};
use crate::validate::{Blocked, Invalid};

/// The longest the columns of one job may take to derive. The derivation
/// is bounded (`sluice_crds::REGISTRY_MAX_COLUMNS` and its kin) and runs
/// on a blocking thread, so no schema can stall the reconcile loop, which
/// serves every job; past this it is refused as the job's.
pub const DERIVE_DEADLINE: Duration = Duration::from_secs(5);

/// `spec` with the columns of its registry subjects derived; unchanged
/// when it names none. The registry's credentials and CA certificates are
/// read from the job's Secrets in `namespace`, through the API. Why the
/// columns could not be derived is the job's fault (no such subject, a
/// schema no columns hold: [`Blocked::Invalid`]) or the registry's (it did
/// not answer: [`Blocked::Unavailable`], retried with backoff).
pub async fn resolve(
    kube: &kube::Client,
    namespace: &str,
    spec: &StreamJobSpec,
) -> Result<(StreamJobSpec, Vec<ResolvedSchema>), Blocked> {
    let Some(registry) = spec.schema_registry.as_ref() else {
        return Ok((spec.clone(), Vec::new()));
    };
    let url = registry.url.trim_end_matches('/').to_owned();
    let mut wanted = Vec::new();
    for s in &spec.sources {
        if let Some(r) = &s.schema.registry
            && let Ok(version) = requested_version(r.version.as_ref())
        {
            wanted.push((r.subject.clone(), version));
        }
    }
    if wanted.is_empty() {
        return Ok((spec.clone(), Vec::new()));
    }
    let invalid = |message: String| Blocked::Invalid(Invalid { reason: reasons::INVALID_SPEC, message });
    // Before any Secret is read or any connection made: a URL with a
    // query or a user, or a password over http://, is refused here.
    if let Some(problem) = registry.access_problem() {
        return Err(invalid(problem));
    }
    let secrets: Api<Secret> = Api::namespaced(kube.clone(), namespace);
    let mut data = BTreeMap::new();
    for name in registry.secret_names() {
        match secrets.get_opt(name).await {
            Ok(Some(secret)) => {
                data.insert(name.to_owned(), secret.data.unwrap_or_default());
            }
            Ok(None) => {
                return Err(invalid(format!("spec.schemaRegistry: Secret {name} not found in namespace {namespace}")));
            }
            Err(e) => return Err(unavailable(&url, &format!("cannot read Secret {name}: {e}"))),
        }
    }
    let access = registry.access(|secret, key| {
        let value = data.get(secret).and_then(|d| d.get(key));
        value.map(|v| String::from_utf8_lossy(&v.0).into_owned()).ok_or_else(|| {
            invalid(format!("spec.schemaRegistry: Secret {secret} in namespace {namespace} has no key `{key}`"))
        })
    })?;
    let client = client(&access)?;
    let user = access.basic_auth.as_ref();
    let mut found: HashMap<(String, Option<u32>), Result<SubjectSchema, String>> = HashMap::new();
    for (subject, version) in wanted {
        let answer = fetch(&client, user, &url, &subject, version).await?;
        found.insert((subject, version), answer);
    }
    derive(spec.clone(), found, DERIVE_DEADLINE).await
}

/// The columns derived from the registry's answers, off the async runtime
/// and within `deadline`.
async fn derive(
    spec: StreamJobSpec,
    found: HashMap<(String, Option<u32>), Result<SubjectSchema, String>>,
    deadline: Duration,
) -> Result<(StreamJobSpec, Vec<ResolvedSchema>), Blocked> {
    let invalid = |message: String| Blocked::Invalid(Invalid { reason: reasons::INVALID_SPEC, message });
    let derived = off_runtime(deadline, move || {
        spec.with_registry_columns(
            |subject, version| {
                found.get(&(subject.to_owned(), version)).cloned().unwrap_or_else(|| Err("not read".into()))
            },
            sluice_formats::registry_columns::registry_columns,
        )
    })
    .await;
    match derived {
        Some(Ok(derived)) => derived.map_err(invalid),
        Some(Err(e)) => Err(invalid(format!("spec.schemaRegistry: deriving the columns failed (a bug): {e}"))),
        None => Err(invalid(format!(
            "spec.schemaRegistry: deriving the columns from the registry's schemas took longer than {deadline:?}; \
             declare the source's columns instead"
        ))),
    }
}

/// `work` on a blocking thread: the async runtime, which runs every job's
/// reconcile, never walks a schema itself. `None` past `deadline` (the
/// thread then finishes on its own and its answer is dropped);
/// `Some(Err)` if it panicked.
async fn off_runtime<T: Send + 'static>(
    deadline: Duration,
    work: impl FnOnce() -> T + Send + 'static,
) -> Option<Result<T, tokio::task::JoinError>> {
    tokio::time::timeout(deadline, tokio::task::spawn_blocking(work)).await.ok()
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::registry_http::test_server::{Answer, serve};

    fn job(url: &str, authentication: &str) -> StreamJobSpec {
        let job: sluice_crds::StreamJob = serde_saphyr::from_str(&format!(
            r"
apiVersion: sluice.dev/v1alpha1
kind: StreamJob
metadata: {{ name: j }}
spec:
  sql: SELECT * FROM orders
  schemaRegistry: {{ url: '{url}' {authentication} }}
  sources:
    - name: orders
      format: avro
      kafka: {{ bootstrapServers: 'kafka:9092', topic: orders }}
      schema: {{ registry: {{ subject: orders-value }} }}
  sink: {{ kafka: {{ bootstrapServers: 'kafka:9092', topic: out }} }}
"
        ))
        .unwrap();
        job.spec
    }

    /// No API server: a job that names no Secret never asks it.
    fn kube() -> kube::Client {
        kube::Client::try_from(kube::Config::new("http://127.0.0.1:1".parse().unwrap())).unwrap()
    }

    fn answer(schema: &str) -> Answer {
        let body = serde_json::json!({ "subject": "orders-value", "id": 7, "version": 3, "schema": schema });
        Answer::json(200, &body.to_string())
    }

    #[tokio::test]
    async fn columns_come_from_the_subjects_schema() {
        let server = serve(|_| {
            answer(
                r#"{"type":"record","name":"O","fields":[{"name":"id","type":"long"},{"name":"v","type":"string"}]}"#,
            )
        })
        .await;
        let (spec, resolved) = resolve(&kube(), "prod", &job(&server.url, "")).await.unwrap();
        let names: Vec<&str> = spec.sources[0].schema.columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["id", "v"]);
        assert_eq!((resolved[0].version, resolved[0].id), (3, 7));
        assert_eq!(server.requests(), ["/subjects/orders-value/versions/latest"]);
    }

    /// A URL with a query, a fragment or a user, and a password over
    /// `http://`, are refused before a Secret is read or a request made:
    /// the registry never hears of them.
    #[tokio::test]
    async fn a_url_that_could_be_turned_against_the_operator_is_refused_before_any_request() {
        let server = serve(|_| Answer::json(200, "{}")).await;
        let password = ", authentication: { username: u, passwordSecret: { secretName: s, key: p } }";
        for (url, auth, says) in [
            (format!("{}/admin?q=", server.url), "", "takes no query"),
            (format!("{}/#x", server.url), "", "takes no query"),
            (server.url.replace("http://", "http://admin:pw@"), "", "a user in the URL"),
            (server.url.clone(), password, "authentication needs an https:// URL"),
        ] {
            let Err(Blocked::Invalid(e)) = resolve(&kube(), "prod", &job(&url, auth)).await else {
                panic!("{url} was not refused")
            };
            assert_eq!(e.reason, reasons::INVALID_SPEC);
            assert!(e.message.starts_with("spec.schemaRegistry.url: ") && e.message.contains(says), "{}", e.message);
        }
        assert!(server.requests().is_empty(), "{:?}", server.requests());
    }

    /// The issue's schema: 24 records each holding two fields of the one
    /// before, 3 KB that derived 2^24 columns and took the operator (and
    /// every tenant's jobs) down. Now the job is refused, quickly, with the
    /// limit and the subject.
    #[tokio::test]
    async fn a_schema_that_would_exhaust_the_operator_is_refused_quickly() {
        let mut fields = r#"{"name":"a","type":"long"},{"name":"b","type":"long"}"#.to_owned();
        let mut schema = String::new();
        for i in 0..24 {
            let record = format!(r#"{{"type":"record","name":"R{i}","fields":[{fields}]}}"#);
            fields = format!(r#"{{"name":"x","type":{record}}},{{"name":"y","type":"R{i}"}}"#);
            schema = format!(r#"{{"type":"record","name":"Top","fields":[{fields}]}}"#);
        }
        let server = serve(move |_| answer(&schema)).await;
        let started = Instant::now();
        let Err(Blocked::Invalid(e)) = resolve(&kube(), "prod", &job(&server.url, "")).await else { panic!() };
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
        assert!(e.message.contains("subject orders-value version 3") && e.message.contains("10000 columns"), "{e:?}");
    }

    /// Work handed off the runtime leaves it free, and is given up at the
    /// deadline: a reconcile of another job goes on meanwhile.
    #[tokio::test(flavor = "current_thread")]
    async fn derivation_runs_off_the_runtime_and_is_given_up_at_its_deadline() {
        let started = Instant::now();
        let ticks = tokio::spawn(async {
            let mut n = 0;
            for _ in 0..5 {
                tokio::time::sleep(Duration::from_millis(10)).await;
                n += 1;
            }
            n
        });
        let slow = off_runtime(Duration::from_millis(200), || std::thread::sleep(Duration::from_secs(3))).await;
        assert!(slow.is_none(), "given up");
        assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
        assert_eq!(ticks.await.unwrap(), 5, "the runtime kept running while the work ran");
        assert_eq!(off_runtime(Duration::from_secs(5), || 42).await.map(Result::ok), Some(Some(42)));
    }
}

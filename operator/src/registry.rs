//! Columns from the Schema Registry (`schema.registry`): the operator
//! reads each subject's schema when it reconciles the job, derives the
//! columns (`StreamJobSpec::with_registry_columns`, the function
//! `sluice-worker validate` and the workers use too), validates and plans
//! the job with them, and writes them into the workers' config — so every
//! pod of a generation reads the same columns. `latest` is read at every
//! reconcile: a new version registered while the job runs is picked up as
//! a change of the job (docs/sql.md, "Columns from the registry").

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::Api;

use sluice_crds::{ResolvedSchema, StreamJobSpec, SubjectSchema, reasons, requested_version};

use crate::validate::{Blocked, Invalid};

const TIMEOUT: Duration = Duration::from_secs(10);

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
    let mut builder = reqwest::Client::builder().timeout(TIMEOUT);
    for pem in &access.trusted_certificates {
        let certificate = reqwest::Certificate::from_pem(pem.as_bytes())
            .map_err(|e| invalid(format!("spec.schemaRegistry.tls: a trusted certificate is not PEM ({e})")))?;
        builder = builder.add_root_certificate(certificate);
    }
    let client = builder.build().map_err(|e| unavailable(&url, &e.to_string()))?;
    let user = access.basic_auth.as_ref();
    let mut found: HashMap<(String, Option<u32>), Result<SubjectSchema, String>> = HashMap::new();
    for (subject, version) in wanted {
        let answer = fetch(&client, user, &url, &subject, version).await?;
        found.insert((subject, version), answer);
    }
    spec.with_registry_columns(|subject, version| {
        found.get(&(subject.to_owned(), version)).cloned().unwrap_or_else(|| Err("not read".into()))
    })
    .map_err(|message| Blocked::Invalid(Invalid { reason: reasons::INVALID_SPEC, message }))
}

fn unavailable(url: &str, why: &str) -> Blocked {
    Blocked::Unavailable(Invalid {
        reason: reasons::REGISTRY_UNREACHABLE,
        message: format!("the schema registry at {url} did not answer: {why}"),
    })
}

/// `GET <url>/subjects/<subject>/versions/<version|latest>`: the schema,
/// `Ok(Err)` when the registry has no such subject or version.
async fn fetch(
    client: &reqwest::Client,
    user: Option<&(String, String)>,
    url: &str,
    subject: &str,
    version: Option<u32>,
) -> Result<Result<SubjectSchema, String>, Blocked> {
    let v = version.map_or_else(|| "latest".to_owned(), |v| v.to_string());
    let segment: String = subject
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    let mut request = client
        .get(format!("{url}/subjects/{segment}/versions/{v}"))
        .header("Accept", "application/vnd.schemaregistry.v1+json, application/json");
    if let Some((user, password)) = user {
        request = request.basic_auth(user, Some(password));
    }
    let response = request.send().await.map_err(|e| unavailable(url, &sluice_crds::error_with_causes(&e)))?;
    let status = response.status();
    if matches!(status.as_u16(), 401 | 403) {
        return Err(unavailable(
            url,
            &format!("HTTP {status}: the registry refused the credentials (spec.schemaRegistry.authentication)"),
        ));
    }
    let body = response.text().await.map_err(|e| unavailable(url, &e.to_string()))?;
    if status.as_u16() == 404 {
        return Ok(Err(format!("the schema registry at {url} has no version {v} of it")));
    }
    if !status.is_success() {
        return Err(unavailable(url, &format!("HTTP {status}: {}", body.chars().take(200).collect::<String>())));
    }
    let json: serde_json::Value =
        serde_json::from_str(&body).map_err(|e| unavailable(url, &format!("an answer that is not JSON: {e}")))?;
    let number = |k: &str| json.get(k).and_then(serde_json::Value::as_u64).and_then(|n| u32::try_from(n).ok());
    let text = json.get("schema").and_then(serde_json::Value::as_str);
    let (Some(id), Some(version), Some(text)) = (number("id"), number("version"), text) else {
        return Err(unavailable(url, &format!("an answer without id, version and schema: {body:.200}")));
    };
    let kind = json.get("schemaType").and_then(serde_json::Value::as_str).unwrap_or("AVRO").to_owned();
    Ok(Ok(SubjectSchema { id, version, kind, text: text.to_owned() }))
}

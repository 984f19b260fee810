//! A Schema Registry client: writer schemas by id, over Confluent's REST
//! API (`GET <url>/schemas/ids/<id>`), which Confluent Schema Registry,
//! Apicurio Registry (`/apis/ccompat/v7`) and Karapace serve.
//!
//! A schema id names one schema for good, so each is fetched once per
//! worker and kept: the cores of a worker share one cache (a lock taken
//! only on a core's first sight of an id; a core's decoder keeps its own
//! compiled copy). "No such schema" is the record's fault — a dead letter
//! naming the id — but only when the registry says so in its own words
//! (a 404 whose JSON body carries `error_code` 40401–40403): a 404 page
//! from an ingress or a proxy is an outage. That answer is kept worker-wide
//! for [`UNKNOWN_TTL`], not for ever: a registry node that lagged behind
//! its leader knows the id a moment later. A registry that does not
//! answer is the infrastructure's: a few quick retries, then
//! [`Error::Registry`], which restarts the core with backoff like a broker
//! that is down, so no record is lost to an outage.
//!
//! What a registry answers is not trusted either: bodies are read up to
//! [`MAX_BODY`], redirects are not followed, and no body is quoted in an
//! error (they reach logs and the job's status).

use std::collections::HashMap;
use std::io::Read;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use sluice_crds::{
    ReferenceWalk, ResolvedSchema, SchemaReference, SchemaRegistrySpec, StreamJobSpec, SubjectSchema, schema_references,
};

use crate::Error;

/// Tries per fetch before the core is failed, and the pause after each.
const RETRIES: [Duration; 3] = [Duration::from_millis(100), Duration::from_millis(500), Duration::from_secs(2)];
/// One request's limit.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest answer read: a schema is kilobytes; a registry (or what
/// answers in its place) sending more is refused, not buffered.
pub const MAX_BODY: u64 = sluice_crds::REGISTRY_MAX_ANSWER_BYTES as u64;
/// How long "the registry has no schema with this id" is believed, worker
/// wide, before the id is asked for again.
pub const UNKNOWN_TTL: Duration = Duration::from_secs(60);
/// Ids a worker looks up per second at most, beyond a burst of as many:
/// the ids come from records, and a flood of ids nobody registered must
/// not become a flood of requests (20,000 of them once made 7,102 GETs in
/// 300 s). A core meeting more waits: back-pressure, nothing dropped.
pub const LOOKUPS_PER_SECOND: f64 = 50.0;
/// The most ids kept as unknown at once (each a line of text): past it
/// the oldest answers are dropped, and asked for again.
const MAX_UNKNOWN: usize = 10_000;

#[derive(Debug)]
pub struct Registry {
    url: String,
    /// Basic-auth credentials and trusted CA certificates (parsed).
    user: Option<(String, String)>,
    certificates: Vec<reqwest::Certificate>,
    /// Made on first use, on a core's thread: the blocking client runs a
    /// runtime of its own, which must not be dropped inside an async one.
    client: OnceLock<reqwest::blocking::Client>,
    schemas: Mutex<HashMap<u32, Arc<Schema>>>,
    /// Ids the registry said it does not have: when, and its words.
    unknown: Mutex<HashMap<u32, (Instant, String)>>,
    /// Lookups of ids still allowed now, and when that was counted.
    lookups: Mutex<(f64, Instant)>,
    /// `(subject, schema)` → the id it was registered as.
    registered: Mutex<HashMap<(String, String), u32>>,
}

/// A schema the registry holds: its type (`AVRO` when the answer names
/// none, as Confluent's API leaves it out for Avro), its text, and the
/// schemas it references (`(name, text)`, each after those it references
/// in turn): Avro's shared named types, Protobuf's imported files.
#[derive(Debug, PartialEq, Eq)]
pub struct Schema {
    pub kind: String,
    pub text: String,
    pub references: Vec<(String, String)>,
}

/// The type of a schema the worker registers (the results' writer
/// schemas).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaKind {
    Avro,
    Protobuf,
}

impl SchemaKind {
    /// The format as a manifest names it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Avro => "avro",
            Self::Protobuf => "protobuf",
        }
    }
}

/// What the registry said of an id.
pub type Lookup = Result<Arc<Schema>, String>;

/// A lookup as the decoders take it: the schema's type and text, or why
/// there is none.
pub fn as_given(lookup: &Lookup) -> Result<(&str, &str), String> {
    lookup.as_deref().map(|s| (s.kind.as_str(), s.text.as_str())).map_err(Clone::clone)
}

/// The referenced schemas of a lookup (none for an unknown id).
pub fn references_of(lookup: &Lookup) -> &[(String, String)] {
    lookup.as_deref().map_or(&[], |s| s.references.as_slice())
}

impl Registry {
    /// A client of the registry at `url` that needs no credentials.
    pub fn new(url: &str) -> Arc<Self> {
        Arc::new(Self::open(url, None, Vec::new()))
    }

    fn open(url: &str, user: Option<(String, String)>, certificates: Vec<reqwest::Certificate>) -> Self {
        Self {
            url: url.trim_end_matches('/').to_owned(),
            user,
            certificates,
            client: OnceLock::new(),
            schemas: Mutex::new(HashMap::new()),
            unknown: Mutex::new(HashMap::new()),
            lookups: Mutex::new((LOOKUPS_PER_SECOND, Instant::now())),
            registered: Mutex::new(HashMap::new()),
        }
    }

    /// A client of `spec`'s registry, its password and CA certificates read
    /// from the Secrets the operator mounts under `secrets_dir/<secret>/<key>`.
    /// A key that cannot be read, or a certificate that is not PEM, is the
    /// job's fault ([`Error::Config`]), named without its value.
    pub fn connect(spec: &SchemaRegistrySpec, secrets_dir: &str) -> Result<Arc<Self>, Error> {
        if let Some(problem) = spec.access_problem() {
            return Err(Error::Config(problem));
        }
        let access = spec.access(|secret, key| {
            let path = std::path::Path::new(secrets_dir).join(secret).join(key);
            std::fs::read_to_string(&path).map_err(|e| {
                Error::Config(format!(
                    "spec.schemaRegistry: cannot read key `{key}` of Secret `{secret}` from {} ({e}); the \
                     operator mounts each Secret the registry connection names there: does the Secret have \
                     that key?",
                    path.display()
                ))
            })
        })?;
        let mut certificates = Vec::new();
        for (pem, c) in access.trusted_certificates.iter().zip(spec.tls.iter().flat_map(|t| &t.trusted_certificates)) {
            certificates.push(reqwest::Certificate::from_pem(pem.as_bytes()).map_err(|e| {
                Error::Config(format!(
                    "spec.schemaRegistry.tls: key `{}` of Secret `{}` is not a PEM certificate ({e})",
                    c.certificate, c.secret_name
                ))
            })?);
        }
        Ok(Arc::new(Self::open(&spec.url, access.basic_auth, certificates)))
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// The schema registered under `id` (its text), `Ok(Err(why))` when
    /// the registry has none, `Err` when it could not be asked.
    pub fn schema(&self, id: u32) -> Result<Lookup, Error> {
        if let Some(s) = self.schemas.lock().ok().and_then(|m| m.get(&id).cloned()) {
            return Ok(Ok(s));
        }
        if let Some(why) = self
            .unknown
            .lock()
            .ok()
            .and_then(|m| m.get(&id).filter(|(at, _)| at.elapsed() < UNKNOWN_TTL).map(|(_, why)| why.clone()))
        {
            return Ok(Err(why));
        }
        self.pace_lookup();
        let schema = self.retrying(&format!("fetching schema id {id}"), || self.fetch(id))?;
        let schema = match schema {
            Ok((mut schema, references)) => {
                // A reference the registry does not have leaves a schema
                // no record of can be read: the job's to fix, said once
                // (not one dead letter per record).
                schema.references = self.resolve_references(&format!("schema id {id}"), references)?;
                Ok(schema)
            }
            Err(why) => Err(why),
        };
        match schema {
            Ok(schema) => {
                let schema = Arc::new(schema);
                if let Ok(mut m) = self.schemas.lock() {
                    m.insert(id, Arc::clone(&schema));
                }
                if let Ok(mut m) = self.unknown.lock() {
                    m.remove(&id);
                }
                Ok(Ok(schema))
            }
            Err(why) => {
                if let Ok(mut m) = self.unknown.lock() {
                    if m.len() >= MAX_UNKNOWN {
                        m.retain(|_, (at, _)| at.elapsed() < UNKNOWN_TTL);
                    }
                    if m.len() >= MAX_UNKNOWN
                        && let Some(oldest) = m.iter().min_by_key(|(_, (at, _))| *at).map(|(id, _)| *id)
                    {
                        m.remove(&oldest);
                    }
                    m.insert(id, (Instant::now(), why.clone()));
                }
                Ok(Err(why))
            }
        }
    }

    /// Waits, if need be, until one more id may be looked up
    /// ([`LOOKUPS_PER_SECOND`], a token bucket shared by the worker's cores).
    fn pace_lookup(&self) {
        let wait = {
            let Ok(mut bucket) = self.lookups.lock() else { return };
            let (tokens, at) = &mut *bucket;
            *tokens = (*tokens + at.elapsed().as_secs_f64() * LOOKUPS_PER_SECOND).min(LOOKUPS_PER_SECOND);
            *at = Instant::now();
            *tokens -= 1.0;
            (*tokens < 0.0).then(|| Duration::from_secs_f64(-*tokens / LOOKUPS_PER_SECOND))
        };
        if let Some(wait) = wait {
            std::thread::sleep(wait);
        }
    }

    /// Runs `attempt` until it answers (`Ok`), pausing after each failure
    /// it says is worth another try (`Err`, why), [`RETRIES`] times; then
    /// [`Error::Registry`] with the last reason.
    fn retrying<T>(&self, what: &str, mut attempt: impl FnMut() -> Result<T, String>) -> Result<T, Error> {
        let mut last = String::new();
        for pause in RETRIES {
            match attempt() {
                Ok(answer) => return Ok(answer),
                Err(why) => last = why,
            }
            std::thread::sleep(pause);
        }
        Err(Error::Registry { url: self.url.clone(), message: format!("{what}: {last}") })
    }

    /// Registers `schema` (of `kind`) under `subject` (or finds it there)
    /// and returns its id. A registry that refuses it — incompatible with
    /// the subject's earlier versions, or invalid — is the job's fault
    /// ([`Error::Config`], naming the subject and the registry's reason);
    /// one that does not answer, transient.
    pub fn register(&self, subject: &str, schema: &str, kind: SchemaKind) -> Result<u32, Error> {
        // One registration per worker: its cores wait for the first.
        let mut registered = self.registered.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let key = (subject.to_owned(), schema.to_owned());
        if let Some(id) = registered.get(&key) {
            return Ok(*id);
        }
        let id = self.register_once(subject, schema, kind)?;
        registered.insert(key, id);
        Ok(id)
    }

    fn register_once(&self, subject: &str, schema: &str, kind: SchemaKind) -> Result<u32, Error> {
        // `schemaType` left out is AVRO, as the Confluent API defines it.
        let body = match kind {
            SchemaKind::Avro => serde_json::json!({ "schema": schema }),
            SchemaKind::Protobuf => serde_json::json!({ "schemaType": "PROTOBUF", "schema": schema }),
        }
        .to_string();
        self.retrying(&format!("registering under {subject}"), || {
            let (status, text) =
                self.post(&format!("subjects/{}/versions", sluice_crds::subject_path_segment(subject)), &body)?;
            if status.is_success() {
                return Ok(answer_id(&text).ok_or_else(|| Error::Registry {
                    url: self.url.clone(),
                    message: format!("registering under {subject}: a {}-byte answer without an id", text.len()),
                }));
            }
            // Another worker registering the same schema at the same
            // moment (Apicurio answers the loser 409): it is there.
            if status.as_u16() == 409
                && let Some(id) = self.lookup(subject, &body)
            {
                return Ok(Ok(id));
            }
            if status.is_client_error() {
                // The registry's own reason (its JSON `message`), not
                // whatever body answered.
                return Ok(Err(Error::Config(format!(
                    "the schema registry at {} refused the results' {} schema for subject {subject} (HTTP \
                     {status}: {}); its compatibility rules decide which changes a subject takes: change the \
                     query's output, or the subject's compatibility",
                    self.url,
                    kind.name(),
                    registry_message(&text).unwrap_or_else(|| format!("a {}-byte answer", text.len()))
                ))));
            }
            Err(format!("HTTP {status} ({} bytes)", text.len()))
        })?
    }

    /// The schema `subject` holds at `version` (`None`: the latest), for
    /// columns derived from it (`GET /subjects/<subject>/versions/<v>`);
    /// `Ok(Err)` when the registry has no such subject or version.
    pub fn subject_schema(&self, subject: &str, version: Option<u32>) -> Result<Result<SubjectSchema, String>, Error> {
        let v = version.map_or_else(|| "latest".to_owned(), |v| v.to_string());
        let found = self.retrying(&format!("reading subject {subject} version {v}"), || {
            let Some(body) =
                self.get(&format!("subjects/{}/versions/{v}", sluice_crds::subject_path_segment(subject)))?
            else {
                return Ok(Err(format!("the schema registry at {} has no version {v} of it", self.url)));
            };
            let schema = parse_schema(&body)?;
            let json: serde_json::Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
            let number = |k: &str| json.get(k).and_then(serde_json::Value::as_u64).and_then(|n| u32::try_from(n).ok());
            let (Some(id), Some(version)) = (number("id"), number("version")) else {
                return Err(format!("a {}-byte answer without id and version", body.len()));
            };
            Ok(Ok((id, version, schema, references(&body))))
        })?;
        let (id, version, schema, declared) = match found {
            Ok(found) => found,
            Err(why) => return Ok(Err(why)),
        };
        let references = self.resolve_references(&format!("subject {subject} version {version}"), declared)?;
        Ok(Ok(SubjectSchema { id, version, kind: schema.kind, text: schema.text, references }))
    }

    /// POSTs `body` to `<url>/<path>`: the answer's status and text, or why
    /// none came.
    fn post(&self, path: &str, body: &str) -> Result<(reqwest::StatusCode, String), String> {
        let request = self
            .client()?
            .post(format!("{}/{path}", self.url))
            .header("Content-Type", "application/vnd.schemaregistry.v1+json")
            .body(body.to_owned());
        let response = self.authenticated(request).send().map_err(|e| sluice_crds::error_with_causes(&e))?;
        let status = response.status();
        refused(status)?;
        Ok((status, read_body(response)?))
    }

    /// The id of `schema` (a request body) if `subject` already holds it
    /// (`POST /subjects/<subject>`, Confluent's "is this schema registered").
    fn lookup(&self, subject: &str, body: &str) -> Option<u32> {
        let (status, text) =
            self.post(&format!("subjects/{}", sluice_crds::subject_path_segment(subject)), body).ok()?;
        status.is_success().then(|| answer_id(&text)).flatten()
    }

    fn client(&self) -> Result<&reqwest::blocking::Client, String> {
        if let Some(c) = self.client.get() {
            return Ok(c);
        }
        // A redirect is not followed: it could take the job's credentials,
        // or the worker's reach, somewhere the job did not name.
        let mut builder =
            reqwest::blocking::Client::builder().timeout(REQUEST_TIMEOUT).redirect(reqwest::redirect::Policy::none());
        // The job's CA certificates replace the built-in roots: a registry
        // the job pinned is not also trusted through any public CA.
        if !self.certificates.is_empty() {
            builder = builder.tls_certs_only(self.certificates.iter().cloned());
        }
        let c = builder.build().map_err(|e| format!("cannot make an HTTP client: {e}"))?;
        Ok(self.client.get_or_init(|| c))
    }

    /// A request with the job's credentials, if it has any.
    fn authenticated(&self, request: reqwest::blocking::RequestBuilder) -> reqwest::blocking::RequestBuilder {
        match &self.user {
            Some((user, password)) => request.basic_auth(user, Some(password)),
            None => request,
        }
    }

    /// The schemas `top` (the references of `what`) name, in turn,
    /// fetched by subject and version, each after those it references
    /// ([`ReferenceWalk`]: bounded, no cycles). One the registry does not
    /// have, or past a bound, is [`Error::Config`], naming it: no record
    /// written with the schema can be read.
    fn resolve_references(&self, what: &str, top: Vec<SchemaReference>) -> Result<Vec<(String, String)>, Error> {
        let mut walk = ReferenceWalk::new(top);
        while let Some(next) = walk.next_fetch().map_err(|why| Error::Config(format!("{what}: {why}")))? {
            let (text, nested) = self.reference(&next, &format!("{what}: {}", next.describe()))?;
            walk.fetched(text, nested);
        }
        Ok(walk.resolved())
    }

    /// A referenced schema's text and its own references.
    fn reference(&self, reference: &SchemaReference, at: &str) -> Result<(String, Vec<SchemaReference>), Error> {
        let path = format!(
            "subjects/{}/versions/{}",
            sluice_crds::subject_path_segment(&reference.subject),
            reference.version
        );
        let answer = self.retrying(at, || match self.get(&path)? {
            Some(body) => {
                let schema = parse_schema(&body)?;
                Ok(Some((schema.text, references(&body))))
            }
            None => Ok(None),
        })?;
        answer.ok_or_else(|| {
            Error::Config(format!(
                "{at}: the schema registry at {} has no such subject version, so no record written with the schema \
                 can be read (register the referenced schema, or write with one that does not reference it)",
                self.url
            ))
        })
    }

    /// One request: the schema, `Ok(Err)` for an id the registry does not
    /// have, `Err` for anything else.
    fn fetch(&self, id: u32) -> Result<Result<(Schema, Vec<SchemaReference>), String>, String> {
        match self.get(&format!("schemas/ids/{id}"))? {
            Some(body) => Ok(Ok((parse_schema(&body)?, references(&body)))),
            None => Ok(Err(format!("schema id {id} is not in the schema registry at {}", self.url))),
        }
    }

    /// GETs `<url>/<path>`: the answer's text, `None` when the registry
    /// says it has no such thing, `Err` for no answer, another status, or
    /// a 404 that is not the registry's (a proxy's page: an outage).
    fn get(&self, path: &str) -> Result<Option<String>, String> {
        let request = self
            .client()?
            .get(format!("{}/{path}", self.url))
            .header("Accept", "application/vnd.schemaregistry.v1+json, application/json");
        let response = self.authenticated(request).send().map_err(|e| sluice_crds::error_with_causes(&e))?;
        let status = response.status();
        refused(status)?;
        if status.is_redirection() {
            return Err(format!("HTTP {status}: a redirect, which is not followed (name the registry's own URL)"));
        }
        let body = read_body(response)?;
        if status.as_u16() == 404 {
            return match sluice_crds::registry_not_found_code(body.as_bytes()) {
                Some(_) => Ok(None),
                _ => Err(format!(
                    "HTTP 404 without a registry error code ({} bytes; a proxy or an ingress answering?)",
                    body.len()
                )),
            };
        }
        if !status.is_success() {
            return Err(format!("HTTP {status} ({} bytes)", body.len()));
        }
        Ok(Some(body))
    }
}

/// A registry that refuses the credentials says so, not "no such
/// schema": the records are fine, the job's access is not (retried with
/// backoff as an outage is, since a Secret may be fixed while it waits).
fn refused(status: reqwest::StatusCode) -> Result<(), String> {
    match status.as_u16() {
        401 => Err("HTTP 401: the registry refused the credentials (spec.schemaRegistry.authentication)".into()),
        403 => {
            Err("HTTP 403: the registry denied the request to these credentials (spec.schemaRegistry.authentication)"
                .into())
        }
        _ => Ok(()),
    }
}

/// `spec` with the columns of every source that names a registry subject
/// derived from the subject's schema (see
/// [`StreamJobSpec::with_registry_columns`]), and which schema each came
/// from. A registry that does not answer is [`Error::Registry`]; a
/// subject it does not have, or a schema no column list holds,
/// [`Error::Config`].
pub fn resolve_columns(spec: &StreamJobSpec, secrets_dir: &str) -> Result<(StreamJobSpec, Vec<ResolvedSchema>), Error> {
    let Some(registry_spec) = spec.schema_registry.as_ref() else {
        return Ok((spec.clone(), Vec::new()));
    };
    if spec.sources.iter().all(|s| s.schema.registry.is_none()) {
        return Ok((spec.clone(), Vec::new()));
    }
    let registry = Registry::connect(registry_spec, secrets_dir)?;
    let mut unreachable = None;
    let resolved = spec.with_registry_columns(
        |subject, version| match registry.subject_schema(subject, version) {
            Ok(answer) => answer,
            Err(e) => {
                let why = e.to_string();
                unreachable = Some(e);
                Err(why)
            }
        },
        sluice_formats::registry_columns::registry_columns,
    );
    match (resolved, unreachable) {
        (Ok(r), _) => Ok(r),
        (Err(_), Some(e)) => Err(e),
        (Err(why), None) => Err(Error::Config(why)),
    }
}

/// An answer's body as text, read up to [`MAX_BODY`]: a longer one is an
/// error, and no more of it is read.
fn read_body(response: reqwest::blocking::Response) -> Result<String, String> {
    let mut body = Vec::new();
    response
        .take(MAX_BODY + 1)
        .read_to_end(&mut body)
        .map_err(|e| format!("reading the answer: {}", sluice_crds::error_with_causes(&e)))?;
    if body.len() as u64 > MAX_BODY {
        return Err(format!("an answer over {} MiB, not read", MAX_BODY >> 20));
    }
    String::from_utf8(body).map_err(|_| "an answer that is not UTF-8".to_owned())
}

/// The `message` of a registry's JSON error body, cut short.
fn registry_message(body: &str) -> Option<String> {
    let json: serde_json::Value = serde_json::from_str(body).ok()?;
    Some(json.get("message")?.as_str()?.chars().take(300).collect())
}

/// The `id` of a registration's answer.
fn answer_id(text: &str) -> Option<u32> {
    let json: serde_json::Value = serde_json::from_str(text).ok()?;
    json.get("id").and_then(serde_json::Value::as_u64).and_then(|id| u32::try_from(id).ok())
}

/// The schema of a `/schemas/ids/<id>` answer: its `schemaType` (absent
/// for Avro) and its text. Whether the source can read that type is the
/// decoder's to say.
fn parse_schema(body: &str) -> Result<Schema, String> {
    let json: serde_json::Value =
        serde_json::from_str(body).map_err(|e| format!("a {}-byte answer that is not JSON ({e})", body.len()))?;
    let kind = json.get("schemaType").and_then(serde_json::Value::as_str).unwrap_or("AVRO").to_owned();
    let text = json
        .get("schema")
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| format!("a {}-byte answer without `schema`", body.len()))?;
    Ok(Schema { kind, text, references: Vec::new() })
}

/// The references a registry answer declares.
fn references(body: &str) -> Vec<SchemaReference> {
    serde_json::from_str::<serde_json::Value>(body).map(|json| schema_references(&json)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_as_confluents_api_gives_them() {
        let schema = |kind: &str, text: &str| Schema { kind: kind.into(), text: text.into(), references: Vec::new() };
        assert_eq!(parse_schema(r#"{"schema":"\"long\""}"#).unwrap(), schema("AVRO", "\"long\""));
        assert_eq!(parse_schema(r#"{"schema":"{}","schemaType":"AVRO"}"#).unwrap(), schema("AVRO", "{}"));
        assert_eq!(parse_schema(r#"{"schema":"x","schemaType":"PROTOBUF"}"#).unwrap(), schema("PROTOBUF", "x"));
        assert!(parse_schema("<html>").unwrap_err().contains("not JSON"));
        assert!(parse_schema("{}").unwrap_err().contains("without `schema`"));
    }

    /// A one-connection-per-answer HTTP server on loopback answering every
    /// request with `status` and `body`; the requests it saw.
    fn serve(status: &str, body: &'static str, answers: usize) -> (String, std::thread::JoinHandle<Vec<String>>) {
        serve_in_turn(vec![(status.to_owned(), body); answers])
    }

    /// Answers the requests in turn, one connection each.
    fn serve_in_turn(answers: Vec<(String, &'static str)>) -> (String, std::thread::JoinHandle<Vec<String>>) {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = std::thread::spawn(move || {
            let mut seen = Vec::new();
            for (status, body) in answers {
                let (mut conn, _) = listener.accept().unwrap();
                // The whole request: its head, then Content-Length bytes.
                let (mut request, mut chunk) = (Vec::new(), [0; 4096]);
                loop {
                    let text = String::from_utf8_lossy(&request).into_owned();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let length = text[..end]
                            .lines()
                            .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(str::to_owned))
                            .map_or(0, |n| n.trim().parse::<usize>().unwrap());
                        if request.len() >= end + 4 + length {
                            break;
                        }
                    }
                    let n = conn.read(&mut chunk).unwrap();
                    assert!(n > 0, "the client closed mid-request");
                    request.extend_from_slice(&chunk[..n]);
                }
                seen.push(String::from_utf8_lossy(&request).into_owned());
                let answer = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                conn.write_all(answer.as_bytes()).unwrap();
            }
            seen
        });
        (url, seen)
    }

    #[test]
    fn an_id_the_registry_does_not_have_is_the_records_fault_and_a_schema_is_fetched_once() {
        let (url, seen) = serve("404 Not Found", r#"{"error_code":40403,"message":"Schema not found"}"#, 1);
        let missing = Registry::new(&url).schema(9).unwrap().unwrap_err();
        assert!(missing.contains("schema id 9 is not in the schema registry"), "{missing}");
        assert!(seen.join().unwrap()[0].starts_with("GET /schemas/ids/9 "));
        let (url, seen) = serve("200 OK", r#"{"schema":"\"long\""}"#, 1);
        let registry = Registry::new(&url);
        for _ in 0..3 {
            assert_eq!(registry.schema(4).unwrap().unwrap().text, "\"long\"");
        }
        assert_eq!(seen.join().unwrap().len(), 1, "cached after the first fetch");
    }

    /// Only the registry's own "not found" (a JSON `error_code` 40403) is
    /// an unknown id; an HTML 404 (an ingress, a lagging node's proxy) is
    /// an outage, retried and never a dead letter. The registry's answer
    /// is kept worker-wide: a second core asking within the TTL makes no
    /// request.
    #[test]
    fn a_404_that_is_not_the_registrys_is_an_outage_and_unknown_ids_are_remembered_worker_wide() {
        let html = "<html><body>404 Not Found</body></html>";
        let (url, seen) = serve("404 Not Found", html, RETRIES.len());
        let e = Registry::new(&url).schema(5).unwrap_err();
        assert!(
            matches!(&e, Error::Registry { message, .. } if message.contains("without a registry error code")),
            "{e}"
        );
        assert!(!e.to_string().contains("<html>"), "no body in the reason: {e}");
        assert_eq!(seen.join().unwrap().len(), RETRIES.len(), "retried as an outage");

        let (url, seen) = serve("404 Not Found", r#"{"error_code":40403,"message":"Schema not found"}"#, 1);
        let registry = Registry::new(&url);
        for _ in 0..3 {
            assert!(registry.schema(6).unwrap().unwrap_err().contains("schema id 6 is not in the schema registry"));
        }
        assert_eq!(seen.join().unwrap().len(), 1, "one request for every core's asking, within the TTL");
    }

    /// A schema's references are fetched by subject and version, each
    /// after those it references in turn (a shared type that itself uses
    /// another); one the registry does not have stops the job with a
    /// reason naming it, rather than dead-lettering every record.
    #[test]
    fn references_are_fetched_in_dependency_order_and_a_missing_one_is_the_jobs_error() {
        let order = r#"{"schema":"{}","references":[{"name":"shop.Money","subject":"money","version":2}]}"#;
        let money = r#"{"subject":"money","version":2,"id":8,"schema":"M","references":[{"name":"shop.Currency","subject":"currency","version":1}]}"#;
        let currency = r#"{"subject":"currency","version":1,"id":9,"schema":"C"}"#;
        let (url, seen) =
            serve_in_turn(vec![("200 OK".into(), order), ("200 OK".into(), money), ("200 OK".into(), currency)]);
        let schema = Registry::new(&url).schema(7).unwrap().unwrap();
        assert_eq!(
            schema.references,
            [("shop.Currency".to_owned(), "C".to_owned()), ("shop.Money".to_owned(), "M".to_owned())],
            "dependencies first"
        );
        let requests = seen.join().unwrap();
        assert_eq!(requests.len(), 3, "each reference fetched once");
        assert!(requests[1].starts_with("GET /subjects/money/versions/2 "), "{}", requests[1]);
        assert!(requests[2].starts_with("GET /subjects/currency/versions/1 "), "{}", requests[2]);

        let (url, _) = serve_in_turn(vec![
            ("200 OK".into(), order),
            ("404 Not Found".into(), r#"{"error_code":40402,"message":"Version 2 not found."}"#),
        ]);
        let e = Registry::new(&url).schema(7).unwrap_err();
        assert!(
            matches!(&e, Error::Config(m) if m.contains("reference `shop.Money` (subject money version 2)")),
            "{e}"
        );
    }

    /// Lookups of ids are paced worker-wide: past a burst of
    /// `LOOKUPS_PER_SECOND`, each more waits its turn.
    #[test]
    fn lookups_of_new_ids_are_paced() {
        let n = LOOKUPS_PER_SECOND as usize + 10;
        let (url, seen) = serve("404 Not Found", r#"{"error_code":40403,"message":"Schema not found"}"#, n);
        let registry = Registry::new(&url);
        let started = Instant::now();
        for id in 0..n {
            assert!(registry.schema(u32::try_from(id).unwrap()).unwrap().is_err());
        }
        assert!(started.elapsed() >= Duration::from_millis(150), "{:?}", started.elapsed());
        assert_eq!(seen.join().unwrap().len(), n);
    }

    /// What answers in the registry's place is not trusted: a redirect is
    /// not followed (it could take the credentials elsewhere), an answer
    /// past `MAX_BODY` is not read into memory, and no body — a secret an
    /// internal service answered — is quoted in the error.
    #[test]
    fn redirects_huge_answers_and_bodies_never_reach_the_error() {
        let (url, seen) = serve_raw(
            "HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:9/elsewhere\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                .to_owned(),
            RETRIES.len(),
        );
        let e = Registry::new(&url).schema(1).unwrap_err().to_string();
        assert!(e.contains("redirect") && e.contains("not followed"), "{e}");
        assert!(seen.join().unwrap().iter().all(|r| r.starts_with("GET /schemas/ids/1 ")), "nothing else asked");

        // 8 MiB advertised and sent: refused at 4 MiB.
        let big = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{{\"schema\":\"{}\"}}",
            (8 << 20) + 13,
            "x".repeat(8 << 20)
        );
        let (url, _seen) = serve_raw(big, RETRIES.len());
        let e = Registry::new(&url).schema(2).unwrap_err().to_string();
        assert!(e.contains("over 4 MiB"), "{e:.300}");

        let (url, _seen) = serve("500 Internal Server Error", "INTERNAL-SECRET-TOKEN=abc123", RETRIES.len());
        let e = Registry::new(&url).schema(3).unwrap_err().to_string();
        assert!(e.contains("HTTP 500") && !e.contains("SECRET"), "{e}");
    }

    /// Answers each of `answers` requests with the raw bytes `answer`.
    fn serve_raw(answer: String, answers: usize) -> (String, std::thread::JoinHandle<Vec<String>>) {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = std::thread::spawn(move || {
            let mut seen = Vec::new();
            for _ in 0..answers {
                let (mut conn, _) = listener.accept().unwrap();
                let (mut request, mut chunk) = (Vec::new(), [0; 4096]);
                while !String::from_utf8_lossy(&request).contains("\r\n\r\n") {
                    let n = conn.read(&mut chunk).unwrap();
                    if n == 0 {
                        break;
                    }
                    request.extend_from_slice(&chunk[..n]);
                }
                seen.push(String::from_utf8_lossy(&request).into_owned());
                // The client may hang up early (past the cap): not an error here.
                let _ = conn.write_all(answer.as_bytes());
            }
            seen
        });
        (url, seen)
    }

    /// A schema the subject's compatibility refuses is the job's fault,
    /// named with the registry's reason; one that registers gives its id.
    #[test]
    fn registering_returns_the_id_and_a_refusal_is_a_configuration_error() {
        let (url, seen) = serve("200 OK", r#"{"id":17}"#, 1);
        assert_eq!(Registry::new(&url).register("orders.v1-value", "\"long\"", SchemaKind::Avro).unwrap(), 17);
        let request = &seen.join().unwrap()[0];
        assert!(request.starts_with("POST /subjects/orders.v1-value/versions "), "{request}");
        assert!(request.ends_with(r#"{"schema":"\"long\""}"#), "{request}");
        let (url, _) = serve("409 Conflict", r#"{"error_code":409,"message":"incompatible: field n"}"#, 1);
        let e = Registry::new(&url).register("out-value", "\"long\"", SchemaKind::Avro).unwrap_err();
        assert!(
            matches!(&e, Error::Config(m) if m.contains("out-value") && m.contains("incompatible: field n")),
            "{e}"
        );
    }

    /// Two workers registering the same new schema at once: Apicurio
    /// answers one of them 409, and the schema is found under the subject.
    /// A worker's cores register once.
    #[test]
    fn a_registration_lost_to_another_worker_finds_the_schema_it_registered() {
        let (url, seen) = serve_in_turn(vec![
            ("409 Conflict".into(), r#"{"error_code":409,"message":"An artifact with ID 'x' already exists."}"#),
            ("200 OK".into(), r#"{"subject":"out-value","id":23,"version":1,"schema":"\"long\""}"#),
        ]);
        let registry = Registry::new(&url);
        for _ in 0..3 {
            assert_eq!(registry.register("out-value", "\"long\"", SchemaKind::Avro).unwrap(), 23);
        }
        let requests = seen.join().unwrap();
        assert!(requests[1].starts_with("POST /subjects/out-value "), "{}", requests[1]);
    }

    /// Nothing listens: after its retries, a transient error naming the
    /// registry, not a dead letter.
    #[test]
    fn a_registry_that_does_not_answer_is_an_error_not_a_missing_schema() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        drop(listener);
        let registry = Registry::new(&url);
        let e = registry.schema(1).unwrap_err();
        assert!(matches!(&e, Error::Registry { url: u, .. } if *u == url), "{e}");
    }
}

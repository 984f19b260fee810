//! A Schema Registry client: writer schemas by id, over Confluent's REST
//! API (`GET <url>/schemas/ids/<id>`), which Confluent Schema Registry,
//! Apicurio Registry (`/apis/ccompat/v7`) and Karapace serve.
//!
//! A schema id names one schema for good, so each is fetched once per
//! worker and kept: the cores of a worker share one cache (a lock taken
//! only on a core's first sight of an id; a core's decoder keeps its own
//! compiled copy). "No such schema" is the record's fault — a dead letter
//! naming the id — while a registry that does not answer is the
//! infrastructure's: a few quick retries, then [`Error::Registry`], which
//! restarts the core with backoff like a broker that is down, so no
//! record is lost to an outage.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::Error;

/// Tries per fetch before the core is failed, and the pause after each.
const RETRIES: [Duration; 3] = [Duration::from_millis(100), Duration::from_millis(500), Duration::from_secs(2)];
/// One request's limit.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug)]
pub struct Registry {
    url: String,
    /// Made on first use, on a core's thread: the blocking client runs a
    /// runtime of its own, which must not be dropped inside an async one.
    client: OnceLock<reqwest::blocking::Client>,
    schemas: Mutex<HashMap<u32, Arc<str>>>,
}

/// What the registry said of an id.
pub type Lookup = Result<Arc<str>, String>;

impl Registry {
    pub fn new(url: &str) -> Arc<Self> {
        Arc::new(Self {
            url: url.trim_end_matches('/').to_owned(),
            client: OnceLock::new(),
            schemas: Mutex::new(HashMap::new()),
        })
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
        let mut last = String::new();
        for pause in RETRIES {
            match self.fetch(id) {
                Ok(Ok(text)) => {
                    let text: Arc<str> = text.into();
                    if let Ok(mut m) = self.schemas.lock() {
                        m.insert(id, Arc::clone(&text));
                    }
                    return Ok(Ok(text));
                }
                Ok(Err(missing)) => return Ok(Err(missing)),
                Err(why) => last = why,
            }
            std::thread::sleep(pause);
        }
        Err(Error::Registry { url: self.url.clone(), message: format!("fetching schema id {id}: {last}") })
    }

    /// One request: the schema's text, `Ok(Err)` for an id the registry
    /// does not have, `Err` for anything else.
    fn fetch(&self, id: u32) -> Result<Result<String, String>, String> {
        let client = match self.client.get() {
            Some(c) => c,
            None => {
                let c = reqwest::blocking::Client::builder()
                    .timeout(REQUEST_TIMEOUT)
                    .build()
                    .map_err(|e| format!("cannot make an HTTP client: {e}"))?;
                self.client.get_or_init(|| c)
            }
        };
        let response = client
            .get(format!("{}/schemas/ids/{id}", self.url))
            .header("Accept", "application/vnd.schemaregistry.v1+json, application/json")
            .send()
            .map_err(|e| e.to_string())?;
        let status = response.status();
        let body = response.text().map_err(|e| e.to_string())?;
        if status.as_u16() == 404 {
            return Ok(Err(format!("schema id {id} is not in the schema registry at {}", self.url)));
        }
        if !status.is_success() {
            return Err(format!("HTTP {status}: {}", body.chars().take(200).collect::<String>()));
        }
        Ok(Ok(parse_schema(&body)?))
    }
}

/// The `schema` of a `/schemas/ids/<id>` answer; only Avro (a missing
/// `schemaType`) is read.
fn parse_schema(body: &str) -> Result<String, String> {
    let json: serde_json::Value =
        serde_json::from_str(body).map_err(|e| format!("an answer that is not JSON ({e}): {body:.200}"))?;
    match json.get("schemaType").and_then(serde_json::Value::as_str) {
        None | Some("AVRO") => {}
        Some(other) => return Err(format!("a {other} schema where Avro was expected")),
    }
    json.get("schema")
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| format!("an answer without `schema`: {body:.200}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_as_confluents_api_gives_them() {
        assert_eq!(parse_schema(r#"{"schema":"\"long\""}"#).unwrap(), "\"long\"");
        assert_eq!(parse_schema(r#"{"schema":"{}","schemaType":"AVRO"}"#).unwrap(), "{}");
        assert!(parse_schema(r#"{"schema":"x","schemaType":"PROTOBUF"}"#).unwrap_err().contains("PROTOBUF"));
        assert!(parse_schema("<html>").unwrap_err().contains("not JSON"));
        assert!(parse_schema("{}").unwrap_err().contains("without `schema`"));
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

//! The Schema Registry a job's formats use: where it is, how its subjects
//! are named, and how the workers and the operator reach one that asks who
//! they are or speaks TLS: HTTP basic authentication (Confluent Cloud's API
//! key and secret, Apicurio's or Karapace's basic auth, a registry behind
//! an ingress that checks it) and the CA certificates an `https://`
//! registry's certificate is checked against. Secret-backed like a Kafka
//! connection's ([`crate::KafkaConnection`]): the operator mounts each
//! referenced Secret into the workers, which read its keys as files; the
//! operator reads them through the API for its own lookups. Values are
//! never copied into the job's config, status, events, logs or metrics.

use std::collections::BTreeSet;

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::kafka_security::{is_secret_key, is_secret_name};
use crate::{KafkaTls, PasswordSecret};

/// The Schema Registry writer schemas are fetched from: Confluent's REST
/// API, which Confluent Schema Registry, Apicurio Registry (at
/// `/apis/ccompat/v7`) and Karapace serve.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = Rule::new("!has(self.authentication) || self.url.startsWith('https://')").message("authentication needs an https:// URL: over http:// the password would cross the network as it is (spec.schemaRegistry.authentication)").field_path(".url"))]
pub struct SchemaRegistrySpec {
    /// Base URL of the API, `http://host:port[/path]` or `https://…` (for
    /// Apicurio: `http://host:8080/apis/ccompat/v7`): no query, fragment or
    /// user; `https://` when `authentication` is set.
    #[schemars(length(min = 1, max = 2048), regex(pattern = r"^https?://[^\s]+$"))]
    #[x_kube(
        validation = Rule::new("!self.matches('[?#]')").message("a base URL takes no query (`?`) or fragment (`#`): the clients append the API's paths to it"),
        validation = Rule::new("!self.matches('^https?://[^/]*@')").message("a user in the URL (`user@host`) is not accepted: name the credentials in spec.schemaRegistry.authentication, from a Secret")
    )]
    pub url: String,
    /// The subject an Avro sink registers its writer schema under, as
    /// Confluent's serializers name it: `TopicName` (the default,
    /// `<topic>-value`), `RecordName` (the record's full name,
    /// `dev.sluice.<job>`: one schema for every topic that carries it) or
    /// `TopicRecordName` (`<topic>-dev.sluice.<job>`).
    #[serde(default, skip_serializing_if = "SubjectNameStrategy::is_default")]
    pub subject_name_strategy: SubjectNameStrategy,
    /// HTTP basic authentication: the user and the Secret key holding the
    /// password (Confluent Cloud: API key and secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authentication: Option<RegistryAuthentication>,
    /// For an `https://` URL: the CA certificates (PEM, in Secrets) the
    /// registry's certificate is checked against; the system's CA store
    /// when this is absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<RegistryTls>,
}

/// How a subject is named after the topic and the record (Confluent's
/// `value.subject.name.strategy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum SubjectNameStrategy {
    #[default]
    TopicName,
    RecordName,
    TopicRecordName,
}

impl SubjectNameStrategy {
    fn is_default(&self) -> bool {
        *self == Self::TopicName
    }

    /// The value subject for `topic` and the record's full name `record`.
    pub fn value_subject(self, topic: &str, record: &str) -> String {
        self.subject(topic, "value", record)
    }

    /// The key subject for `topic` and the key record's full name `record`.
    pub fn key_subject(self, topic: &str, record: &str) -> String {
        self.subject(topic, "key", record)
    }

    fn subject(self, topic: &str, part: &str, record: &str) -> String {
        match self {
            Self::TopicName => format!("{topic}-{part}"),
            Self::RecordName => record.to_owned(),
            Self::TopicRecordName => format!("{topic}-{record}"),
        }
    }
}

/// HTTP basic authentication to the registry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RegistryAuthentication {
    /// The user (Confluent Cloud: the API key).
    #[schemars(length(min = 1, max = 253))]
    pub username: String,
    /// The Secret key holding the password (Confluent Cloud: the API secret).
    pub password_secret: PasswordSecret,
}

/// What a client needs to reach the registry, read from the Secrets.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RegistryAccess {
    /// `(user, password)`.
    pub basic_auth: Option<(String, String)>,
    /// CA certificates, PEM.
    pub trusted_certificates: Vec<String>,
}

impl std::fmt::Debug for RegistryAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password.
        f.debug_struct("RegistryAccess")
            .field("user", &self.basic_auth.as_ref().map(|(u, _)| u))
            .field("trusted_certificates", &self.trusted_certificates.len())
            .finish()
    }
}

impl SchemaRegistrySpec {
    /// Every Secret the registry connection reads, each mounted into the workers.
    pub fn secret_names(&self) -> BTreeSet<&str> {
        let mut names = BTreeSet::new();
        names.extend(self.authentication.as_ref().map(|a| a.password_secret.secret_name.as_str()));
        names.extend(self.tls.iter().flat_map(|t| &t.trusted_certificates).map(|c| c.secret_name.as_str()));
        names
    }

    /// Why the connection cannot be used as written: a URL that is neither
    /// `http://` nor `https://`; one with a query, a fragment or a user
    /// (the clients append `/subjects/…` and `/schemas/…` to a base URL:
    /// a query would turn those into requests of the author's choosing,
    /// and a user in the URL is a credential outside any Secret);
    /// `authentication` over `http://` (the password would cross the
    /// network as it is); `tls` on a plain-text URL; a Secret name or key
    /// Kubernetes would not accept (each is read as a path under the
    /// secrets directory, so one must never step out of it).
    pub fn access_problem(&self) -> Option<String> {
        let rest = self.url.strip_prefix("https://").or_else(|| self.url.strip_prefix("http://"));
        let Some(rest) = rest.filter(|r| !r.is_empty()) else {
            return Some(format!("spec.schemaRegistry.url: `{}` is not an http:// or https:// URL", self.url));
        };
        if self.url.contains(['?', '#']) {
            return Some(
                "spec.schemaRegistry.url: a base URL takes no query (`?`) or fragment (`#`): the clients append \
                 the API's paths to it"
                    .into(),
            );
        }
        if rest.split('/').next().is_some_and(|authority| authority.contains('@')) {
            return Some(
                "spec.schemaRegistry.url: a user in the URL (`user@host`) is not accepted: name the credentials in \
                 spec.schemaRegistry.authentication, from a Secret"
                    .into(),
            );
        }
        if self.authentication.is_some() && !self.url.starts_with("https://") {
            return Some(
                "spec.schemaRegistry.url: authentication needs an https:// URL: over http:// the password would \
                 cross the network as it is (spec.schemaRegistry.authentication)"
                    .into(),
            );
        }
        if self.tls.is_some() && !self.url.starts_with("https://") {
            return Some("spec.schemaRegistry.tls: the URL is http://; tls applies to an https:// URL".into());
        }
        let mut names: Vec<(&str, &str)> = Vec::new();
        let mut keys: Vec<(&str, &str)> = Vec::new();
        if let Some(a) = &self.authentication {
            if a.password_secret.key.is_some() == a.password_secret.password.is_some() {
                return Some(
                    "spec.schemaRegistry.authentication.passwordSecret: set exactly one of key or password, the \
                     Secret key holding the password"
                        .into(),
                );
            }
            names.push(("authentication.passwordSecret.secretName", &a.password_secret.secret_name));
            keys.push(("authentication.passwordSecret.key", a.password_secret.secret_key()));
        }
        for c in self.tls.iter().flat_map(|t| &t.trusted_certificates) {
            names.push(("tls.trustedCertificates.secretName", &c.secret_name));
            keys.push(("tls.trustedCertificates.certificate", &c.certificate));
        }
        if let Some((field, name)) = names.into_iter().find(|(_, n)| !is_secret_name(n)) {
            return Some(format!("spec.schemaRegistry.{field}: `{name}` is not a Secret name"));
        }
        keys.into_iter()
            .find(|(_, k)| !is_secret_key(k))
            .map(|(field, key)| format!("spec.schemaRegistry.{field}: `{key}` is not a Secret key"))
    }

    /// The credentials and CA certificates, reading each referenced Secret
    /// key with `read(secret, key)`: the workers read mounted files, the
    /// operator the Secret through the API.
    pub fn access<E>(&self, mut read: impl FnMut(&str, &str) -> Result<String, E>) -> Result<RegistryAccess, E> {
        let mut access = RegistryAccess::default();
        if let Some(a) = &self.authentication {
            let password = read(&a.password_secret.secret_name, a.password_secret.secret_key())?;
            access.basic_auth = Some((a.username.clone(), password.trim_end_matches(['\n', '\r']).to_owned()));
        }
        for c in self.tls.iter().flat_map(|t| &t.trusted_certificates) {
            access.trusted_certificates.push(read(&c.secret_name, &c.certificate)?);
        }
        Ok(access)
    }
}

/// The largest registry answer the operator or a worker reads: a schema
/// is kilobytes, and what answers in a registry's place is not trusted.
pub const REGISTRY_MAX_ANSWER_BYTES: usize = 4 << 20;

/// The registry's own "not there" in an error body (Confluent's REST API,
/// which Apicurio and Karapace speak: 40401 no such subject, 40402 no such
/// version, 40403 no such schema): the code, when the body carries one of
/// these. Any other 404 — an ingress's page, a node not serving yet — is
/// an outage, never "not there".
pub fn registry_not_found_code(body: &[u8]) -> Option<u64> {
    let json: serde_json::Value = serde_json::from_slice(body).ok()?;
    json.get("error_code").and_then(serde_json::Value::as_u64).filter(|c| (40401..=40403).contains(c))
}

/// A subject as one URL path segment: anything but unreserved characters
/// percent-encoded, so a subject (topic names hold `.`, `_`, `-`) cannot
/// add a path, a query or a fragment to a registry request.
pub fn subject_path_segment(subject: &str) -> String {
    subject
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// An error with its causes, `: `-joined: a TLS failure's reason
/// ("certificate verify failed") is a few levels below what an HTTP
/// client says at the top ("error sending request").
pub fn error_with_causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// The TLS settings of a registry connection: Kafka's shape, CA
/// certificates only (a client certificate is not sent).
pub type RegistryTls = KafkaTls;

#[cfg(test)]
mod tests {
    use crate::{CertSecretSource, KafkaTls, PasswordSecret, RegistryAuthentication, SchemaRegistrySpec};

    fn spec(url: &str) -> SchemaRegistrySpec {
        SchemaRegistrySpec {
            url: url.into(),
            subject_name_strategy: Default::default(),
            authentication: Some(RegistryAuthentication {
                username: "api-key".into(),
                password_secret: PasswordSecret {
                    secret_name: "registry".into(),
                    key: Some("secret".into()),
                    password: None,
                },
            }),
            tls: Some(KafkaTls {
                trusted_certificates: vec![CertSecretSource {
                    secret_name: "registry-ca".into(),
                    certificate: "ca.crt".into(),
                }],
            }),
        }
    }

    #[test]
    fn credentials_and_certificates_come_from_the_secrets_they_name() {
        let s = spec("https://registry:8443/apis/ccompat/v7");
        assert_eq!(s.access_problem(), None);
        assert_eq!(s.secret_names().into_iter().collect::<Vec<_>>(), ["registry", "registry-ca"]);
        let access = s.access(|secret, key| Ok::<_, String>(format!("{secret}/{key}\n"))).unwrap();
        assert_eq!(access.basic_auth, Some(("api-key".into(), "registry/secret".into())));
        assert_eq!(access.trusted_certificates, ["registry-ca/ca.crt\n"]);
        assert!(!format!("{access:?}").contains("registry/secret"), "the password is never shown");
    }

    #[test]
    fn what_cannot_be_used_is_refused_with_the_field() {
        let problem = |s: SchemaRegistrySpec| s.access_problem().unwrap_or_default();
        let mut plain = spec("http://registry:8080");
        plain.authentication = None;
        assert!(problem(plain).contains("tls applies to an https:// URL"));
        assert!(problem(spec("ftp://registry")).contains("not an http:// or https:// URL"));
        assert!(problem(spec("https://")).contains("not an http:// or https:// URL"));
        let mut s = spec("https://r");
        s.authentication.as_mut().unwrap().password_secret.key = Some("../../etc/passwd".into());
        assert!(problem(s).contains("is not a Secret key"));
        let mut s = spec("https://r");
        s.tls.as_mut().unwrap().trusted_certificates[0].secret_name = "../x".into();
        assert!(problem(s).contains("is not a Secret name"));
    }

    /// A password is sent only over TLS: `authentication` with an
    /// `http://` URL is refused, naming both fields.
    #[test]
    fn authentication_over_plain_http_is_refused() {
        let mut s = spec("http://registry:8081");
        s.tls = None;
        let p = s.access_problem().unwrap_or_default();
        assert!(p.starts_with("spec.schemaRegistry.url: authentication needs an https:// URL"), "{p}");
        assert!(p.contains("spec.schemaRegistry.authentication"), "{p}");
        s.authentication = None;
        assert_eq!(s.access_problem(), None, "without a password, http:// is allowed");
        s.url = "HTTP://registry:8081".into();
        assert!(s.access_problem().is_some(), "only lower-case schemes are recognised");
    }

    /// A base URL is a base: no query or fragment the clients' paths would
    /// be appended to, no user outside the Secrets.
    #[test]
    fn a_url_with_a_query_fragment_or_user_is_refused() {
        for (url, why) in [
            ("https://internal/admin?q=", "no query"),
            ("https://registry:8081/#", "fragment"),
            ("https://registry:8081/apis?x=1#y", "no query"),
            ("https://admin:hunter2@registry:8081", "a user in the URL"),
            ("https://user@registry/apis", "a user in the URL"),
        ] {
            let p = spec(url).access_problem().unwrap_or_default();
            assert!(p.starts_with("spec.schemaRegistry.url: ") && p.contains(why), "{url}: {p}");
            assert!(!p.contains("hunter2"), "{p}");
        }
        assert_eq!(spec("https://registry:8081/apis/ccompat/v7").access_problem(), None);
        assert_eq!(spec("https://registry/a@b").access_problem(), None, "an @ in the path is a path");
    }
}

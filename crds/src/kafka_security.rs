//! How a Kafka connection authenticates and encrypts, in Strimzi's shape.
//!
//! Strimzi users already have the credentials: a `KafkaUser` makes a Secret
//! with its password (SCRAM) or its certificate and key (mTLS), and the
//! cluster CA Secret holds the certificate that signs the brokers'. So a
//! connection refers to those Secrets by name and **key**, exactly as a
//! Strimzi `KafkaConnect` or `KafkaMirrorMaker2` does, and works with them
//! as they are. The operator mounts each referenced Secret into the
//! workers; values are read from those files when a client is made, never
//! copied into the job's config, status, events, logs or metrics.
//!
//! [`KafkaConnection::security_properties`] turns the spec into librdkafka
//! properties, given a way to read a Secret's key: the workers read mounted
//! files, the operator (for its own partition and lag lookups) the Secret
//! through the API. One function, so both always connect alike.

use std::collections::{BTreeMap, BTreeSet};

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The CRD rules' messages, which [`KafkaConnection::security_problem`]
/// repeats for documents that never meet an API server.
const AUTHENTICATION_SHAPE: &str = "authentication type tls takes certificateAndKey; scram-sha-512, scram-sha-256 and \
                                    plain take username and passwordSecret";
const PASSWORD_KEY: &str =
    "passwordSecret: set exactly one of key or password (Strimzi's name for it), the Secret key holding the password";

/// A Secret's name: a DNS subdomain, as Kubernetes requires (so never a
/// path: no `/`, no `..`).
pub const SECRET_NAME_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// A key of a Secret, as Kubernetes requires: letters, digits, `-`, `_`
/// and `.`, neither `.` nor starting with `..`. The workers read a key as
/// the file `<secrets dir>/<secret>/<key>`: a key such as `../../x` or
/// `/etc/x` would read any file of the pod as a password or a PEM.
pub const SECRET_KEY_PATTERN: &str = r"^(\.[-_a-zA-Z0-9]|[-_a-zA-Z0-9])[-._a-zA-Z0-9]*$";

/// Whether `name` is a valid Secret name ([`SECRET_NAME_PATTERN`]).
pub fn is_secret_name(name: &str) -> bool {
    let label = |l: &str| {
        let b = l.as_bytes();
        let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
        b.first().is_some_and(alnum) && b.last().is_some_and(alnum) && b.iter().all(|c| alnum(c) || *c == b'-')
    };
    (1..=253).contains(&name.len()) && name.split('.').all(label)
}

/// Whether `key` is a valid Secret key ([`SECRET_KEY_PATTERN`]).
pub fn is_secret_key(key: &str) -> bool {
    (1..=253).contains(&key.len())
        && key != "."
        && !key.starts_with("..")
        && key.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// Reference to a Secret in the job's namespace whose keys are librdkafka
/// properties (`secretRef`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretRef {
    #[schemars(length(min = 1, max = 253), regex(pattern = SECRET_NAME_PATTERN))]
    pub name: String,
}

/// How the client proves who it is (Strimzi's `authentication`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = Rule::new("self.type == 'tls' ? (has(self.certificateAndKey) && !has(self.username) && !has(self.passwordSecret)) : (has(self.username) && has(self.passwordSecret) && !has(self.certificateAndKey))").message(AUTHENTICATION_SHAPE))]
pub struct KafkaAuthentication {
    /// `scram-sha-512`, `scram-sha-256` or `plain` (SASL, with `username`
    /// and `passwordSecret`), or `tls` (a client certificate,
    /// `certificateAndKey`; the connection needs `tls` too).
    #[serde(rename = "type")]
    pub kind: AuthenticationType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub username: Option<String>,
    /// The Secret key holding the password (a Strimzi `KafkaUser` Secret's
    /// `password`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_secret: Option<PasswordSecret>,
    /// The Secret keys holding the client certificate and its private key,
    /// PEM (a Strimzi `KafkaUser` Secret's `user.crt` and `user.key`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate_and_key: Option<CertificateAndKey>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum AuthenticationType {
    #[serde(rename = "scram-sha-512")]
    ScramSha512,
    #[serde(rename = "scram-sha-256")]
    ScramSha256,
    #[serde(rename = "plain")]
    Plain,
    #[serde(rename = "tls")]
    Tls,
}

impl AuthenticationType {
    /// librdkafka's `sasl.mechanism`; `None` for certificate authentication.
    fn sasl_mechanism(self) -> Option<&'static str> {
        match self {
            Self::ScramSha512 => Some("SCRAM-SHA-512"),
            Self::ScramSha256 => Some("SCRAM-SHA-256"),
            Self::Plain => Some("PLAIN"),
            Self::Tls => None,
        }
    }
}

/// A password in a Secret: `key` names the Secret key. `password` is
/// Strimzi's name for the same field, accepted so a Strimzi
/// `authentication` block can be copied as it is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = Rule::new("has(self.key) != has(self.password)").message(PASSWORD_KEY))]
pub struct PasswordSecret {
    #[schemars(length(min = 1, max = 253), regex(pattern = SECRET_NAME_PATTERN))]
    pub secret_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), regex(pattern = SECRET_KEY_PATTERN))]
    pub key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), regex(pattern = SECRET_KEY_PATTERN))]
    pub password: Option<String>,
}

impl PasswordSecret {
    /// The Secret key that holds the password.
    pub fn secret_key(&self) -> &str {
        self.key.as_deref().or(self.password.as_deref()).unwrap_or("password")
    }
}

/// A client certificate and its private key, PEM, in one Secret.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CertificateAndKey {
    #[schemars(length(min = 1, max = 253), regex(pattern = SECRET_NAME_PATTERN))]
    pub secret_name: String,
    /// The key holding the certificate (Strimzi: `user.crt`).
    #[schemars(length(min = 1, max = 253), regex(pattern = SECRET_KEY_PATTERN))]
    pub certificate: String,
    /// The key holding the private key (Strimzi: `user.key`).
    #[schemars(length(min = 1, max = 253), regex(pattern = SECRET_KEY_PATTERN))]
    pub key: String,
}

/// TLS to the brokers (Strimzi's `tls`). Present means encrypted; the
/// brokers' certificates are checked against `trustedCertificates`, or the
/// system's CA store when there are none.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KafkaTls {
    /// CA certificates, PEM (Strimzi's cluster CA Secret
    /// `<cluster>-cluster-ca-cert`, key `ca.crt`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub trusted_certificates: Vec<CertSecretSource>,
}

/// One certificate in a Secret.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CertSecretSource {
    #[schemars(length(min = 1, max = 253), regex(pattern = SECRET_NAME_PATTERN))]
    pub secret_name: String,
    #[schemars(length(min = 1, max = 253), regex(pattern = SECRET_KEY_PATTERN))]
    pub certificate: String,
}

/// What every Kafka connection of a job (a source, the sink, the
/// dead-letter topic) says about reaching its cluster.
#[derive(Clone, Copy, Debug)]
pub struct KafkaConnection<'a> {
    pub bootstrap_servers: &'a str,
    pub properties: &'a BTreeMap<String, String>,
    pub secret_ref: Option<&'a SecretRef>,
    pub authentication: Option<&'a KafkaAuthentication>,
    pub tls: Option<&'a KafkaTls>,
}

/// A librdkafka property made from `authentication` / `tls`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecurityProperty {
    pub key: &'static str,
    pub value: String,
    /// The Secret the value was read from; its value is never shown.
    pub secret: Option<String>,
}

/// The client properties `authentication` and `tls` set: written there
/// instead, they would fight (and a Secret's value could land in the spec).
const SECURITY_KEYS: &[&str] = &[
    "security.protocol",
    "sasl.mechanism",
    "sasl.mechanisms",
    "sasl.username",
    "sasl.password",
    "ssl.ca.pem",
    "ssl.ca.location",
    "ssl.certificate.pem",
    "ssl.certificate.location",
    "ssl.key.pem",
    "ssl.key.location",
];

impl<'a> KafkaConnection<'a> {
    /// Every Secret this connection reads, each mounted into the workers.
    pub fn secret_names(&self) -> BTreeSet<&'a str> {
        let mut names = BTreeSet::new();
        names.extend(self.secret_ref.map(|s| s.name.as_str()));
        if let Some(a) = self.authentication {
            names.extend(a.password_secret.as_ref().map(|p| p.secret_name.as_str()));
            names.extend(a.certificate_and_key.as_ref().map(|c| c.secret_name.as_str()));
        }
        if let Some(t) = self.tls {
            names.extend(t.trusted_certificates.iter().map(|c| c.secret_name.as_str()));
        }
        names
    }

    /// Why `authentication` / `tls` cannot be used as written, for what
    /// the CRD's rules cannot check (documents that never meet an API
    /// server, and properties that would contradict them).
    pub fn security_problem(&self) -> Option<String> {
        if let Some(problem) = self.reference_problem() {
            return Some(problem);
        }
        let a = self.authentication;
        if a.is_none() && self.tls.is_none() {
            return None;
        }
        if let Some(a) = a {
            let sasl = a.kind.sasl_mechanism().is_some();
            let shaped = if sasl {
                a.username.is_some() && a.password_secret.is_some() && a.certificate_and_key.is_none()
            } else {
                a.certificate_and_key.is_some() && a.username.is_none() && a.password_secret.is_none()
            };
            if !shaped {
                return Some(AUTHENTICATION_SHAPE.into());
            }
            if let Some(p) = &a.password_secret
                && p.key.is_some() == p.password.is_some()
            {
                return Some(PASSWORD_KEY.into());
            }
            if !sasl && self.tls.is_none() {
                return Some("authentication type tls (a client certificate) needs tls on the connection".into());
            }
        }
        let clash: Vec<&str> =
            self.properties.keys().map(String::as_str).filter(|k| SECURITY_KEYS.contains(k)).collect();
        (!clash.is_empty()).then(|| {
            format!(
                "properties {} conflict with authentication/tls, which set them: remove them from properties",
                clash.join(", ")
            )
        })
    }

    /// The first Secret name or key this connection names that Kubernetes
    /// would not accept: each is read as a path under the secrets
    /// directory, so one must never step out of it.
    fn reference_problem(&self) -> Option<String> {
        let mut names: Vec<(&str, &str)> = Vec::new();
        let mut keys: Vec<(&str, &str)> = Vec::new();
        names.extend(self.secret_ref.map(|s| ("secretRef.name", s.name.as_str())));
        if let Some(a) = self.authentication {
            if let Some(p) = &a.password_secret {
                names.push(("authentication.passwordSecret.secretName", &p.secret_name));
                keys.push(("authentication.passwordSecret.key", p.secret_key()));
            }
            if let Some(c) = &a.certificate_and_key {
                names.push(("authentication.certificateAndKey.secretName", &c.secret_name));
                keys.push(("authentication.certificateAndKey.certificate", &c.certificate));
                keys.push(("authentication.certificateAndKey.key", &c.key));
            }
        }
        for c in self.tls.iter().flat_map(|t| &t.trusted_certificates) {
            names.push(("tls.trustedCertificates.secretName", &c.secret_name));
            keys.push(("tls.trustedCertificates.certificate", &c.certificate));
        }
        if let Some((field, name)) = names.into_iter().find(|(_, n)| !is_secret_name(n)) {
            return Some(format!(
                "{field}: `{name}` is not a Secret name (lower-case letters, digits, `-` and `.`, as Kubernetes \
                 requires)"
            ));
        }
        keys.into_iter().find(|(_, k)| !is_secret_key(k)).map(|(field, key)| {
            format!(
                "{field}: `{key}` is not a Secret key (letters, digits, `-`, `_` and `.`, not starting with `..`, \
                 as Kubernetes requires)"
            )
        })
    }

    /// The librdkafka properties for `authentication` and `tls`, reading
    /// each referenced Secret key with `read(secret, key)`. Empty when
    /// neither is set (then `properties` / `secretRef` say it all).
    pub fn security_properties<E>(
        &self,
        mut read: impl FnMut(&str, &str) -> Result<String, E>,
    ) -> Result<Vec<SecurityProperty>, E> {
        let mut out = Vec::new();
        let mut set = |key: &'static str, value: String, secret: Option<&str>| {
            out.push(SecurityProperty { key, value, secret: secret.map(str::to_owned) });
        };
        let mechanism = self.authentication.and_then(|a| a.kind.sasl_mechanism());
        let protocol = match (mechanism.is_some(), self.tls.is_some()) {
            (true, true) => "SASL_SSL",
            (true, false) => "SASL_PLAINTEXT",
            (false, true) => "SSL",
            (false, false) => return Ok(out),
        };
        set("security.protocol", protocol.into(), None);
        if let Some(a) = self.authentication {
            if let Some(mechanism) = mechanism {
                set("sasl.mechanism", mechanism.into(), None);
                set("sasl.username", a.username.clone().unwrap_or_default(), None);
                if let Some(p) = &a.password_secret {
                    let password = read(&p.secret_name, p.secret_key())?;
                    set("sasl.password", password.trim_end_matches(['\n', '\r']).to_owned(), Some(&p.secret_name));
                }
            }
            if let Some(c) = &a.certificate_and_key {
                set("ssl.certificate.pem", read(&c.secret_name, &c.certificate)?, Some(&c.secret_name));
                set("ssl.key.pem", read(&c.secret_name, &c.key)?, Some(&c.secret_name));
            }
        }
        if let Some(t) = self.tls.filter(|t| !t.trusted_certificates.is_empty()) {
            let mut pem = String::new();
            for c in &t.trusted_certificates {
                pem.push_str(read(&c.secret_name, &c.certificate)?.trim_end());
                pem.push('\n');
            }
            let secret = t.trusted_certificates[0].secret_name.clone();
            set("ssl.ca.pem", pem, Some(&secret));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scram() -> KafkaAuthentication {
        KafkaAuthentication {
            kind: AuthenticationType::ScramSha512,
            username: Some("app".into()),
            password_secret: Some(PasswordSecret {
                secret_name: "app-user".into(),
                key: None,
                password: Some("password".into()),
            }),
            certificate_and_key: None,
        }
    }

    fn tls() -> KafkaTls {
        KafkaTls {
            trusted_certificates: vec![
                CertSecretSource { secret_name: "cluster-ca-cert".into(), certificate: "ca.crt".into() },
                CertSecretSource { secret_name: "other-ca".into(), certificate: "ca.crt".into() },
            ],
        }
    }

    fn conn<'a>(
        props: &'a BTreeMap<String, String>,
        a: Option<&'a KafkaAuthentication>,
        t: Option<&'a KafkaTls>,
    ) -> KafkaConnection<'a> {
        KafkaConnection { bootstrap_servers: "b:9093", properties: props, secret_ref: None, authentication: a, tls: t }
    }

    fn read(secret: &str, key: &str) -> Result<String, String> {
        Ok(format!("<{secret}/{key}>\n"))
    }

    fn props(c: KafkaConnection<'_>) -> BTreeMap<&'static str, (String, Option<String>)> {
        c.security_properties(read).unwrap().into_iter().map(|p| (p.key, (p.value, p.secret))).collect()
    }

    #[test]
    fn secret_names_and_keys_that_would_leave_the_secrets_directory_are_refused() {
        for key in ["password", "user.crt", ".hidden", "a..b", "ca_1-x.pem"] {
            assert!(is_secret_key(key), "{key}");
        }
        for key in ["", ".", "..", "../../etc/passwd", "/etc/shadow", "a/b", "..data", "x y"] {
            assert!(!is_secret_key(key), "{key}");
        }
        for name in ["app-user", "cluster-ca-cert", "a.b.c", "x"] {
            assert!(is_secret_name(name), "{name}");
        }
        for name in ["", "..", "../x", "/x", "A", "-a", "a-", "a..b", "a/b"] {
            assert!(!is_secret_name(name), "{name}");
        }
        let empty = BTreeMap::new();
        let mut a = scram();
        a.password_secret = Some(PasswordSecret {
            secret_name: "app-user".into(),
            key: Some("../../../etc/shadow".into()),
            password: None,
        });
        let p = conn(&empty, Some(&a), None).security_problem().unwrap();
        assert!(p.contains("authentication.passwordSecret.key: `../../../etc/shadow` is not a Secret key"), "{p}");
        let mut t = tls();
        t.trusted_certificates[1].certificate = "/var/run/secrets/kubernetes.io/serviceaccount/token".into();
        let p = conn(&empty, None, Some(&t)).security_problem().unwrap();
        assert!(p.contains("tls.trustedCertificates.certificate"), "{p}");
        let r = SecretRef { name: "..".into() };
        let c = KafkaConnection { secret_ref: Some(&r), ..conn(&empty, None, None) };
        assert!(c.security_problem().unwrap().contains("secretRef.name: `..` is not a Secret name"));
    }

    #[test]
    fn scram_over_tls_reads_the_password_and_every_trusted_certificate() {
        let (empty, a, t) = (BTreeMap::new(), scram(), tls());
        let p = props(conn(&empty, Some(&a), Some(&t)));
        assert_eq!(p["security.protocol"].0, "SASL_SSL");
        assert_eq!(p["sasl.mechanism"].0, "SCRAM-SHA-512");
        assert_eq!(p["sasl.username"], ("app".into(), None));
        assert_eq!(p["sasl.password"], ("<app-user/password>".into(), Some("app-user".into())));
        assert_eq!(p["ssl.ca.pem"].0, "<cluster-ca-cert/ca.crt>\n<other-ca/ca.crt>\n");
        assert!(!p.contains_key("ssl.key.pem"));
    }

    #[test]
    fn each_type_picks_its_protocol_and_mechanism() {
        let empty = BTreeMap::new();
        let mut a = scram();
        a.kind = AuthenticationType::ScramSha256;
        assert_eq!(props(conn(&empty, Some(&a), None))["security.protocol"].0, "SASL_PLAINTEXT");
        assert_eq!(props(conn(&empty, Some(&a), None))["sasl.mechanism"].0, "SCRAM-SHA-256");
        a.kind = AuthenticationType::Plain;
        assert_eq!(props(conn(&empty, Some(&a), None))["sasl.mechanism"].0, "PLAIN");
        let t = KafkaTls::default();
        let only_tls = props(conn(&empty, None, Some(&t)));
        assert_eq!(only_tls.len(), 1, "system CAs: {only_tls:?}");
        assert_eq!(only_tls["security.protocol"].0, "SSL");
        let mtls = KafkaAuthentication {
            kind: AuthenticationType::Tls,
            username: None,
            password_secret: None,
            certificate_and_key: Some(CertificateAndKey {
                secret_name: "app-user".into(),
                certificate: "user.crt".into(),
                key: "user.key".into(),
            }),
        };
        let p = props(conn(&empty, Some(&mtls), Some(&t)));
        assert_eq!(p["security.protocol"].0, "SSL");
        assert_eq!(p["ssl.certificate.pem"].0, "<app-user/user.crt>\n");
        assert_eq!(p["ssl.key.pem"].0, "<app-user/user.key>\n");
        assert!(!p.contains_key("sasl.mechanism"));
        assert_eq!(conn(&empty, Some(&mtls), Some(&t)).secret_names(), BTreeSet::from(["app-user"]));
        assert!(conn(&empty, Some(&mtls), None).security_problem().unwrap().contains("needs tls on the connection"));
        assert_eq!(props(conn(&empty, None, None)).len(), 0);
    }

    #[test]
    fn the_secret_key_is_key_or_strimzis_password() {
        let mut p = scram().password_secret.unwrap();
        assert_eq!(p.secret_key(), "password");
        p.password = None;
        p.key = Some("pw".into());
        assert_eq!(p.secret_key(), "pw");
    }

    #[test]
    fn conflicts_and_missing_parts_are_named() {
        let (a, t) = (scram(), tls());
        let clash = BTreeMap::from([("security.protocol".to_owned(), "SSL".to_owned())]);
        let e = conn(&clash, Some(&a), Some(&t)).security_problem().unwrap();
        assert!(e.contains("security.protocol") && e.contains("conflict"), "{e}");
        assert_eq!(conn(&clash, None, None).security_problem(), None, "properties alone may say it");
        let mut both = scram();
        both.password_secret.as_mut().unwrap().key = Some("password".into());
        assert!(conn(&BTreeMap::new(), Some(&both), None).security_problem().unwrap().contains("exactly one"));
        let mut no_user = scram();
        no_user.username = None;
        assert_eq!(conn(&BTreeMap::new(), Some(&no_user), None).security_problem().unwrap(), AUTHENTICATION_SHAPE);
        assert_eq!(
            conn(&BTreeMap::new(), Some(&a), Some(&t)).secret_names(),
            BTreeSet::from(["app-user", "cluster-ca-cert", "other-ca"])
        );
    }

    #[test]
    fn a_failed_read_stops_with_its_error() {
        let (empty, a) = (BTreeMap::new(), scram());
        let e = conn(&empty, Some(&a), None).security_properties(|s, k| Err::<String, _>(format!("{s}:{k}")));
        assert_eq!(e.unwrap_err(), "app-user:password");
    }
}

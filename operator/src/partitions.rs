//! Partition counts of a job's sources, from the Kafka cluster (bounded
//! time, off the async runtime). Missing topics and unreachable brokers come
//! back as status reasons, not as reconcile errors, each classified where it
//! is found: the job's fault as [`Blocked::Invalid`], the cluster's as
//! [`Blocked::Unavailable`].

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use sluice_crds::{
    KafkaConnection, PropertyOrigin, SourcePartitions, StreamJobSpec, operator_applies, reasons, rejected_property,
};

use crate::Error;
use crate::validate::{Blocked, Invalid};

/// Looks up every source's partition count, and that the Kafka sink and
/// dead-letter topics exist: a job writing a topic the broker does not
/// have (and will not create: where it creates topics, the lookup creates
/// this one, as the workers' producer would) would start, fail every
/// delivery and stop; it is `TopicNotFound` before anything is launched
/// instead, retried with backoff until the topic is there, as a missing
/// source is.
pub async fn lookup(
    client: &Client,
    namespace: &str,
    spec: &StreamJobSpec,
    timeout: Duration,
) -> Result<Result<Vec<SourcePartitions>, Blocked>, Error> {
    let mut out = Vec::with_capacity(spec.sources.len());
    for s in &spec.sources {
        let partitions = match (&s.kafka, &s.datagen) {
            (Some(k), _) => {
                let what = format!("source {}", s.name);
                match look_up_topic(client, namespace, &what, k.connection(), &k.topic, Role::Source, timeout).await? {
                    Ok(n) => n,
                    Err(blocked) => return Ok(Err(blocked)),
                }
            }
            (None, Some(d)) => d.partitions,
            (None, None) => 1,
        };
        out.push(SourcePartitions { source: s.name.clone(), partitions });
    }
    let outputs =
        [("sink", spec.sink.kafka.as_ref()), ("deadLetter", spec.dead_letter.as_ref().and_then(|d| d.kafka.as_ref()))];
    for (what, target) in outputs {
        let Some(k) = target else { continue };
        if let Err(blocked) =
            look_up_topic(client, namespace, what, k.connection(), &k.topic, Role::Output, timeout).await?
        {
            return Ok(Err(blocked));
        }
    }
    Ok(Ok(out))
}

/// What the operator asks of a topic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// A source: its partition count, which must be known.
    Source,
    /// The sink or dead-letter topic: that it exists. Asked as the
    /// workers' producer would: a broker that creates topics creates it
    /// now (and may not know its leaders yet), one that does not says it
    /// does not exist.
    Output,
}

/// `topic` on `conn`'s cluster, read with its client properties: its
/// partition count (0 for an output being created); a problem names
/// `what` (a source, the sink).
async fn look_up_topic(
    client: &Client,
    namespace: &str,
    what: &str,
    conn: KafkaConnection<'_>,
    topic: &str,
    role: Role,
    timeout: Duration,
) -> Result<Result<i32, Blocked>, Error> {
    let mut props = match client_properties(client, namespace, what, conn).await? {
        Ok(props) => props,
        // The spec's or its Secrets' problem: the cluster was not asked.
        Err(invalid) => return Ok(Err(Blocked::Invalid(invalid))),
    };
    if role == Role::Output {
        props.insert("allow.auto.create.topics".into(), ("true".into(), None));
    }
    let (bootstrap, topic) = (conn.bootstrap_servers.to_owned(), topic.to_owned());
    let result = tokio::task::spawn_blocking(move || partition_count(&bootstrap, &props, &topic, role, timeout))
        .await
        .map_err(|e| Error::Internal(format!("lookup task: {e}")))?;
    Ok(result.map_err(|mut blocked| {
        let (Blocked::Invalid(invalid) | Blocked::Unavailable(invalid)) = &mut blocked;
        invalid.message = format!("{what}: {}", invalid.message);
        blocked
    }))
}

/// Client properties by key: value, and the Secret it came from (if any).
pub type Properties = BTreeMap<String, (String, Option<String>)>;

/// The connection and authentication properties of a Kafka connection (a
/// source, the sink, the dead-letter topic), from
/// its spec and its Secrets: only those the operator applies in its own
/// process (see `sluice_crds::OPERATOR_CLIENT_PROPERTIES`), and what
/// `authentication` / `tls` set — the same properties the workers make
/// ([`sluice_crds::KafkaConnection::security_properties`]), with the
/// Secrets read through the API instead of mounted files. The values stay
/// in this process's client config.
pub async fn client_properties(
    client: &Client,
    namespace: &str,
    what: &str,
    conn: KafkaConnection<'_>,
) -> Result<Result<Properties, Invalid>, Error> {
    let invalid = |message: String| Invalid { reason: reasons::INVALID_SPEC, message: format!("{what}: {message}") };
    if let Some(problem) = conn.security_problem() {
        return Ok(Err(invalid(problem)));
    }
    let mut props: Properties = conn
        .properties
        .iter()
        .filter(|(key, _)| operator_applies(key))
        .map(|(key, value)| (key.clone(), (value.clone(), None)))
        .collect();
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let mut secrets = BTreeMap::new();
    for name in conn.secret_names() {
        let Some(sec) = api.get_opt(name).await? else {
            return Ok(Err(invalid(format!("Secret {name} not found in namespace {namespace}"))));
        };
        secrets.insert(name.to_owned(), sec.data.unwrap_or_default());
    }
    if let Some(secret) = conn.secret_ref {
        for (key, value) in &secrets[&secret.name] {
            if operator_applies(key) {
                let value = String::from_utf8_lossy(&value.0).trim_end().to_owned();
                props.insert(key.clone(), (value, Some(secret.name.clone())));
            }
        }
    }
    let security = conn.security_properties(|secret, key| {
        let value = secrets.get(secret).and_then(|data| data.get(key));
        value
            .map(|v| String::from_utf8_lossy(&v.0).into_owned())
            .ok_or_else(|| invalid(format!("Secret {secret} in namespace {namespace} has no key `{key}`")))
    });
    match security {
        Ok(security) => {
            props.extend(security.into_iter().map(|p| (p.key.to_owned(), (p.value, p.secret))));
            if let Some(problem) = cleartext_credentials(&props).or_else(|| unverified_tls_credentials(&props)) {
                return Ok(Err(invalid(problem)));
            }
            Ok(Ok(props))
        }
        Err(invalid) => Ok(Err(invalid)),
    }
}

/// Why the operator will not connect with `props`: a SASL PLAIN password
/// over a connection without TLS. The operator reads a job's Secrets and
/// connects to the job's `bootstrapServers`; PLAIN sends the password as it
/// is, so over a plaintext listener whoever controls that address, or the
/// path to it, would read it. (SCRAM proves the password without sending
/// it; without SASL it is not sent at all.) A job meant to run so must add
/// `tls` — its workers would send the same password in the clear.
fn cleartext_credentials(props: &Properties) -> Option<String> {
    let (_, origin) = props.get("sasl.password")?;
    let protocol = props.get("security.protocol").map_or("plaintext", |(p, _)| p.as_str());
    let mechanism = props.get("sasl.mechanism").or_else(|| props.get("sasl.mechanisms")).map(|(m, _)| m.as_str());
    if !protocol.eq_ignore_ascii_case("sasl_plaintext") || !mechanism.is_some_and(|m| m.eq_ignore_ascii_case("plain")) {
        return None;
    }
    let from = origin.as_deref().map_or_else(|| "the spec".to_owned(), |s| format!("Secret `{s}`"));
    Some(format!(
        "a SASL password (from {from}) would go over a connection without TLS (security.protocol {protocol}): the \
         operator never sends credentials unencrypted; add `tls` to the connection"
    ))
}

/// Why the operator will not connect with `props`: a SASL password sent
/// over TLS whose certificate or host-name check a property turns off
/// (`enable.ssl.certificate.verification=false`,
/// `ssl.endpoint.identification.algorithm=none`). Without the check,
/// whoever answers at the address — or on the path to it — is taken for
/// the broker and receives the password (PLAIN's as it is; SCRAM's proof,
/// to be guessed at offline). The operator does not weaken its own checks
/// for a job: such a job is refused before anything connects.
fn unverified_tls_credentials(props: &Properties) -> Option<String> {
    let (_, password_from) = props.get("sasl.password")?;
    let origin =
        |secret: &Option<String>| secret.as_deref().map_or_else(|| "the spec".to_owned(), |s| format!("Secret `{s}`"));
    let set = |key: &str, check_off: fn(&str) -> bool| props.get(key).filter(|(value, _)| check_off(value.trim()));
    let off = |v: &str| ["false", "f", "0"].iter().any(|off| v.eq_ignore_ascii_case(off));
    let (key, (_, from)) = match set("enable.ssl.certificate.verification", off) {
        Some(p) => ("enable.ssl.certificate.verification", p),
        None => (
            "ssl.endpoint.identification.algorithm",
            set("ssl.endpoint.identification.algorithm", |v| !v.eq_ignore_ascii_case("https"))?,
        ),
    };
    let from = origin(from);
    Some(format!(
        "a SASL password (from {}) would go to a broker whose certificate is not checked (`{key}` from {from} turns \
         the check off): the operator never sends credentials over TLS it does not verify; remove the property \
         and trust the broker's CA with `tls.trustedCertificates`",
        origin(password_from)
    ))
}

/// A client config for the operator's own reads of a cluster.
pub fn client_config(bootstrap: &str, props: &Properties) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", bootstrap).set("client.id", "sluice-operator");
    for (k, (v, _)) in props {
        config.set(k, v);
    }
    config
}

fn partition_count(
    bootstrap: &str,
    props: &Properties,
    topic: &str,
    role: Role,
    timeout: Duration,
) -> Result<i32, Blocked> {
    let config = client_config(bootstrap, props);
    let unreachable = |e: &dyn std::fmt::Display| {
        Blocked::Unavailable(Invalid {
            reason: reasons::BROKER_UNREACHABLE,
            message: format!("cannot read metadata of topic {topic} from {bootstrap}: {e}"),
        })
    };
    // A property the client rejects is the spec's; any other failure to
    // make the client, the cluster's.
    let consumer: BaseConsumer =
        config.create().map_err(|e| rejected(props, &e).map_or_else(|| unreachable(&e), Blocked::Invalid))?;
    let md = consumer.fetch_metadata(Some(topic), timeout).map_err(|e| match e {
        KafkaError::MetadataFetch(RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic) => {
            not_found(topic, bootstrap)
        }
        other => unreachable(&other),
    })?;
    let Some(t) = md.topics().iter().find(|t| t.name() == topic) else {
        return Err(not_found(topic, bootstrap));
    };
    match (t.error().map(RDKafkaErrorCode::from), role) {
        (None, _) => {}
        (Some(RDKafkaErrorCode::LeaderNotAvailable), Role::Output) => return Ok(0),
        (Some(RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic), _) => {
            return Err(not_found(topic, bootstrap));
        }
        (Some(other), _) => return Err(unreachable(&other)),
    }
    if t.partitions().is_empty() && role == Role::Source {
        return Err(not_found(topic, bootstrap));
    }
    i32::try_from(t.partitions().len()).map_err(|e| unreachable(&e))
}

/// A property the client rejected, as a spec error that names it. The
/// client's own text quotes the value, which must never reach a status
/// message or event (it may be a Secret's).
pub fn rejected(props: &Properties, e: &KafkaError) -> Option<Invalid> {
    let KafkaError::ClientConfig(_, desc, key, value) = e else { return None };
    let origin = match props.get(key).and_then(|(_, secret)| secret.as_deref()) {
        Some(secret) => PropertyOrigin::Secret(secret),
        None => PropertyOrigin::Spec,
    };
    Some(Invalid { reason: reasons::INVALID_SPEC, message: rejected_property(origin, key, value, desc) })
}

/// A missing topic is the cluster's: it may yet be created, and is waited
/// for with backoff.
fn not_found(topic: &str, bootstrap: &str) -> Blocked {
    Blocked::Unavailable(Invalid {
        reason: reasons::TOPIC_NOT_FOUND,
        message: format!("topic {topic} does not exist on {bootstrap}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_is_never_sent_without_tls() {
        let password = ("p4ss".to_owned(), Some("app-user".to_owned()));
        let with = |protocol: &str, mechanism: &str| {
            let mut props = Properties::from([("sasl.password".to_owned(), password.clone())]);
            props.insert("security.protocol".into(), (protocol.into(), None));
            props.insert("sasl.mechanism".into(), (mechanism.into(), None));
            cleartext_credentials(&props)
        };
        let refused = with("SASL_PLAINTEXT", "PLAIN").unwrap();
        assert!(refused.contains("Secret `app-user`") && refused.contains("add `tls`"), "{refused}");
        assert!(!refused.contains("p4ss"), "{refused}");
        assert!(with("sasl_plaintext", "plain").is_some());
        assert!(with("SASL_SSL", "PLAIN").is_none(), "encrypted");
        assert!(with("SASL_PLAINTEXT", "SCRAM-SHA-512").is_none(), "SCRAM does not send the password");
        assert!(with("SSL", "PLAIN").is_none(), "no SASL: the password is not sent");
        assert!(cleartext_credentials(&Properties::new()).is_none(), "no password, nothing to protect");
    }

    /// A password goes only where the broker's certificate and host name
    /// are checked: a job that turns either check off, in `properties` or
    /// through its `secretRef` Secret, is refused, naming the property
    /// and where it came from, never a value.
    #[test]
    fn a_password_is_never_sent_over_tls_that_is_not_verified() {
        let with = |extra: &[(&str, &str, Option<&str>)]| {
            let mut props = Properties::from([
                ("sasl.password".to_owned(), ("p4ss".to_owned(), Some("app-user".to_owned()))),
                ("security.protocol".to_owned(), ("SASL_SSL".to_owned(), None)),
                ("sasl.mechanism".to_owned(), ("SCRAM-SHA-512".to_owned(), None)),
            ]);
            for (k, v, secret) in extra {
                props.insert((*k).to_owned(), ((*v).to_owned(), secret.map(str::to_owned)));
            }
            unverified_tls_credentials(&props)
        };
        let refused = with(&[("enable.ssl.certificate.verification", "false", None)]).unwrap();
        assert!(refused.contains("`enable.ssl.certificate.verification` from the spec"), "{refused}");
        assert!(refused.contains("Secret `app-user`") && !refused.contains("p4ss"), "{refused}");
        for off in ["FALSE", "0", " f "] {
            assert!(with(&[("enable.ssl.certificate.verification", off, None)]).is_some(), "{off}");
        }
        let refused = with(&[("ssl.endpoint.identification.algorithm", "none", Some("kafka-props"))]).unwrap();
        assert!(refused.contains("`ssl.endpoint.identification.algorithm` from Secret `kafka-props`"), "{refused}");
        assert!(with(&[("ssl.endpoint.identification.algorithm", "", None)]).is_some(), "empty is none");
        assert_eq!(with(&[]), None, "librdkafka's defaults check both");
        assert_eq!(
            with(&[
                ("enable.ssl.certificate.verification", "true", None),
                ("ssl.endpoint.identification.algorithm", "HTTPS", None)
            ]),
            None
        );
        // Without a password nothing is sent that a check protects.
        let props = Properties::from([("enable.ssl.certificate.verification".to_owned(), ("false".to_owned(), None))]);
        assert_eq!(unverified_tls_credentials(&props), None);
    }

    /// A Secret value the client rejects never appears in the status
    /// message (which also becomes the Warning event's note).
    #[test]
    fn a_rejected_secret_value_stays_out_of_the_status_message() {
        let props = Properties::from([(
            "security.protocol".to_owned(),
            ("p4ssw0rd-not-a-protocol".to_owned(), Some("creds".to_owned())),
        )]);
        let blocked = partition_count("127.0.0.1:1", &props, "t", Role::Source, Duration::from_millis(100));
        let Err(Blocked::Invalid(e)) = blocked else { panic!("{blocked:?}") };
        assert_eq!(e.reason, reasons::INVALID_SPEC);
        assert!(!e.message.contains("p4ssw0rd"), "{}", e.message);
        assert!(e.message.contains("`security.protocol` from Secret `creds`"), "{}", e.message);
    }

    /// What `lookup` finds wrong is classified where it is found: a
    /// property the client rejects is the job's to fix, a broker that does
    /// not answer is waited for with backoff.
    #[tokio::test]
    async fn lookup_tells_the_job_s_fault_from_the_cluster_s() {
        let kube = Client::try_from(kube::Config::new("http://127.0.0.1:1".parse().unwrap())).unwrap();
        let mut spec = crate::render::fixtures::job("s0-pure-select.yaml").spec;
        let source = spec.sources[0].kafka.as_mut().unwrap();
        source.bootstrap_servers = "127.0.0.1:1".into();
        let timeout = Duration::from_millis(200);
        let down = lookup(&kube, "prod", &spec, timeout).await.unwrap();
        let Err(Blocked::Unavailable(down)) = down else { panic!("{down:?}") };
        assert_eq!(down.reason, reasons::BROKER_UNREACHABLE);
        assert!(down.message.starts_with("source orders: "), "{}", down.message);

        let source = spec.sources[0].kafka.as_mut().unwrap();
        source.properties.insert("security.protocol".into(), "not-a-protocol".into());
        let invalid = lookup(&kube, "prod", &spec, timeout).await.unwrap();
        let Err(Blocked::Invalid(invalid)) = invalid else { panic!("{invalid:?}") };
        assert_eq!(invalid.reason, reasons::INVALID_SPEC);
        assert!(invalid.message.contains("`security.protocol`"), "{}", invalid.message);

        // Refused before the cluster is asked at all.
        let source = spec.sources[0].kafka.as_mut().unwrap();
        source.properties =
            [("security.protocol", "SASL_PLAINTEXT"), ("sasl.mechanism", "PLAIN"), ("sasl.password", "p")]
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .into();
        let invalid = lookup(&kube, "prod", &spec, timeout).await.unwrap();
        let Err(Blocked::Invalid(invalid)) = invalid else { panic!("{invalid:?}") };
        assert!(invalid.message.contains("without TLS"), "{}", invalid.message);

        // So is a password over TLS the job tells the client not to check.
        let source = spec.sources[0].kafka.as_mut().unwrap();
        source.properties = [
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            ("sasl.password", "p"),
            ("enable.ssl.certificate.verification", "false"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .into();
        let invalid = lookup(&kube, "prod", &spec, timeout).await.unwrap();
        let Err(Blocked::Invalid(invalid)) = invalid else { panic!("{invalid:?}") };
        assert_eq!(invalid.reason, reasons::INVALID_SPEC);
        assert!(invalid.message.contains("certificate is not checked"), "{}", invalid.message);
    }
}

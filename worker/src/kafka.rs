//! Kafka client plumbing shared by sources, sinks and checkpoints: client
//! configuration (with credentials read from mounted Secrets, never from the
//! job spec), topic administration, and driving admin futures.

use std::path::Path;
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use sluice_crds::{KafkaConnection, PropertyOrigin, rejected_property};

use crate::Error;

/// Client configuration: bootstrap servers, the user's extra properties,
/// every key of the `secretRef` Secret, and what `authentication` / `tls`
/// set, their Secret keys read from the files the operator mounts under
/// `secrets_dir/<secret name>/<key>`.
///
/// The result is checked here, where each property's origin is known: the
/// Kafka client's own error text quotes the value, and a Secret's value must
/// never reach a log line, /readyz or the job's status.
pub fn client_config(conn: KafkaConnection<'_>, secrets_dir: &str) -> Result<ClientConfig, Error> {
    if let Some(problem) = conn.security_problem() {
        return Err(Error::Config(problem));
    }
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", conn.bootstrap_servers);
    c.set("client.id", "sluice");
    for (k, v) in conn.properties {
        c.set(k, v);
    }
    // Property key → the Secret its value came from.
    let mut from_secret: Vec<(String, String)> = Vec::new();
    if let Some(secret) = conn.secret_ref {
        let dir = Path::new(secrets_dir).join(&secret.name);
        let entries = std::fs::read_dir(&dir).map_err(|e| {
            Error::Config(format!(
                "secretRef {}: cannot read {} ({e}); the operator mounts each referenced Secret there",
                secret.name,
                dir.display()
            ))
        })?;
        for entry in entries.filter_map(Result::ok) {
            let name = entry.file_name().to_string_lossy().into_owned();
            // Kubernetes Secret volumes contain ..data symlink bookkeeping.
            if name.starts_with("..") || !entry.path().is_file() {
                continue;
            }
            let value =
                std::fs::read_to_string(entry.path()).map_err(|e| Error::io(format!("read secret key {name}"), e))?;
            c.set(name.clone(), value.trim_end_matches(['\n', '\r']));
            from_secret.push((name, secret.name.clone()));
        }
    }
    let security = conn.security_properties(|secret, key| {
        let path = Path::new(secrets_dir).join(secret).join(key);
        std::fs::read_to_string(&path).map_err(|e| {
            Error::Config(format!(
                "cannot read key `{key}` of Secret `{secret}` from {} ({e}); the operator mounts each Secret a \
                 connection names there: does the Secret have that key?",
                path.display()
            ))
        })
    })?;
    for p in security {
        c.set(p.key, &p.value);
        if let Some(secret) = p.secret {
            from_secret.push((p.key.to_owned(), secret));
        }
    }
    check(&c, |key| from_secret.iter().find(|(k, _)| k == key).map(|(_, s)| s.as_str()))?;
    Ok(c)
}

/// Lets the Kafka client parse every property; a rejected one is reported
/// by key and origin, with its value blanked out of the client's message.
fn check<'a>(config: &ClientConfig, secret_of: impl Fn(&str) -> Option<&'a str>) -> Result<(), Error> {
    match config.create_native_config() {
        Ok(_) => Ok(()),
        Err(KafkaError::ClientConfig(_, desc, key, value)) => {
            let origin = secret_of(&key).map_or(PropertyOrigin::Spec, PropertyOrigin::Secret);
            Err(Error::Config(rejected_property(origin, &key, &value, &desc)))
        }
        // A NUL byte in a key or value: the value is not shown either.
        Err(_) => Err(Error::Config("a Kafka client property holds a NUL byte".into())),
    }
}

/// Sets `key` unless the user's properties already did.
pub fn set_default(config: &mut ClientConfig, key: &str, value: &str) {
    if config.get(key).is_none() {
        config.set(key, value);
    }
}

/// Runs a future on the current thread. rdkafka's admin futures are completed
/// by librdkafka's own threads, so parking until woken is all that is needed.
pub fn block_on<F: Future>(fut: F) -> F::Output {
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    loop {
        match fut.as_mut().poll(&mut cx) {
            Poll::Ready(v) => return v,
            Poll::Pending => std::thread::park_timeout(Duration::from_millis(50)),
        }
    }
}

/// The brokers a client config names, for messages: a broker that does
/// not answer is an address to check.
pub fn servers(config: &ClientConfig) -> &str {
    config.get("bootstrap.servers").unwrap_or("(no bootstrap.servers)")
}

/// Partition count of `topic`, looked up in the cluster's metadata.
pub fn partition_count(config: &ClientConfig, topic: &str, timeout: Duration) -> Result<i32, Error> {
    let consumer: BaseConsumer = config.create().map_err(|e| Error::kafka("create metadata client", e))?;
    let md = consumer.fetch_metadata(Some(topic), timeout).map_err(|e| {
        Error::kafka(format!("metadata of topic {topic} from {} (no answer within {timeout:?})", servers(config)), e)
    })?;
    let t = md
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .ok_or_else(|| Error::kafka(format!("topic {topic}"), "not in metadata"))?;
    if let Some(err) = t.error() {
        return Err(Error::Kafka {
            context: format!("topic {topic}"),
            message: format!("{:?}", RDKafkaErrorCode::from(err)),
        });
    }
    i32::try_from(t.partitions().len()).map_err(|_| Error::Internal("partition count".into()))
}

/// The checkpoint metadata group `group` last committed for each of the
/// partitions of `topics` ("" where it committed nothing).
pub fn committed(config: &ClientConfig, group: &str, topics: &[(&str, &[i32])]) -> Result<Vec<String>, Error> {
    let mut tpl = rdkafka::TopicPartitionList::new();
    for (topic, partitions) in topics {
        for &p in *partitions {
            tpl.add_partition(topic, p);
        }
    }
    if tpl.count() == 0 {
        return Ok(Vec::new());
    }
    let mut config = config.clone();
    config.set("group.id", group).set("enable.auto.commit", "false");
    let consumer: BaseConsumer = config.create().map_err(|e| Error::kafka("create offsets reader", e))?;
    let committed = consumer
        .committed_offsets(tpl, Duration::from_secs(30))
        .map_err(|e| Error::kafka(format!("committed offsets of group {group} from {}", servers(&config)), e))?;
    Ok(committed.elements().iter().map(|e| e.metadata().to_owned()).collect())
}

/// Creates a repartition topic (or finds it) with the partition count the
/// job expects. Records are deleted by the purge, not by retention: one
/// expiring before the next stage read it would be lost.
pub fn open_repartition_topic(client: &ClientConfig, topic: &str, partitions: i32) -> Result<(), Error> {
    let laid_out = create_topic(client, topic, partitions, &[("cleanup.policy", "delete"), ("retention.ms", "-1")])?;
    if laid_out != partitions {
        return Err(Error::Config(format!(
            "repartition topic {topic} has {laid_out} partitions but this job needs {partitions} (the largest \
             source partition count, or spec.engine.repartitionPartitions, changed): rows of a key would reach \
             other partitions than its state. Nothing was consumed. Rename the job (a new consumer group and \
             internal topics) or delete its consumer group and internal topics to start over"
        )));
    }
    Ok(())
}

/// Creates `topic` with `partitions` partitions and the given topic configs
/// unless it exists; returns how many partitions it has. An existing topic
/// is never grown: for an internal topic laid out per source partition, a
/// different count means the layout changed, which the caller must decide
/// about rather than have papered over.
pub fn create_topic(
    config: &ClientConfig,
    topic: &str,
    partitions: i32,
    configs: &[(&str, &str)],
) -> Result<i32, Error> {
    let admin: AdminClient<DefaultClientContext> =
        config.create().map_err(|e| Error::kafka("create admin client", e))?;
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let mut new = NewTopic::new(topic, partitions, TopicReplication::Fixed(-1));
    for (k, v) in configs {
        new = new.set(k, v);
    }
    let results = block_on(admin.create_topics([&new], &options))
        .map_err(|e| Error::kafka(format!("create topic {topic}"), e))?;
    for r in results {
        match r {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((t, code)) => return Err(Error::kafka(format!("create topic {t}"), code)),
        }
    }
    partition_count(config, topic, Duration::from_secs(10))
}

/// Deletes the records before the given offsets (`(topic, partition,
/// offset)`): what a repartition topic holds below its reader's committed
/// offset is never read again, as Kafka Streams purges its repartition
/// topics after each commit.
pub fn delete_records(admin: &AdminClient<DefaultClientContext>, before: &[(&str, i32, i64)]) -> Result<(), Error> {
    if before.is_empty() {
        return Ok(());
    }
    let mut tpl = rdkafka::TopicPartitionList::new();
    for &(topic, p, offset) in before {
        tpl.add_partition_offset(topic, p, rdkafka::Offset::Offset(offset))
            .map_err(|e| Error::kafka("delete records list", e))?;
    }
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let result = block_on(admin.delete_records(&tpl, &options)).map_err(|e| Error::kafka("delete records", e))?;
    for e in result.elements() {
        if let Err(err) = e.error() {
            return Err(Error::kafka(format!("delete records of {}/{}", e.topic(), e.partition()), err));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use sluice_crds::{AuthenticationType, KafkaAuthentication, KafkaTls, PasswordSecret, SecretRef};

    use super::*;

    fn conn<'a>(
        properties: &'a BTreeMap<String, String>,
        secret_ref: Option<&'a SecretRef>,
        authentication: Option<&'a KafkaAuthentication>,
    ) -> KafkaConnection<'a> {
        KafkaConnection { bootstrap_servers: "127.0.0.1:9092", properties, secret_ref, authentication, tls: None }
    }

    /// SCRAM from a Strimzi-shaped Secret: the password is read from the
    /// mounted key; a key the Secret lacks is named, and so is the Secret.
    #[test]
    fn authentication_reads_its_secret_key_from_the_mounted_file() {
        let dir = std::env::temp_dir().join(format!("sluice-auth-test-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("app-user")).unwrap();
        std::fs::write(dir.join("app-user/password"), "pw-Value\n").unwrap();
        let mut auth = KafkaAuthentication {
            kind: AuthenticationType::ScramSha512,
            username: Some("app".into()),
            password_secret: Some(PasswordSecret {
                secret_name: "app-user".into(),
                key: None,
                password: Some("password".into()),
            }),
            certificate_and_key: None,
        };
        let empty = BTreeMap::new();
        let tls = KafkaTls::default();
        let c = client_config(
            KafkaConnection { tls: Some(&tls), ..conn(&empty, None, Some(&auth)) },
            dir.to_str().unwrap(),
        )
        .unwrap();
        assert_eq!(c.get("security.protocol"), Some("SASL_SSL"));
        assert_eq!(c.get("sasl.mechanism"), Some("SCRAM-SHA-512"));
        assert_eq!(c.get("sasl.password"), Some("pw-Value"));
        auth.password_secret.as_mut().unwrap().password = Some("nope".into());
        let e = client_config(conn(&empty, None, Some(&auth)), dir.to_str().unwrap()).unwrap_err().to_string();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(e.contains("key `nope` of Secret `app-user`"), "{e}");
        let clash = BTreeMap::from([("sasl.mechanism".to_owned(), "PLAIN".to_owned())]);
        let e = client_config(conn(&clash, None, Some(&auth)), "/nonexistent").unwrap_err().to_string();
        assert!(e.contains("sasl.mechanism") && e.contains("conflict"), "{e}");
    }

    /// A Secret key the client rejects is named, with its origin, and its
    /// value appears nowhere in the error.
    #[test]
    fn a_rejected_secret_property_is_reported_without_its_value() {
        let dir = std::env::temp_dir().join(format!("sluice-secret-test-{}", std::process::id()));
        let secret = dir.join("creds");
        std::fs::create_dir_all(&secret).unwrap();
        std::fs::write(secret.join("security.protocol"), "s3cr3t-Value\n").unwrap();
        std::fs::write(secret.join("sasl.username"), "alice").unwrap();
        let (empty, creds) = (BTreeMap::new(), SecretRef { name: "creds".into() });
        let e = client_config(conn(&empty, Some(&creds), None), dir.to_str().unwrap()).unwrap_err().to_string();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(!e.contains("s3cr3t-Value"), "{e}");
        assert!(e.contains("`security.protocol` from Secret `creds`"), "{e}");
    }

    #[test]
    fn a_rejected_spec_property_is_named() {
        let props = BTreeMap::from([("no.such.property".to_owned(), "1".to_owned())]);
        let e = client_config(conn(&props, None, None), "/nonexistent").unwrap_err().to_string();
        assert!(e.contains("`no.such.property` in properties"), "{e}");
    }
}

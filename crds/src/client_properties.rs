//! Kafka client properties: which ones the operator applies in its own
//! process, and how a rejected one is reported without its value.
//!
//! A job's `properties` and the keys of its `secretRef` Secret configure the
//! workers' clients. The operator also opens a client, only to read partition
//! counts; it applies just the connection and authentication properties that
//! needs. Everything else — above all properties that load code or files
//! into the process (`plugin.library.paths`, `ssl.engine.location`,
//! `oauthbearer.token.endpoint.url`, the `*.location` files) — stays out of
//! the operator, so a StreamJob cannot make the operator load a library.

/// The properties the operator applies when it reads a topic's metadata.
pub const OPERATOR_CLIENT_PROPERTIES: &[&str] = &[
    "security.protocol",
    "sasl.mechanism",
    "sasl.mechanisms",
    "sasl.username",
    "sasl.password",
    "ssl.ca.pem",
    "ssl.certificate.pem",
    "ssl.key.pem",
    "ssl.key.password",
    "ssl.endpoint.identification.algorithm",
    "enable.ssl.certificate.verification",
    "client.dns.lookup",
    "broker.address.family",
    "socket.timeout.ms",
    "socket.connection.setup.timeout.ms",
];

/// Whether the operator applies `key` in its own process.
pub fn operator_applies(key: &str) -> bool {
    OPERATOR_CLIENT_PROPERTIES.contains(&key)
}

/// Where a client property came from, for error messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PropertyOrigin<'a> {
    /// `properties` in the job spec (the user wrote the value there).
    Spec,
    /// A key of the named Secret (`secretRef`): its value is never shown.
    Secret(&'a str),
}

/// The message for a property the Kafka client rejected. The client's own
/// text quotes the value (`Invalid value "…" for configuration property
/// "…"`), so every occurrence of the value is blanked — a Secret's value
/// must never reach a status message, an event, a log line or a metric.
pub fn rejected_property(origin: PropertyOrigin<'_>, key: &str, value: &str, client_error: &str) -> String {
    let reason = if value.is_empty() { client_error.to_owned() } else { client_error.replace(value, "<redacted>") };
    match origin {
        PropertyOrigin::Spec => format!("Kafka client property `{key}` in properties: {reason}"),
        PropertyOrigin::Secret(name) => {
            format!("Kafka client property `{key}` from Secret `{name}` (value not shown): {reason}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rejected_secret_value_is_never_quoted() {
        let m = rejected_property(
            PropertyOrigin::Secret("kafka-creds"),
            "sasl.mechanism",
            "hunter2",
            "Invalid value \"hunter2\" for configuration property \"sasl.mechanism\"",
        );
        assert!(!m.contains("hunter2"), "{m}");
        assert!(m.contains("`sasl.mechanism`") && m.contains("Secret `kafka-creds`"), "{m}");
    }

    #[test]
    fn the_operator_applies_no_property_that_loads_code_or_files() {
        for key in [
            "plugin.library.paths",
            "ssl.engine.location",
            "ssl.ca.location",
            "debug",
            "oauthbearer.token.endpoint.url",
        ] {
            assert!(!operator_applies(key), "{key}");
        }
        assert!(operator_applies("sasl.password"));
    }
}

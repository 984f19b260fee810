//! The operator's one request to a job's Schema Registry: `GET
//! <url>/subjects/<subject>/versions/<n|latest>`. The URL is the job
//! author's, so the request is made as if to a hostile server: the answer
//! is read up to [`MAX_ANSWER_BYTES`] and no further, a redirect is not
//! followed, and nothing of an answer's body reaches the job's status or
//! events (its status code and size do) — otherwise a job naming an
//! internal service would have the operator fetch it and publish the
//! answer to the job's author. The password goes only over `https://`
//! (`SchemaRegistrySpec::access_problem`), checked against the job's
//! `trustedCertificates` alone when it names some.

use std::time::Duration;

use sluice_crds::{RegistryAccess, SchemaReference, SubjectSchema, reasons};

use crate::validate::{Blocked, Invalid};

/// How long one request may take, answer included.
const TIMEOUT: Duration = Duration::from_secs(10);

/// The most bytes of an answer the operator reads: a schema is kilobytes;
/// an answer of gigabytes would otherwise be held in memory whole.
pub const MAX_ANSWER_BYTES: usize = sluice_crds::REGISTRY_MAX_ANSWER_BYTES;

/// The HTTP client for one job's registry: no redirects, and with
/// `trustedCertificates` those certificates as the only roots — a
/// registry the job pins to its own CA is not also accepted on a
/// certificate any public CA issued.
pub fn client(access: &RegistryAccess) -> Result<reqwest::Client, Blocked> {
    let mut builder = reqwest::Client::builder().timeout(TIMEOUT).redirect(reqwest::redirect::Policy::none());
    if !access.trusted_certificates.is_empty() {
        let mut roots = Vec::new();
        for pem in &access.trusted_certificates {
            let certificates = reqwest::Certificate::from_pem_bundle(pem.as_bytes())
                .map_err(|e| invalid(format!("spec.schemaRegistry.tls: a trusted certificate is not PEM ({e})")))?;
            if certificates.is_empty() {
                return Err(invalid("spec.schemaRegistry.tls: a trusted certificate holds no PEM certificate".into()));
            }
            roots.extend(certificates);
        }
        builder = builder.tls_certs_only(roots);
    }
    builder.build().map_err(|e| Blocked::Unavailable(registry_unreachable(format!("cannot make a client: {e}"))))
}

fn invalid(message: String) -> Blocked {
    Blocked::Invalid(Invalid { reason: reasons::INVALID_SPEC, message })
}

fn registry_unreachable(message: String) -> Invalid {
    Invalid { reason: reasons::REGISTRY_UNREACHABLE, message }
}

/// The registry at `url` did not give a usable answer: retried with backoff.
pub fn unavailable(url: &str, why: &str) -> Blocked {
    Blocked::Unavailable(registry_unreachable(format!("the schema registry at {url} did not answer: {why}")))
}

/// `GET <url>/subjects/<subject>/versions/<version|latest>`: the schema
/// with the schemas it references (fetched the same way, bounded by
/// [`sluice_crds::ReferenceWalk`]), `Ok(Err)` when the registry says it
/// has no such subject or version — or none for one of the references.
pub async fn fetch(
    client: &reqwest::Client,
    user: Option<&(String, String)>,
    url: &str,
    subject: &str,
    version: Option<u32>,
) -> Result<Result<SubjectSchema, String>, Blocked> {
    let (mut schema, references) = match get_version(client, user, url, subject, version).await? {
        Ok(found) => found,
        Err(why) => return Ok(Err(why)),
    };
    let mut walk = sluice_crds::ReferenceWalk::new(references);
    loop {
        let next = match walk.next_fetch() {
            Ok(Some(next)) => next,
            Ok(None) => break,
            Err(why) => return Ok(Err(format!("version {}: {why}", schema.version))),
        };
        match get_version(client, user, url, &next.subject, Some(next.version)).await? {
            Ok((referenced, nested)) => walk.fetched(referenced.text, nested),
            Err(why) => return Ok(Err(format!("version {}: {}: {why}", schema.version, next.describe()))),
        }
    }
    schema.references = walk.resolved();
    Ok(Ok(schema))
}

/// One `GET <url>/subjects/<subject>/versions/<version|latest>`: the
/// schema and the references it declares.
async fn get_version(
    client: &reqwest::Client,
    user: Option<&(String, String)>,
    url: &str,
    subject: &str,
    version: Option<u32>,
) -> Result<Result<(SubjectSchema, Vec<SchemaReference>), String>, Blocked> {
    let v = version.map_or_else(|| "latest".to_owned(), |v| v.to_string());
    let mut request = client
        .get(format!("{url}/subjects/{}/versions/{v}", sluice_crds::subject_path_segment(subject)))
        .header("Accept", "application/vnd.schemaregistry.v1+json, application/json");
    if let Some((user, password)) = user {
        request = request.basic_auth(user, Some(password));
    }
    let response = request.send().await.map_err(|e| unavailable(url, &sluice_crds::error_with_causes(&e)))?;
    let status = response.status();
    if status.is_redirection() {
        return Err(unavailable(
            url,
            &format!(
                "HTTP {status}: a redirect, which the operator does not follow (set spec.schemaRegistry.url to the \
                 registry's own address)"
            ),
        ));
    }
    if matches!(status.as_u16(), 401 | 403) {
        return Err(unavailable(
            url,
            &format!("HTTP {status}: the registry refused the credentials (spec.schemaRegistry.authentication)"),
        ));
    }
    let body = read_capped(response).await.map_err(|why| unavailable(url, &format!("HTTP {status}: {why}")))?;
    let size = body.len();
    if status.as_u16() == 404 {
        return match sluice_crds::registry_not_found_code(&body) {
            Some(40401) => Ok(Err(format!("the schema registry at {url} has no such subject"))),
            Some(_) => Ok(Err(format!("the schema registry at {url} has no version {v} of it"))),
            // An ingress, a proxy or a registry node not yet serving: an
            // outage, never "no such schema".
            None => Err(unavailable(
                url,
                &format!("HTTP {status} without the registry's error code ({size} bytes, not shown)"),
            )),
        };
    }
    if !status.is_success() {
        return Err(unavailable(url, &format!("HTTP {status} ({size} bytes, not shown)")));
    }
    let json: serde_json::Value = serde_json::from_slice(&body).map_err(|_| {
        unavailable(url, &format!("HTTP {status}: an answer that is not JSON ({size} bytes, not shown)"))
    })?;
    let number = |k: &str| json.get(k).and_then(serde_json::Value::as_u64).and_then(|n| u32::try_from(n).ok());
    let text = json.get("schema").and_then(serde_json::Value::as_str);
    let (Some(id), Some(version), Some(text)) = (number("id"), number("version"), text) else {
        return Err(unavailable(
            url,
            &format!("HTTP {status}: an answer without id, version and schema ({size} bytes, not shown)"),
        ));
    };
    let kind = json.get("schemaType").and_then(serde_json::Value::as_str).unwrap_or("AVRO");
    // The type goes into a message when it is not Avro: only a name.
    let kind = if kind.len() <= 32 && kind.bytes().all(|b| b.is_ascii_alphanumeric()) { kind } else { "unknown" };
    let references = sluice_crds::schema_references(&json);
    Ok(Ok((
        SubjectSchema { id, version, kind: kind.to_owned(), text: text.to_owned(), references: Vec::new() },
        references,
    )))
}

/// The answer's body, refused past [`MAX_ANSWER_BYTES`] — by its declared
/// length before anything is read, else as soon as what arrived passes it.
async fn read_capped(mut response: reqwest::Response) -> Result<Vec<u8>, String> {
    let too_large = || format!("an answer larger than {} MiB, the most the operator reads", MAX_ANSWER_BYTES >> 20);
    if response.content_length().is_some_and(|n| n > MAX_ANSWER_BYTES as u64) {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| format!("reading the answer: {e}"))? {
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// A hostile HTTP server on 127.0.0.1 for tests: answers every request as
/// the test says, with hand-written HTTP, and records what was asked.
#[cfg(test)]
pub(crate) mod test_server {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// What the server sends back.
    #[derive(Debug)]
    pub enum Answer {
        /// These bytes, whole (status line, headers and body).
        Raw(String),
        /// This head, then zeros until the client hangs up (or 8 GiB),
        /// as `chunked` transfer encoding when the head says so.
        Endless { head: String, chunked: bool },
    }

    impl Answer {
        pub fn json(status: u16, body: &str) -> Self {
            Self::with_type(status, "application/json", body)
        }

        pub fn with_type(status: u16, content_type: &str, body: &str) -> Self {
            Self::Raw(format!(
                "HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            ))
        }
    }

    #[derive(Debug)]
    pub struct Server {
        pub url: String,
        requests: Arc<Mutex<Vec<String>>>,
        written: Arc<AtomicU64>,
    }

    impl Server {
        /// The paths asked for, in order.
        pub fn requests(&self) -> Vec<String> {
            self.requests.lock().unwrap().clone()
        }

        /// Body bytes the server managed to write.
        pub fn written(&self) -> u64 {
            self.written.load(Ordering::Relaxed)
        }
    }

    pub async fn serve(answer: impl Fn(&str) -> Answer + Send + Sync + 'static) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (requests, written) = (Arc::new(Mutex::new(Vec::new())), Arc::new(AtomicU64::new(0)));
        let (asked, sent, answer) = (requests.clone(), written.clone(), Arc::new(answer));
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let (asked, sent, answer) = (asked.clone(), sent.clone(), answer.clone());
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 65_536 {
                        match conn.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let head = String::from_utf8_lossy(&head);
                    let path = head.split(' ').nth(1).unwrap_or("").to_owned();
                    asked.lock().unwrap().push(path.clone());
                    match answer(&path) {
                        Answer::Raw(text) => {
                            let _ = conn.write_all(text.as_bytes()).await;
                        }
                        Answer::Endless { head, chunked } => {
                            if conn.write_all(head.as_bytes()).await.is_err() {
                                return;
                            }
                            let zeros = vec![b'0'; 65_536];
                            let chunk = if chunked {
                                [format!("{:x}\r\n", zeros.len()).into_bytes(), zeros, b"\r\n".to_vec()].concat()
                            } else {
                                zeros
                            };
                            while sent.load(Ordering::Relaxed) < 8 << 30 {
                                if conn.write_all(&chunk).await.is_err() {
                                    return;
                                }
                                sent.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                            }
                        }
                    }
                    let _ = conn.shutdown().await;
                });
            }
        });
        Server { url, requests, written }
    }
}

#[cfg(test)]
mod tests {
    use super::test_server::{Answer, serve};
    use super::*;

    async fn get(url: &str) -> Result<Result<SubjectSchema, String>, Blocked> {
        fetch(&client(&RegistryAccess::default()).unwrap(), None, url, "orders-value", None).await
    }

    fn outage(r: Result<Result<SubjectSchema, String>, Blocked>) -> String {
        match r {
            Err(Blocked::Unavailable(e)) => {
                assert_eq!(e.reason, reasons::REGISTRY_UNREACHABLE);
                e.message
            }
            other => panic!("not an outage: {other:?}"),
        }
    }

    /// An answer of gigabytes, declared or streamed without a length, is
    /// refused once past the cap, having read no more than that: it drove
    /// a client to 12.6 GB before.
    #[tokio::test]
    async fn a_huge_answer_is_refused_past_the_cap_without_being_read() {
        for (head, chunked) in [
            ("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5368709120\r\n\r\n", false),
            ("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n", true),
            ("HTTP/1.1 500 Oops\r\nTransfer-Encoding: chunked\r\n\r\n", true),
        ] {
            let server = serve(move |_| Answer::Endless { head: head.to_owned(), chunked }).await;
            let message = outage(get(&server.url).await);
            assert!(message.contains("larger than 4 MiB"), "{message}");
            // What the kernel's socket buffers took besides the cap.
            assert!(server.written() < 64 << 20, "{} bytes sent before the client hung up", server.written());
        }
    }

    /// A redirect is an error naming its status, not followed: the
    /// target is never asked, and the Location is not repeated.
    #[tokio::test]
    async fn a_redirect_is_refused_not_followed() {
        let server = serve(|path| {
            if path.starts_with("/subjects") {
                Answer::Raw(
                    "HTTP/1.1 302 Found\r\nLocation: /internal/admin?token=s3cret\r\nContent-Length: 0\r\n\r\n".into(),
                )
            } else {
                Answer::json(200, r#"{"id":1,"version":1,"schema":"{}"}"#)
            }
        })
        .await;
        let message = outage(get(&server.url).await);
        assert!(message.contains("HTTP 302 Found") && message.contains("does not follow"), "{message}");
        assert!(!message.contains("s3cret") && !message.contains("/internal"), "{message}");
        assert_eq!(server.requests(), ["/subjects/orders-value/versions/latest"]);
    }

    /// Whatever a server answers, its body never reaches the message that
    /// becomes the job's status and event: a job naming an internal
    /// service's URL once read its token there.
    #[tokio::test]
    async fn an_answer_s_body_never_reaches_the_message() {
        let secret = "INTERNAL-SECRET-TOKEN=abc";
        for (status, content_type, body) in [
            (500, "text/plain", format!("{secret}\n")),
            (503, "application/json", format!(r#"{{"error_code":50301,"message":"{secret}"}}"#)),
            (200, "application/json", format!(r#"{{"admin":"{secret}"}}"#)),
            (200, "text/html", format!("<html>{secret}</html>")),
            (404, "text/html", format!("<html>{secret}</html>")),
            (400, "application/json", format!(r#"{{"error_code":40001,"message":"{secret}"}}"#)),
        ] {
            let answer = Answer::with_type(status, content_type, &body);
            let Answer::Raw(text) = answer else { unreachable!() };
            let server = serve(move |_| Answer::Raw(text.clone())).await;
            let message = outage(get(&server.url).await);
            assert!(!message.contains("INTERNAL-SECRET") && !message.contains("abc"), "{status}: {message}");
            assert!(message.contains(&format!("HTTP {status}")), "{message}");
            assert!(message.contains(&format!("{} bytes, not shown", body.len())), "{message}");
        }
    }

    /// Only the registry's own "not found" (its JSON `error_code`) means
    /// the job names a subject or version that is not there; any other 404
    /// (an ingress's HTML page, a node not yet serving) is an outage,
    /// retried, never a verdict on the job.
    #[tokio::test]
    async fn only_the_registry_s_not_found_code_is_no_such_subject() {
        let cases = [
            (Answer::with_type(404, "text/html", "<html>404 Not Found</html>"), None),
            (Answer::json(404, r#"{"message":"HTTP 404 Not Found"}"#), None),
            (
                Answer::json(404, r#"{"error_code":40401,"message":"Subject 'orders-value' not found."}"#),
                Some("no such subject"),
            ),
            (Answer::json(404, r#"{"error_code":40402,"message":"Version 9 not found."}"#), Some("no version latest")),
        ];
        for (answer, verdict) in cases {
            let Answer::Raw(text) = answer else { unreachable!() };
            let server = serve(move |_| Answer::Raw(text.clone())).await;
            let r = get(&server.url).await;
            match verdict {
                None => assert!(outage(r).contains("HTTP 404 Not Found without the registry's error code")),
                Some(says) => {
                    let Ok(Err(e)) = r else { panic!("{r:?}") };
                    assert!(e.contains(says), "{e}");
                }
            }
        }
        let server =
            serve(|_| Answer::json(200, r#"{"id":4,"version":2,"schema":"\"long\"","schemaType":"AVRO"}"#)).await;
        let got = get(&server.url).await.unwrap().unwrap();
        assert_eq!((got.id, got.version, got.kind.as_str(), got.text.as_str()), (4, 2, "AVRO", "\"long\""));
    }

    /// `trustedCertificates` replace the built-in roots rather than adding
    /// to them. Run in a child process whose built-in store
    /// (`SSL_CERT_FILE`) holds the CA that signed the server's
    /// certificate: without trusted certificates the server is accepted
    /// (so the store is in use), with the job's own CA it is refused.
    #[test]
    fn trusted_certificates_replace_the_built_in_roots() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/registry-tls");
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "registry_http::tests::tls_child", "--ignored", "--nocapture", "--test-threads=1"])
            .env("SSL_CERT_FILE", format!("{dir}/system-ca.crt"))
            .env("SSL_CERT_DIR", format!("{dir}/no-such-dir"))
            .env("SLUICE_TLS_CHILD", "1")
            .output()
            .unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && text.contains("1 passed"), "{text}");
    }

    /// The child of [`trusted_certificates_replace_the_built_in_roots`].
    #[test]
    #[ignore = "run by trusted_certificates_replace_the_built_in_roots, in a process of its own"]
    fn tls_child() {
        if std::env::var_os("SLUICE_TLS_CHILD").is_none() {
            return;
        }
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/registry-tls");
        let read = |f: &str| std::fs::read(format!("{dir}/{f}")).unwrap();
        let identity = native_tls::Identity::from_pkcs8(&read("server.crt"), &read("server.key")).unwrap();
        let acceptor = native_tls::TlsAcceptor::new(identity).unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("https://{}", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let Ok(mut tls) = acceptor.accept(conn) else { continue };
                let mut buf = [0u8; 4096];
                let _ = std::io::Read::read(&mut tls, &mut buf);
                let body = r#"{"id":1,"version":1,"schema":"\"long\""}"#;
                let answer =
                    format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
                let _ = std::io::Write::write_all(&mut tls, answer.as_bytes());
                let _ = tls.shutdown();
            }
        });
        let pem = |f: &str| String::from_utf8(read(f)).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let try_with = |certificates: Vec<String>| {
            let access = RegistryAccess { basic_auth: None, trusted_certificates: certificates };
            runtime.block_on(fetch(&client(&access).unwrap(), None, &url, "s", None))
        };
        assert!(matches!(try_with(Vec::new()), Ok(Ok(_))), "the built-in store signs the server");
        assert!(matches!(try_with(vec![pem("system-ca.crt")]), Ok(Ok(_))));
        let refused = outage(try_with(vec![pem("job-ca.crt")]));
        assert!(refused.contains("certificate verify failed"), "{refused}");
    }
}

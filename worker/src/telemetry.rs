//! Logs and traces. Logs go to stderr (stdout carries results in local
//! runs), as text or JSON. When an OTLP endpoint is configured, spans are
//! exported over OTLP/HTTP with `tracing-opentelemetry`, sampled per batch
//! (each batch is one root span, kept with probability `sample_ratio`).

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

use crate::Error;

/// Keeps the trace exporter alive; flushes it when dropped.
#[derive(Debug, Default)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(p) = self.provider.take() {
            let _ = p.shutdown();
        }
    }
}

/// Installs the global subscriber. `json` selects JSON log lines.
pub fn init(json: bool, otlp_endpoint: Option<&str>, sample_ratio: f64) -> Result<Telemetry, Error> {
    let filter = EnvFilter::try_from_env("SLUICE_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new("info,rdkafka=warn"));
    // Colour only for a person at a terminal: a pipe, a file or a log
    // collector gets plain text (and `NO_COLOR` turns it off anyway).
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr()) && std::env::var_os("NO_COLOR").is_none();
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(ansi);
    let mut layers: Vec<Box<dyn Layer<Registry> + Send + Sync>> =
        vec![if json { fmt.json().boxed() } else { fmt.boxed() }];
    let mut telemetry = Telemetry::default();
    if let Some(endpoint) = otlp_endpoint {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(format!("{}/v1/traces", endpoint.trim_end_matches('/')))
            .build()
            .map_err(|e| Error::Config(format!("worker.otlpEndpoint {endpoint}: {e}")))?;
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(sample_ratio))))
            .with_resource(Resource::builder().with_service_name("sluice-worker").build())
            .build();
        let tracer = provider.tracer("sluice-worker");
        telemetry.provider = Some(provider);
        layers.push(tracing_opentelemetry::layer().with_tracer(tracer).boxed());
    }
    tracing_subscriber::registry()
        .with(layers)
        .with(filter)
        .try_init()
        .map_err(|e| Error::Internal(format!("logging already initialised: {e}")))?;
    Ok(telemetry)
}

//! `sluice-operator`: reconciles StreamJobs into running Sluice workers.

use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::events::{Recorder, Reporter};
use kube::{Api, Client};
use sluice_operator::controller;
use sluice_operator::desired::OperatorSettings;
use sluice_operator::leader::{self, LeaderElector};
use sluice_operator::metrics::Metrics;
use sluice_operator::reconcile::Context;

#[derive(Parser, Debug)]
#[command(name = "sluice-operator", version, about = "Reconciles Sluice StreamJobs into workers")]
struct Args {
    /// Namespaces to watch (repeat, or comma-separate); all when empty.
    #[arg(long = "namespace", env = "SLUICE_WATCH_NAMESPACES", value_delimiter = ',')]
    namespaces: Vec<String>,
    /// Worker image for jobs that do not set spec.image.
    #[arg(long, env = "SLUICE_WORKER_IMAGE", default_value = "ghcr.io/sluice-dev/sluice:0.1.0")]
    worker_image: String,
    #[arg(long, default_value = "0.0.0.0")]
    http_address: String,
    /// Port of /metrics, /healthz, /readyz.
    #[arg(long, default_value_t = 8080)]
    http_port: u16,
    /// Elect a leader with a Lease so several replicas can run.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    leader_election: bool,
    #[arg(long, default_value = "sluice-operator")]
    lease_name: String,
    /// Namespace of the Lease (default: the pod's namespace).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    lease_namespace: String,
    /// Seconds allowed to read topic metadata from Kafka.
    #[arg(long, default_value_t = 10)]
    kafka_timeout_seconds: u64,
    /// Seconds between looks at a running job: its source topics'
    /// partition counts (Kafka sends no events) and its workers' health.
    #[arg(long, env = "SLUICE_RESYNC_SECONDS", default_value_t = 60)]
    resync_seconds: u64,
    /// Log format of the workers: json or text.
    #[arg(long, default_value = "json", value_parser = ["json", "text"])]
    worker_log_format: String,
    /// Log filter of the workers (their SLUICE_LOG), e.g. `info,rdkafka=debug`.
    #[arg(long, env = "SLUICE_WORKER_LOG_FILTER")]
    worker_log_filter: Option<String>,
    /// OTLP/HTTP endpoint the workers export traces to.
    #[arg(long, env = "SLUICE_WORKER_OTLP_ENDPOINT")]
    worker_otlp_endpoint: Option<String>,
    /// Log format of the operator: json or text.
    #[arg(long, default_value = "text", value_parser = ["json", "text"])]
    log_format: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,kube=warn,rdkafka=warn"));
    // Colour only for a person at a terminal: a pipe or a log collector
    // gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr()) && std::env::var_os("NO_COLOR").is_none();
    let fmt = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    if args.log_format == "json" {
        fmt.json().init()
    } else {
        fmt.init()
    }

    let client = Client::try_default().await?;
    let metrics = Metrics::new()?;
    let listener = tokio::net::TcpListener::bind((args.http_address.as_str(), args.http_port)).await?;
    tracing::info!(address = %listener.local_addr()?, "serving /metrics /healthz /readyz");
    let app = sluice_operator::http::router(metrics.clone());
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "HTTP server stopped");
        }
    });
    let identity = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| format!("sluice-operator-{}", std::process::id()));
    let ctx = Arc::new(Context {
        backoff: sluice_operator::backoff::Backoff::default(),
        recorder: Recorder::new(
            client.clone(),
            Reporter { controller: "sluice-operator".into(), instance: Some(identity.clone()) },
        ),
        client: client.clone(),
        settings: OperatorSettings {
            worker_image: args.worker_image.clone(),
            worker_log_format: args.worker_log_format.clone(),
            worker_log_filter: args.worker_log_filter.clone(),
            otlp_endpoint: args.worker_otlp_endpoint.clone(),
        },
        metrics: metrics.clone(),
        kafka_timeout: Duration::from_secs(args.kafka_timeout_seconds),
        resync: Duration::from_secs(args.resync_seconds.max(1)),
        autoscaler: sluice_operator::measure::Autoscaler::default(),
    });
    tracing::info!(namespaces = ?args.namespaces, leader_election = args.leader_election, %identity, "starting");
    if !args.leader_election {
        metrics.leader.set(1);
        controller::run(ctx, args.namespaces).await;
        return Ok(());
    }
    let elector = LeaderElector::new(
        Api::<Lease>::namespaced(client, &args.lease_namespace),
        &args.lease_name,
        &identity,
        Duration::from_secs(15),
    );
    let mut shutdown = Box::pin(tokio::signal::ctrl_c());
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        // Campaign until this replica holds the lease.
        loop {
            match elector.try_lead().await {
                Ok(true) => break,
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, "leader election"),
            }
            tokio::select! {
                _ = &mut shutdown => return Ok(()),
                _ = term.recv() => return Ok(()),
                () = tokio::time::sleep(elector.renew_every()) => {}
            }
        }
        tracing::info!(%identity, "became leader");
        metrics.leader.set(1);
        // Stop reconciling before an unrenewed lease can expire and a
        // standby take it, so two replicas never act at once (client-go's
        // renew deadline); every renewal attempt is bounded by it.
        let renew = leader::keep_leading(elector.renew_every(), elector.renew_deadline(), || elector.try_lead());
        tokio::select! {
            () = controller::run(Arc::clone(&ctx), args.namespaces.clone()) => {
                elector.release().await;
                return Ok(());
            }
            why = renew => {
                metrics.leader.set(0);
                metrics.forget_jobs();
                tracing::warn!(?why, "stepped down as leader; standing by");
            }
        }
    }
}

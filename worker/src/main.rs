//! `sluice-worker`: runs a Sluice job.
//!
//! * `serve --config FILE` — what a worker pod runs (config from the
//!   operator's ConfigMap, ordinal from the pod name).
//! * `run -f JOB.yaml [--bounded]` — the whole job in this process, on the
//!   local cores: the same manifest a user would `kubectl apply`.
//! * `validate -f JOB.yaml` — check the manifest and its SQL, print the plan
//!   (`-f -`: from standard input; `--output json` for CI).
//! * `datagen` — produce a seed scenario's records to a Kafka topic.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use sluice_crds::{DatagenScenario, WorkerConfig, WorkerSettings};
use sluice_worker::config;
use sluice_worker::metrics::Metrics;
use sluice_worker::runtime::{Health, RunOptions, run_job};

/// `println!` that survives a closed stdout (`sluice-worker validate … |
/// head`): output with nowhere to go is not worth a panic.
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($t)*);
    }};
}

/// `eprintln!` that survives a closed stderr (`sluice-worker run … 2>&1 |
/// head`).
macro_rules! say {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($t)*);
    }};
}

#[derive(Parser, Debug)]
#[command(name = "sluice-worker", version, about = "Streaming SQL over Kafka: one pinned engine per core")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run this pod's share of a job (config from the mounted ConfigMap).
    Serve {
        #[arg(long, default_value = sluice_crds::contract::CONFIG_PATH)]
        config: String,
        /// Stop at the end offsets seen at start instead of running forever.
        #[arg(long)]
        bounded: bool,
    },
    /// Run a StreamJob manifest locally, on this machine's cores.
    Run {
        /// The StreamJob manifest (YAML), as `kubectl apply -f` takes it;
        /// `-` reads it from standard input.
        #[arg(short = 'f', long = "file")]
        file: String,
        /// Process what the sources hold now, close every window, exit.
        #[arg(long)]
        bounded: bool,
        /// Engine threads (default: workers × coresPerWorker, at most the local cores).
        #[arg(long)]
        cores: Option<i32>,
        /// Port for /metrics, /healthz, /readyz (0 = any free port).
        #[arg(long, default_value_t = 0)]
        http_port: u16,
        /// Directory holding referenced Secrets (one directory per Secret, one file per key).
        #[arg(long, default_value = "./secrets")]
        secrets_dir: String,
        /// Consumer group for Kafka sources (default sluice.<namespace>.<name>).
        #[arg(long)]
        group: Option<String>,
        /// Do not pin engine threads to cores.
        #[arg(long)]
        no_pin: bool,
        /// Keep a copy of each core's checkpoints in this directory, so a
        /// restart restores from disk instead of the state topic.
        #[arg(long)]
        state_dir: Option<String>,
    },
    /// Check a StreamJob manifest and its SQL without running it.
    Validate {
        /// The StreamJob manifest (YAML); `-` reads it from standard input.
        #[arg(short = 'f', long = "file")]
        file: String,
        /// `text` (the plan, for people) or `json` (one object, for CI and
        /// scripts: `ok`, the error or each stage).
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
        /// Directory holding referenced Secrets (the registry's credentials,
        /// for columns read from a subject).
        #[arg(long, default_value = "./secrets")]
        secrets_dir: String,
    },
    /// Show how a StreamJob runs: stages, operators, keys, predicates,
    /// windows, joins, state and topics, in the query's own names.
    Explain {
        /// The StreamJob manifest (YAML); `-` reads it from standard input.
        #[arg(short = 'f', long = "file")]
        file: String,
        /// Partitions to plan each Kafka source topic with (explain does
        /// not connect to Kafka; a generator source has its own count).
        #[arg(long, default_value_t = 2)]
        partitions: i32,
        /// Directory holding referenced Secrets (the registry's credentials,
        /// for columns read from a subject).
        #[arg(long, default_value = "./secrets")]
        secrets_dir: String,
    },
    /// Run a StreamJob's query against its real source topics and print
    /// result rows as they come: a throwaway consumer group that commits
    /// nothing; no sink, state, dead-letter or repartition topic written
    /// (stages exchange in process). Ctrl-C, or `--limit`, ends it.
    Preview {
        /// The StreamJob manifest (YAML); `-` reads it from standard input.
        #[arg(short = 'f', long = "file")]
        file: String,
        /// Stop after printing this many result rows.
        #[arg(long)]
        limit: Option<u64>,
        /// Where to start each source topic: `earliest`, `latest`, or an
        /// RFC 3339 time (`2026-11-28T09:00:00Z`); default: each source's
        /// `startFrom`.
        #[arg(long)]
        from: Option<String>,
        /// Engine threads (default: the job's workers × coresPerWorker, at most the local cores).
        #[arg(long)]
        cores: Option<i32>,
        /// Directory holding referenced Secrets (one directory per Secret, one file per key).
        #[arg(long, default_value = "./secrets")]
        secrets_dir: String,
    },
    /// Print the StreamJob CustomResourceDefinition (YAML) this build
    /// reads: `sluice-worker crd | kubectl apply -f -`.
    Crd,
    /// Produce records of a seed scenario or of Nexmark to a Kafka topic (tests, benchmarks).
    Datagen {
        /// orders, market-data, trades, nexmark-person, nexmark-auction or nexmark-bid.
        #[arg(long, value_parser = parse_scenario)]
        scenario: DatagenScenario,
        /// How many records to produce.
        #[arg(long)]
        records: u64,
        /// The Kafka cluster: host:port[,host:port…].
        #[arg(long)]
        bootstrap: String,
        /// The topic to produce to (it must exist: its partition count is the data's).
        #[arg(long)]
        topic: String,
        /// Columns whose values form the record key (the topic's partitioning).
        #[arg(long, value_delimiter = ',')]
        key: Vec<String>,
        /// Records per second (0 = as fast as possible).
        #[arg(long, default_value_t = 0)]
        rate: u64,
        /// Start at this record index.
        #[arg(long, default_value_t = 0)]
        start: u64,
        /// Record timestamps: `now` (the time of producing) or `event` (the record's own event time).
        #[arg(long, value_enum, default_value_t = Timestamps::Now)]
        timestamps: Timestamps,
    },
}

/// How `validate` reports.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Output {
    Text,
    Json,
}

/// The Kafka timestamps `datagen` gives its records.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Timestamps {
    Now,
    Event,
}

fn parse_scenario(s: &str) -> Result<DatagenScenario, String> {
    match s.to_ascii_lowercase().replace(['-', '_'], "").as_str() {
        "orders" => Ok(DatagenScenario::Orders),
        "marketdata" => Ok(DatagenScenario::MarketData),
        "trades" => Ok(DatagenScenario::Trades),
        "nexmarkperson" => Ok(DatagenScenario::NexmarkPerson),
        "nexmarkauction" => Ok(DatagenScenario::NexmarkAuction),
        "nexmarkbid" => Ok(DatagenScenario::NexmarkBid),
        _ => Err(format!(
            "unknown scenario {s} (orders, market-data, trades, nexmark-person, nexmark-auction, nexmark-bid)"
        )),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve { config, bounded } => serve(&config, bounded),
        Command::Run { file, bounded, cores, http_port, secrets_dir, group, no_pin, state_dir } => {
            let settings = WorkerSettings {
                http_address: "127.0.0.1".into(),
                http_port,
                secrets_dir,
                consumer_group: group,
                pin_cores: !no_pin,
                state_dir,
                ..WorkerSettings::default()
            };
            let (file, text) = match read_manifest(&file) {
                Ok(t) => t,
                Err(e) => return fail(&e),
            };
            let _telemetry = init_telemetry(false, None);
            match config::from_manifest(&text, cores, settings) {
                Ok(c) => {
                    // The query's errors at their place in the file (the
                    // worker plans again, for the partitions it finds; a
                    // source whose columns come from a registry is planned
                    // there only, once they are read).
                    let most = c.partitions.iter().map(|p| p.partitions).max().unwrap_or(1);
                    if c.spec.sources.iter().all(|s| s.schema.registry.is_none())
                        && let Err(e) = sluice_sql::plan_dataflow(&c.spec.sql, &c.spec.sources, most)
                    {
                        return fail(&format!("{file}: {}", in_file(file, &text, &e)));
                    }
                    execute(c, bounded, true, None)
                }
                Err(e) => fail(&format!("{file}: {}", in_manifest(file, e))),
            }
        }
        Command::Preview { file, limit, from, cores, secrets_dir } => {
            preview(&file, limit, from.as_deref(), cores, secrets_dir)
        }
        Command::Validate { file, output, secrets_dir } => validate(&file, output, &secrets_dir),
        Command::Crd => match sluice_crds::crd_yaml() {
            Ok(yaml) => {
                out!("{}", yaml.trim_end());
                ExitCode::SUCCESS
            }
            Err(e) => fail(&format!("cannot render the CRD: {e}")),
        },
        Command::Explain { file, partitions, secrets_dir } => {
            let (name, text) = match read_manifest(&file) {
                Ok(t) => t,
                Err(e) => return fail(&e),
            };
            match check(name, &text, secrets_dir.as_str(), Some(partitions)).and_then(|c| explained(&c)) {
                Ok(plan) => {
                    out!("{plan}");
                    ExitCode::SUCCESS
                }
                Err(e) => fail(&e),
            }
        }
        Command::Datagen { scenario, records, bootstrap, topic, key, rate, start, timestamps } => {
            let _telemetry = init_telemetry(false, None);
            match sluice_worker::produce::produce(
                scenario,
                start,
                records,
                &bootstrap,
                &topic,
                &key,
                rate,
                timestamps == Timestamps::Event,
            ) {
                Ok(summary) => {
                    say!("{summary}");
                    ExitCode::SUCCESS
                }
                Err(e) => fail(&e.to_string()),
            }
        }
    }
}

/// A YAML error's frame, naming the manifest (`--> job.yaml:15:13`)
/// where the parser names its `<input>`.
fn in_manifest(file: &str, message: impl std::fmt::Display) -> String {
    message.to_string().replace("--> <input>:", &format!("--> {file}:"))
}

fn fail(message: &str) -> ExitCode {
    say!("sluice-worker: error: {message}");
    ExitCode::FAILURE
}

fn init_telemetry(json: bool, otlp: Option<&str>) -> Option<sluice_worker::telemetry::Telemetry> {
    match sluice_worker::telemetry::init(json, otlp, 0.01) {
        Ok(t) => Some(t),
        Err(e) => {
            say!("sluice-worker: telemetry disabled: {e}");
            None
        }
    }
}

fn serve(path: &str, bounded: bool) -> ExitCode {
    let expected = std::env::var(sluice_crds::EXPECTED_CONFIG_HASH_ENV).ok();
    // The wait for the current config can last until the kubelet refreshes
    // the mount; a pod deleted meanwhile (a rescale replacing it) must exit
    // cleanly on SIGTERM, having consumed nothing.
    let waiter = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => return fail(&format!("cannot start the config reader: {e}")),
    };
    let read = waiter.block_on(async {
        tokio::select! {
            text = config::read_current(path, expected.as_deref(), Duration::from_secs(1)) => Some(text),
            () = wait_for_signal() => None,
        }
    });
    drop(waiter);
    let Some(text) = read else {
        say!("sluice-worker: terminated while waiting for the current config; nothing was consumed");
        return ExitCode::SUCCESS;
    };
    let config = match text.and_then(|text| config::parse_layered(path, &text, config::process_env())) {
        Ok(c) => c,
        Err(e) => return fail(&e.to_string()),
    };
    let _telemetry = init_telemetry(config.worker.log_format == "json", config.worker.otlp_endpoint.as_deref());
    execute(config, bounded, false, None)
}

/// One stage of a validated plan, as `validate` reports it.
#[derive(serde::Serialize)]
struct StageReport {
    stage: usize,
    input: String,
    operator: &'static str,
    output: String,
    emit: String,
    columns: Vec<String>,
    key: Vec<String>,
}

/// The manifest at `file` (`-`: standard input) and the name to report it by.
fn read_manifest(file: &str) -> Result<(&str, String), String> {
    let name = if file == "-" { "<stdin>" } else { file };
    let text = if file == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text).map(|_| text)
    } else {
        std::fs::read_to_string(file)
    };
    text.map(|t| (name, t)).map_err(|e| format!("cannot read {name}: {e}"))
}

fn validate(file: &str, output: Output, secrets_dir: &str) -> ExitCode {
    let checked = read_manifest(file).and_then(|(name, text)| check(name, &text, secrets_dir, None));
    let name = if file == "-" { "<stdin>" } else { file };
    match (checked, output) {
        (Ok(checked), Output::Text) => match explained(&checked) {
            Ok(plan) => {
                out!("{name}: ok\n{plan}");
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e),
        },
        (Err(e), Output::Text) => fail(&e),
        (result, Output::Json) => {
            let ok = result.is_ok();
            let report = match result {
                Ok(checked) => {
                    serde_json::json!({ "file": name, "ok": true, "stages": stage_reports(&checked.dataflow) })
                }
                Err(e) => serde_json::json!({ "file": name, "ok": false, "error": e }),
            };
            out!("{report}");
            if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
        }
    }
}

/// An SQL error at its place in the manifest file: the line and column of
/// `spec.sql` (a `|` block or a one-line plain value) become the file's,
/// with a frame of that line, as YAML errors are shown; the SQL's own
/// coordinates when the value is written another way.
fn in_file(file: &str, text: &str, e: &sluice_plan::SqlError) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let at = lines.iter().position(|l| l.trim_start().starts_with("sql:")).and_then(|i| {
        let value = lines[i].trim_start()["sql:".len()..].trim();
        let (line, column) = (usize::try_from(e.line).ok()?, usize::try_from(e.column).ok()?);
        if line == 0 {
            return None;
        }
        if value.starts_with('|') && value[1..].chars().all(|c| c == '-' || c == '+' || c.is_ascii_digit()) {
            let first = lines[i + 1..].iter().find(|l| !l.trim().is_empty())?;
            let indent = first.len() - first.trim_start().len();
            Some((i + 1 + line, indent + column))
        } else if line == 1 && !value.is_empty() && !value.starts_with(['"', '\'', '>', '|']) {
            Some((i + 1, lines[i].len() - value.len() + column))
        } else {
            None
        }
    });
    let Some((line, column)) = at.filter(|(line, _)| *line <= lines.len()) else { return e.to_string() };
    let code = lines[line - 1];
    let width = line.to_string().len();
    format!(
        "line {line}, column {column}: {}\n{:width$}--> {file}:{line}:{column}\n{:width$} |\n{line} | {code}\n{:width$} | {:>column$}",
        e.message, "", "", "", "^"
    )
}

/// A manifest that passed its checks: the job as a worker runs it (the
/// columns of registry subjects derived) and its plan.
struct Checked {
    config: WorkerConfig,
    dataflow: sluice_plan::Dataflow,
}

/// A manifest's checks, and its plan, for `partitions` per Kafka source
/// (default: a generator source's count, or 2 — a query keyed differently
/// from its source then shows the stage boundary it will have on a
/// cluster).
fn check(file: &str, text: &str, secrets_dir: &str, partitions: Option<i32>) -> Result<Checked, String> {
    let job: sluice_crds::StreamJob =
        serde_saphyr::from_str(text).map_err(|e| format!("{file}: not a valid StreamJob: {}", in_manifest(file, e)))?;
    // The user's spec first (a registry subject's settings), then, with
    // the subject's columns derived, the spec as a worker runs it.
    job.spec.validate().map_err(|e| format!("{file}: {e}"))?;
    let mut job = job;
    job.spec = with_registry_columns(&job.spec, secrets_dir, "  ").map_err(|e| format!("{file}: {e}"))?;
    job.spec.validate().map_err(|e| format!("{file}: {e}"))?;
    let generated = job.spec.sources.iter().find_map(|s| s.datagen.as_ref().map(|d| d.partitions));
    let planned = partitions.or(generated).unwrap_or(2);
    let dataflow = sluice_sql::plan_dataflow(&job.spec.sql, &job.spec.sources, planned)
        .map_err(|e| format!("{file}: {}", in_file(file, text, &e)))?;
    if let Some(last) = dataflow.stages.last()
        && let Some(problem) = last.plan.results_problem(&job.spec.sink)
    {
        return Err(format!("{file}: {problem}"));
    }
    let partitions = job
        .spec
        .sources
        .iter()
        .map(|s| sluice_crds::SourcePartitions {
            source: s.name.clone(),
            partitions: match (&s.datagen, &s.file) {
                (Some(d), _) => d.partitions,
                (None, Some(_)) => 1,
                (None, None) => planned,
            },
        })
        .collect();
    let config = WorkerConfig {
        job: sluice_crds::JobIdentity {
            name: job.metadata.name.clone().unwrap_or_else(|| "unnamed".to_owned()),
            namespace: job.metadata.namespace.clone().unwrap_or_else(|| "default".to_owned()),
        },
        spec: job.spec,
        partitions,
        assignment_epoch: 0,
        earlier_slots: Vec::new(),
        worker: WorkerSettings::default(),
    };
    Ok(Checked { config, dataflow })
}

fn explained(checked: &Checked) -> Result<String, String> {
    sluice_worker::explain::explain(&checked.config, &checked.dataflow).map_err(|e| e.to_string())
}

/// Each stage's plan in brief, then the branches beside it, for
/// `validate --output json`.
fn stage_reports(dataflow: &sluice_plan::Dataflow) -> Vec<StageReport> {
    let mut rows = Vec::new();
    for (s, st) in dataflow.stages.iter().enumerate() {
        rows.push((s, &st.plan, st.output, s == 0));
        rows.extend(dataflow.beside(s).map(|b| (s, &b.plan, st.output, !b.reads_exchange)));
    }
    rows.into_iter()
        .map(|(stage, plan, output, reads_source)| StageReport {
            stage,
            input: if reads_source {
                format!("source {}", plan.source.name)
            } else {
                format!("repartition topic {stage}")
            },
            operator: match &plan.operator {
                sluice_plan::OperatorPlan::Stateless => "filter/project",
                sluice_plan::OperatorPlan::Aggregate(a) if a.window.is_some() => "windowed aggregation",
                sluice_plan::OperatorPlan::Aggregate(a) if a.retract.is_some() => "aggregation of signed rows",
                sluice_plan::OperatorPlan::Aggregate(_) => "aggregation",
                sluice_plan::OperatorPlan::Rows(_) => "ROWS window",
                sluice_plan::OperatorPlan::TopN(_) => "top-N per key",
                sluice_plan::OperatorPlan::Merge(_) => "merge of partial aggregates",
                sluice_plan::OperatorPlan::Join(_) => "interval join",
                sluice_plan::OperatorPlan::TableJoin(_) => "stream–table join",
                sluice_plan::OperatorPlan::Changelog(_) => "changelog of a table (old row back, new row in)",
            },
            output: match output {
                sluice_plan::StageOutput::Sink => "the sink".to_owned(),
                sluice_plan::StageOutput::Exchange => format!("repartition topic {}, by key", stage + 1),
            },
            emit: format!("{:?}", plan.emit),
            columns: plan.outputs.iter().map(|o| o.name.clone()).collect(),
            key: plan.keys.iter().map(|o| o.name.clone()).collect(),
        })
        .collect()
}

/// Runs a job with its HTTP endpoint and signal handling; `local` prints
/// the summary and exits when the job ends, `serve` keeps reporting a
/// failure (not ready) until terminated rather than crash-looping.
/// `spec` with the columns of its registry subjects derived, saying (after
/// `prefix`) which schema each source's came from.
fn with_registry_columns(
    spec: &sluice_crds::StreamJobSpec,
    secrets_dir: &str,
    prefix: &str,
) -> Result<sluice_crds::StreamJobSpec, sluice_worker::Error> {
    let (spec, resolved) = sluice_worker::registry::resolve_columns(spec, secrets_dir)?;
    for r in resolved {
        say!(
            "{prefix}source {}: columns from subject {} version {} (schema id {})",
            r.source,
            r.subject,
            r.version,
            r.id
        );
    }
    Ok(spec)
}

/// `preview`: the manifest as a local run, on a consumer group of its own
/// that it never commits to, from `from` (or each source's startFrom),
/// printing at most `limit` rows.
fn preview(file: &str, limit: Option<u64>, from: Option<&str>, cores: Option<i32>, secrets_dir: String) -> ExitCode {
    let start = match from.map(|f| match f.to_ascii_lowercase().as_str() {
        "earliest" => Ok(sluice_crds::StartFrom::Earliest),
        "latest" => Ok(sluice_crds::StartFrom::Latest),
        _ => f.parse::<sluice_crds::StartFrom>(),
    }) {
        None => None,
        Some(Ok(s)) => Some(s),
        Some(Err(e)) => return fail(&format!("--from: {e}")),
    };
    let (file, text) = match read_manifest(file) {
        Ok(t) => t,
        Err(e) => return fail(&e),
    };
    let _telemetry = init_telemetry(false, None);
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
    let settings = WorkerSettings {
        http_address: "127.0.0.1".into(),
        http_port: 0,
        secrets_dir,
        consumer_group: Some(format!("sluice-preview-{}-{stamp}", std::process::id())),
        pin_cores: false,
        ..WorkerSettings::default()
    };
    let mut config = match config::from_manifest(&text, cores, settings) {
        Ok(c) => c,
        Err(e) => return fail(&format!("{file}: {}", in_manifest(file, e))),
    };
    if let Some(start) = start {
        for k in config.spec.sources.iter_mut().filter_map(|s| s.kafka.as_mut()) {
            k.start_from = start;
        }
    }
    // Nothing in a preview reaches Kafka but its reads: no transactions.
    config.spec.delivery = sluice_crds::Delivery::AtLeastOnce;
    say!(
        "sluice-worker: preview of {}: reading as consumer group {} (nothing committed, nothing written to Kafka)",
        config.job.name,
        config.consumer_group()
    );
    execute(config, false, true, Some(limit.unwrap_or(u64::MAX)))
}

fn execute(mut config: WorkerConfig, bounded: bool, local: bool, preview: Option<u64>) -> ExitCode {
    // Columns named by a registry subject: derived here for a local run;
    // a pod's config has them already (the operator derived them).
    match with_registry_columns(&config.spec, &config.worker.secrets_dir, "sluice-worker: ") {
        Ok(spec) => config.spec = spec,
        Err(e) => return fail(&e.to_string()),
    }
    let pod_name = std::env::var("POD_NAME").ok().or_else(|| std::env::var("HOSTNAME").ok());
    let ordinal = match config::ordinal(&config, if local { None } else { pod_name.as_deref() }) {
        Ok(o) => o,
        Err(e) => return fail(&e.to_string()),
    };
    let metrics = match Metrics::new(&config.job.name, ordinal) {
        Ok(m) => Arc::new(m),
        Err(e) => return fail(&e.to_string()),
    };
    let health = Arc::new(Health::default());
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .thread_name("sluice-http")
        .build()
    {
        Ok(r) => r,
        Err(e) => return fail(&format!("cannot start the HTTP runtime: {e}")),
    };
    let addr = format!("{}:{}", config.worker.http_address, config.worker.http_port);
    let listener = match runtime.block_on(tokio::net::TcpListener::bind(&addr)) {
        Ok(l) => l,
        Err(e) => return fail(&format!("cannot listen on {addr}: {e}")),
    };
    let bound: Option<SocketAddr> = listener.local_addr().ok();
    if let Some(a) = bound {
        tracing::info!(address = %a, "serving /metrics /healthz /readyz");
        if local {
            say!("sluice-worker: metrics at http://{a}/metrics");
        }
    }
    let app = sluice_worker::http::router(Arc::clone(&metrics), Arc::clone(&health));
    runtime.spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "HTTP server stopped");
        }
    });
    // SIGTERM / SIGINT: stop polling, finish the batch, flush, commit. The
    // drain's waits on the broker end at four fifths of the grace period,
    // leaving the rest to exit before the kubelet's SIGKILL.
    let grace = Duration::from_millis(u64::from(config.worker.shutdown_grace_millis));
    let signal_health = Arc::clone(&health);
    runtime.spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutdown requested: draining");
        signal_health.request_shutdown(grace.saturating_sub(grace / 5));
    });
    let job_health = Arc::clone(&health);
    let job_metrics = Arc::clone(&metrics);
    let (done_tx, done) = std::sync::mpsc::channel();
    // A preview stops, as on Ctrl-C, once its last row is printed.
    let preview = preview.map(|limit| {
        let stop = Arc::clone(&health);
        Arc::new(sluice_worker::sink::RowBudget::new(limit, move || stop.request_shutdown(Duration::from_secs(5))))
    });
    let job = std::thread::Builder::new().name("sluice-job".into()).spawn(move || {
        let options = RunOptions { bounded, ordinal, preview };
        let _ = done_tx.send(run_job(config, &options, &job_metrics, &job_health));
    });
    if let Err(e) = job {
        return fail(&format!("cannot start the job: {e}"));
    }
    // Wait for the job; after a signal, at most the grace period.
    let mut deadline: Option<std::time::Instant> = None;
    let result = loop {
        match done.recv_timeout(Duration::from_millis(50)) {
            Ok(r) => break r,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                break Err(sluice_worker::Error::Internal("job thread panicked".into()));
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
        }
        if health.signalled() {
            let d = *deadline.get_or_insert_with(|| std::time::Instant::now() + grace);
            if std::time::Instant::now() > d {
                tracing::error!(?grace, "did not drain within the grace period; exiting");
                return ExitCode::FAILURE;
            }
        }
    };
    match result {
        Ok(summary) => {
            if local || bounded {
                say!("sluice-worker: done: {summary}");
            } else if !health.signalled() {
                // Every source was bounded and is read to its end. Exiting
                // would make Kubernetes restart the pod and generate it all
                // again: stay up, ready, saying `finished` until terminated.
                tracing::info!(%summary, "input finished; serving /readyz until terminated");
                health.finish(summary.to_string());
                runtime.block_on(wait_for_signal());
            } else {
                tracing::info!(%summary, "stopped");
            }
            ExitCode::SUCCESS
        }
        Err(e) if local || bounded || health.signalled() => fail(&e.to_string()),
        // Fenced, or a transaction the broker aborted after its timeout
        // (librdkafka reports both alike): waiting cannot fix it, and a
        // worker left up, not ready, with a liveness probe that answers
        // was never restarted. Exit: the kubelet restarts the container,
        // and the new process takes the transactional id over and resumes
        // from the last commit. (Two live pods of one ordinal — only after
        // a force-deletion — would fence each other in turn.)
        Err(e @ sluice_worker::Error::Fenced(_)) => fail(&e.to_string()),
        Err(e) => {
            // Keep serving /readyz (not ready, with the reason) until the
            // operator or a person acts: restarting cannot fix this.
            tracing::error!(error = %e, "job stopped; reporting not ready until terminated");
            runtime.block_on(wait_for_signal());
            ExitCode::FAILURE
        }
    }
}

async fn wait_for_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}

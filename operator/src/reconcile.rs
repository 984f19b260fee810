//! Reconciling one StreamJob: validate → look up partitions → decide the
//! step (apply / drain) → write children with server-side apply → report
//! status and events. Every write is idempotent, so a restart mid-reconcile
//! converges to the same state.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::finalizer::{Error as FinalizerError, Event as FinalizerEvent, finalizer};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;
use sluice_crds::{
    FIELD_MANAGER, ReclaimPolicy, RegistrySchemaStatus, ResolvedSchema, SourcePartitions, StreamJob, StreamJobSpec,
    StreamJobStatus, condition_types as ct, reasons,
};

use crate::autoscale::{Policy, effective_workers};
use crate::backoff::Backoff;
use crate::desired::{Desired, OperatorSettings, desired};
use crate::measure::{Autoscaler, Measured, Running, measure, useful_workers};
use crate::metrics::Metrics;
use crate::rescale::{Step, next_step};
use crate::status::{Observed, Outcome, compute, ready_condition};
use crate::upgrade::{QueryState, Upgrade, decide, query_state};
use crate::validate::{Blocked, Invalid};
use crate::{Error, names, partitions, registry, render, validate, worker_health};

/// Shared by every reconcile.
pub struct Context {
    pub client: Client,
    /// Retry delays of jobs that cannot proceed (broker down, API errors).
    pub backoff: Backoff,
    pub settings: OperatorSettings,
    pub recorder: Recorder,
    pub metrics: Metrics,
    pub kafka_timeout: Duration,
    /// How often a running job is looked at again (`--resync-seconds`).
    pub resync: Duration,
    pub autoscaler: Autoscaler,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context").field("settings", &self.settings).finish()
    }
}

/// How long deletion waits for workers to drain before giving up on them.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(120);

pub async fn reconcile(job: Arc<StreamJob>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = job.namespace().unwrap_or_else(|| "default".into());
    let api: Api<StreamJob> = Api::namespaced(ctx.client.clone(), &namespace);
    let started = Instant::now();
    let result = finalizer(&api, names::FINALIZER, job, |event| async {
        match event {
            FinalizerEvent::Apply(job) => apply(&job, &ctx).await,
            FinalizerEvent::Cleanup(job) => cleanup(&job, &ctx).await,
        }
    })
    .await;
    let result = match result {
        Ok(action) => Ok(action),
        Err(FinalizerError::ApplyFailed(e) | FinalizerError::CleanupFailed(e)) => Err(e),
        // Removing our finalizer from a job that is already gone: done.
        Err(FinalizerError::RemoveFinalizer(kube::Error::Api(e))) if e.code == 404 => Ok(Action::await_change()),
        Err(other) => Err(Error::Finalizer(other.to_string())),
    };
    let outcome = match &result {
        Ok(_) => "ok",
        Err(_) => "error",
    };
    ctx.metrics.reconciles.with_label_values(&[outcome]).inc();
    ctx.metrics.reconcile_seconds.with_label_values(&[outcome]).observe(started.elapsed().as_secs_f64());
    result
}

// The signature is kube's `Controller::run` contract.
#[allow(clippy::needless_pass_by_value)]
pub fn error_policy(job: Arc<StreamJob>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.reconcile_errors.with_label_values(&[error.reason()]).inc();
    let retry = ctx.backoff.failed(&job_key(&job));
    tracing::warn!(job = %job.name_any(), error = %error, ?retry, "reconcile failed; retrying");
    Action::requeue(retry)
}

/// A job's key for per-job bookkeeping.
fn job_key(job: &StreamJob) -> String {
    format!("{}/{}", job.namespace().unwrap_or_default(), job.name_any())
}

async fn observe(ctx: &Context, job: &StreamJob, namespace: &str) -> Result<Observed, Error> {
    let name = job.name_any();
    let sts: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), namespace);
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    let statefulset = sts.get_opt(&names::statefulset(&name)).await?;
    let pods = pods.list(&ListParams::default().labels(&names::selector_string(&name))).await?.items;
    let reports = worker_health::probe(&pods).await;
    Ok(Observed {
        statefulset,
        live_pods: pods.len(),
        pods,
        failures: reports.failures,
        finished: reports.finished,
        restarting: reports.restarting,
        registry_schemas: None,
    })
}

/// A job's reconcile, top to bottom: the [`gates`] decide whether its
/// query runs (and in which group), [`run`] writes its workers, and the
/// outcome is measured, reported and given its requeue.
async fn apply(job: &StreamJob, ctx: &Context) -> Result<Action, Error> {
    let namespace = job.namespace().unwrap_or_else(|| "default".into());
    let mut observed = observe(ctx, job, &namespace).await?;
    let previous_epoch = job.status.as_ref().and_then(|s| s.assignment_epoch).unwrap_or(0);
    // The job as far as the gates made it (its registry columns, the
    // autoscaler's count): the one run and reported, wherever they stop.
    let mut job = Cow::Borrowed(job);
    // For the status: `None` (not read) keeps the last ones there.
    let mut registry_schemas = None;
    let (outcome, fresh) = match gates(ctx, &namespace, &mut job, &mut registry_schemas).await {
        Ok(Launch { parts, query, group, fresh }) => {
            (run(ctx, &job, parts, query, group, &mut observed, previous_epoch).await?, fresh)
        }
        Err(Stop::Verdict(outcome)) => (outcome, None),
        Err(Stop::Failed(e)) => return Err(e),
    };
    let key = job_key(&job);
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let measured = measure_applied(ctx, &job, &key, &outcome, &observed, &now).await?;
    observed.registry_schemas = registry_schemas;
    report(ctx, &job, &namespace, &outcome, &observed, measured.as_ref(), &now).await?;
    announce(ctx, &job, fresh, &outcome, measured.as_ref()).await;
    if !matches!(outcome, Outcome::Unavailable(_)) {
        ctx.backoff.succeeded(&key);
    }
    let scaled = measured.as_ref().is_some_and(|m| m.scaled.is_some());
    Ok(next_action(&job.spec, &outcome, scaled, observed.ready_workers(), ctx.resync, || ctx.backoff.failed(&key)))
}

/// What the gates let through: the query to run, and where.
struct Launch {
    parts: Vec<SourcePartitions>,
    query: QueryState,
    /// The consumer group it runs in.
    group: String,
    /// The announcement of a fresh start, once its workers are applied.
    fresh: Option<String>,
}

/// Why the gates stopped short of a launch. The two stay apart: a verdict
/// is the job's, reported in its status (the reconcile itself succeeds);
/// a failure is the API's, the reconcile's error, retried by
/// [`error_policy`].
#[derive(Debug)]
enum Stop {
    /// The job cannot go on (or need not): what the status says.
    Verdict(Outcome),
    /// The API failed: nothing is reported, the reconcile is retried.
    Failed(Error),
}

impl From<Outcome> for Stop {
    fn from(outcome: Outcome) -> Self {
        Self::Verdict(outcome)
    }
}

impl From<Blocked> for Stop {
    fn from(blocked: Blocked) -> Self {
        Self::Verdict(blocked.into())
    }
}

impl From<Error> for Stop {
    fn from(e: Error) -> Self {
        Self::Failed(e)
    }
}

/// The gates a job passes, in order, before its workers are written; the
/// first that stops it gives the reconcile's outcome. Each verdict is
/// classified by the gate that finds it. `job` becomes the job the workers
/// will run; `registry_schemas` are those its columns came from, once read.
async fn gates(
    ctx: &Context,
    namespace: &str,
    job: &mut Cow<'_, StreamJob>,
    registry_schemas: &mut Option<Vec<RegistrySchemaStatus>>,
) -> Result<Launch, Stop> {
    *registry_schemas = Some(with_registry_columns(ctx, namespace, job).await?);
    validate::validate(&job.spec).map_err(Outcome::Invalid)?;
    // The API's error first, then the job's or the cluster's verdict.
    let parts = partitions::lookup(&ctx.client, namespace, &job.spec, ctx.kafka_timeout).await??;
    at_autoscaled_count(ctx, job, &parts);
    let query = planned(job, &parts)?;
    let (group, fresh) = upgrade(job, &query)?;
    Ok(Launch { parts, query, group, fresh })
}

/// Columns named by a registry subject, derived before anything reads the
/// columns: `job` becomes the one the workers will run. The schemas they
/// came from go to the status; a failure keeps the last ones there.
async fn with_registry_columns(
    ctx: &Context,
    namespace: &str,
    job: &mut Cow<'_, StreamJob>,
) -> Result<Vec<RegistrySchemaStatus>, Blocked> {
    let (spec, schemas) = registry::resolve(&ctx.client, namespace, &job.spec).await?;
    if !schemas.is_empty() {
        job.to_mut().spec = spec;
    }
    let status =
        |r: ResolvedSchema| RegistrySchemaStatus { source: r.source, subject: r.subject, version: r.version, id: r.id };
    Ok(schemas.into_iter().map(status).collect())
}

/// With autoscaling, the job runs at the autoscaler's count: the rest of
/// the reconcile sees that count as `spec.workers`.
fn at_autoscaled_count(ctx: &Context, job: &mut Cow<'_, StreamJob>, parts: &[SourcePartitions]) {
    let in_status = job.status.as_ref().and_then(|s| s.autoscaling.as_ref()?.desired_workers);
    let decided = ctx.autoscaler.decided(&job_key(job), in_status);
    let policy = job.spec.autoscaling.as_ref().map(Policy::from);
    let workers = effective_workers(job.spec.workers, policy.as_ref(), decided, useful_workers(job, parts));
    if workers != job.spec.workers {
        job.to_mut().spec.workers = workers;
    }
}

/// The query's state, planned as the workers plan it: for the most
/// partitions any source has, so a side whose source has several is never
/// taken to be complete per partition.
fn planned(job: &StreamJob, parts: &[SourcePartitions]) -> Result<QueryState, Outcome> {
    let partitions = parts.iter().map(|p| p.partitions).max().unwrap_or(1);
    let dataflow = validate::check_partitioning(&job.spec, partitions).map_err(Outcome::Invalid)?;
    Ok(query_state(&dataflow))
}

/// The consumer group `query` runs in ([`decide`]), with the announcement
/// of a fresh start; a refused upgrade leaves the running query as it is.
fn upgrade(job: &StreamJob, query: &QueryState) -> Result<(String, Option<String>), Outcome> {
    match decide(job, query) {
        Upgrade::Refused { message } => {
            Err(Outcome::Refused(Invalid { reason: reasons::INCOMPATIBLE_UPGRADE, message }))
        }
        Upgrade::Continue { group } => Ok((group, None)),
        Upgrade::Fresh { group, previous, why } => {
            let fresh = format!(
                "the query keeps different state than the one it replaces ({why}); upgradeMode Fresh: it starts over \
                 in consumer group {group}, from its sources' startFrom (the previous group {previous} and its state \
                 topics stay in Kafka)"
            );
            Ok((group, Some(fresh)))
        }
    }
}

/// What is measured of applied workers (lag, the autoscaler's decision);
/// any other outcome ends the autoscaler's memory of the job.
async fn measure_applied(
    ctx: &Context,
    job: &StreamJob,
    key: &str,
    outcome: &Outcome,
    observed: &Observed,
    now: &Time,
) -> Result<Option<Measured>, Error> {
    let Outcome::Applied(d) = outcome else {
        ctx.autoscaler.forget(key);
        return Ok(None);
    };
    let steady = !job.spec.suspend && d.replicas > 0 && observed.failures.is_empty() && observed.converged(d.replicas);
    let running = Running {
        client: &ctx.client,
        metrics: &ctx.metrics,
        kafka_timeout: ctx.kafka_timeout,
        key,
        job,
        desired: d,
        steady,
        pods: &observed.pods,
        ready_workers: observed.ready_workers(),
        now,
        lag_every: ctx.resync,
    };
    Ok(Some(measure(&ctx.autoscaler, &running).await?))
}

/// The events of what this reconcile started: a fresh start, once its
/// workers are applied, and a new worker count.
async fn announce(
    ctx: &Context,
    job: &StreamJob,
    fresh: Option<String>,
    outcome: &Outcome,
    measured: Option<&Measured>,
) {
    if let (Some(note), Outcome::Applied(_)) = (fresh, outcome) {
        publish(ctx, job, EventType::Normal, reasons::STARTED_FRESH, note).await;
    }
    if let Some((reason, to, message)) = measured.and_then(|m| m.scaled.clone()) {
        // One action per target count: 4 → 2 and then 2 → 1 are two events.
        publish_action(ctx, job, EventType::Normal, reason, &format!("ScaleTo{to}"), message).await;
    }
}

/// When the job is looked at again after `outcome`. `scaled`: the
/// autoscaler has just chosen a new worker count. `retry` is the backoff's
/// next delay, asked only of an unavailable cluster (asking counts a
/// failure).
fn next_action(
    spec: &StreamJobSpec,
    outcome: &Outcome,
    scaled: bool,
    ready_workers: i32,
    resync: Duration,
    retry: impl FnOnce() -> Duration,
) -> Action {
    let period = spec.autoscaling.as_ref().map(|a| Duration::from_secs(u64::try_from(a.period_seconds).unwrap_or(15)));
    match outcome {
        Outcome::Invalid(_) => Action::await_change(),
        // The running query goes on: keep its status current.
        Outcome::Refused(_) => Action::requeue(resync),
        Outcome::Unavailable(_) => Action::requeue(retry()),
        Outcome::Draining { .. } => Action::requeue(Duration::from_secs(1)),
        // A new worker count: start its rescale now.
        Outcome::Applied(_) if scaled => Action::requeue(Duration::from_millis(200)),
        Outcome::Applied(d) if ready_workers == d.replicas => Action::requeue(period.map_or(resync, |p| p.min(resync))),
        Outcome::Applied(_) => Action::requeue(Duration::from_secs(3)),
    }
}

/// Runs `job`'s query in consumer `group`: applies its workers, or stops the
/// running ones first when partition ownership changes (see [`next_step`]).
async fn run(
    ctx: &Context,
    job: &StreamJob,
    parts: Vec<SourcePartitions>,
    query: QueryState,
    group: String,
    observed: &mut Observed,
    previous_epoch: i64,
) -> Result<Outcome, Error> {
    let namespace = job.namespace().unwrap_or_else(|| "default".into());
    let name = job.name_any();
    let running_hash = observed
        .statefulset
        .as_ref()
        .and_then(|s| s.metadata.annotations.as_ref()?.get(names::ASSIGNMENT_HASH).cloned());
    let desired_hash = crate::desired::assignment_hash(&parts, job.spec.workers, job.spec.cores_per_worker);
    let epoch =
        if running_hash.as_deref() == Some(desired_hash.as_str()) { previous_epoch.max(1) } else { previous_epoch + 1 };
    let desired = desired(job, parts, epoch, &ctx.settings, query, group)?;
    let running_replicas = observed.statefulset.as_ref().and_then(|s| s.spec.as_ref()?.replicas).unwrap_or(0);
    let running_claims = observed.statefulset.as_ref().map(|s| {
        s.metadata.annotations.as_ref().and_then(|a| a.get(names::VOLUME_CLAIMS).cloned()).unwrap_or_default()
    });
    let claims_change = running_claims.is_some_and(|c| c != render::volume_claims(job));
    let step = next_step(
        running_hash.as_deref(),
        running_replicas,
        observed.live_pods,
        &desired.assignment_hash,
        claims_change,
    );
    Ok(match step {
        Step::Apply => {
            if claims_change {
                // No pod is left (`next_step`): the StatefulSet whose claim
                // templates cannot change is replaced.
                let sts: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), &namespace);
                sts.delete(&names::statefulset(&name), &DeleteParams::background()).await?;
            }
            apply_children(ctx, job, &namespace, &desired).await?;
            *observed = observe(ctx, job, &namespace).await?;
            Outcome::Applied(Box::new(desired))
        }
        Step::Drain => {
            let sts: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), &namespace);
            sts.patch(
                &names::statefulset(&name),
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": { "replicas": 0 } })),
            )
            .await?;
            ctx.metrics.rescales.with_label_values(&[&namespace, &name]).inc();
            publish(
                ctx,
                job,
                EventType::Normal,
                reasons::RESCALING,
                if claims_change {
                    "the workers' local state volumes change (spec.engine.localState): stopping the current \
                     workers first"
                        .to_owned()
                } else {
                    format!(
                        "partition ownership changes ({} → {} worker(s), {} core(s) each): stopping the current \
                         workers first",
                        running_replicas, job.spec.workers, job.spec.cores_per_worker
                    )
                },
            )
            .await;
            Outcome::Draining { live_pods: observed.live_pods }
        }
        Step::WaitForDrain => Outcome::Draining { live_pods: observed.live_pods },
    })
}

/// Writes the children with server-side apply (this operator owns their fields).
async fn apply_children(ctx: &Context, job: &StreamJob, namespace: &str, desired: &Desired) -> Result<(), Error> {
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    let client = &ctx.client;
    let cm = render::config_map(job, desired);
    Api::<ConfigMap>::namespaced(client.clone(), namespace).patch(&cm.name_any(), &pp, &Patch::Apply(&cm)).await?;
    let svc = render::headless_service(job);
    Api::<Service>::namespaced(client.clone(), namespace).patch(&svc.name_any(), &pp, &Patch::Apply(&svc)).await?;
    let pdb = render::pod_disruption_budget(job);
    Api::<PodDisruptionBudget>::namespaced(client.clone(), namespace)
        .patch(&pdb.name_any(), &pp, &Patch::Apply(&pdb))
        .await?;
    let sts = render::statefulset(job, desired);
    Api::<StatefulSet>::namespaced(client.clone(), namespace).patch(&sts.name_any(), &pp, &Patch::Apply(&sts)).await?;
    Ok(())
}

/// Writes status, and an event when the Ready condition changes.
async fn report(
    ctx: &Context,
    job: &StreamJob,
    namespace: &str,
    outcome: &Outcome,
    observed: &Observed,
    measured: Option<&Measured>,
    now: &Time,
) -> Result<(), Error> {
    let before = ready_condition(job.status.as_ref());
    let mut status = compute(job, outcome, observed, now);
    if let Some(m) = measured {
        status.lag = m.lag;
        status.autoscaling.clone_from(&m.autoscaling);
    }
    // Written from a status read before the last decision landed in the
    // cache, it must not take that decision back.
    if let (Some(a), Some(pending)) = (status.autoscaling.as_mut(), ctx.autoscaler.pending(&job_key(job))) {
        a.desired_workers = Some(pending);
    }
    let after = ready_condition(Some(&status));
    let name = job.name_any();
    ctx.metrics.job(namespace, &name);
    ctx.metrics.suspended.with_label_values(&[namespace, &name]).set(i64::from(job.spec.suspend));
    for c in crate::metrics::CONDITIONS {
        let on = status.conditions.iter().any(|k| k.type_ == c && k.status == "True");
        ctx.metrics.condition.with_label_values(&[namespace, &name, c]).set(i64::from(on));
    }
    if job.status.as_ref() != Some(&status) {
        let mut patch = json!({ "status": status });
        // A merge patch keeps what it does not mention: autoscaling that
        // was turned off is removed explicitly.
        if status.autoscaling.is_none() {
            patch["status"]["autoscaling"] = serde_json::Value::Null;
        }
        let api: Api<StreamJob> = Api::namespaced(ctx.client.clone(), namespace);
        api.patch_status(&job.name_any(), &PatchParams::default(), &Patch::Merge(patch)).await?;
    }
    // A refused upgrade leaves Ready as the running workers make it: its
    // warning is published when the refusal is new.
    if let Outcome::Refused(i) = outcome {
        let degraded = |s: Option<&StreamJobStatus>| {
            s?.conditions.iter().find(|c| c.type_ == ct::DEGRADED).map(|c| (c.reason.clone(), c.message.clone()))
        };
        if degraded(job.status.as_ref()) != Some((i.reason.to_owned(), i.message.clone())) {
            publish(ctx, job, EventType::Warning, i.reason, i.message.clone()).await;
        }
    }
    if before != after
        && let Some((state, reason, message)) = after
    {
        let kind = match outcome {
            Outcome::Invalid(_) | Outcome::Unavailable(_) | Outcome::Refused(_) => EventType::Warning,
            _ if !observed.failures.is_empty() => EventType::Warning,
            _ => EventType::Normal,
        };
        let changed_reason = before.as_ref().map(|b| b.1.as_str()) != Some(reason.as_str());
        if changed_reason || kind == EventType::Warning || state == "True" {
            publish(ctx, job, kind, &reason, message).await;
        }
    }
    Ok(())
}

async fn publish(ctx: &Context, job: &StreamJob, type_: EventType, reason: &str, note: String) {
    publish_action(ctx, job, type_, reason, "Reconcile", note).await;
}

/// An event with its own action. kube's recorder folds an event into an
/// earlier one with the same type, reason and action for minutes (a
/// series: the count grows, the note stays the first's), so a note that
/// must be read each time needs an action of its own.
async fn publish_action(ctx: &Context, job: &StreamJob, type_: EventType, reason: &str, action: &str, note: String) {
    let event =
        Event { type_, reason: reason.to_owned(), note: Some(note), action: action.to_owned(), secondary: None };
    if let Err(e) = ctx.recorder.publish(&event, &job.object_ref(&())).await {
        tracing::warn!(job = %job.name_any(), error = %e, "could not publish event");
    }
}

/// Deletion: stop the workers so they drain, checkpoint and commit before
/// garbage collection removes everything (bounded by [`DRAIN_TIMEOUT`]).
async fn cleanup(job: &StreamJob, ctx: &Context) -> Result<Action, Error> {
    let namespace = job.namespace().unwrap_or_else(|| "default".into());
    let name = job.name_any();
    // The job is going away: forget its retry count (a failure of this
    // cleanup counts afresh, and the pass that completes it starts here).
    ctx.backoff.succeeded(&job_key(job));
    ctx.autoscaler.forget_job(&job_key(job));
    ctx.metrics.forget_job(&namespace, &name);
    let observed = observe(ctx, job, &namespace).await?;
    let waited = Duration::from_secs(
        job.meta()
            .deletion_timestamp
            .as_ref()
            .map(|t| k8s_openapi::jiff::Timestamp::now().duration_since(t.0).as_secs())
            .and_then(|s| u64::try_from(s).ok())
            .unwrap_or(0),
    );
    if observed.live_pods == 0 {
        return reclaim(job, ctx, &namespace, waited).await;
    }
    if waited > DRAIN_TIMEOUT {
        tracing::warn!(job = %name, pods = observed.live_pods, "workers did not stop in time; deleting anyway");
        return reclaim(job, ctx, &namespace, waited).await;
    }
    if observed.statefulset.as_ref().and_then(|s| s.spec.as_ref()?.replicas).unwrap_or(0) > 0 {
        Api::<StatefulSet>::namespaced(ctx.client.clone(), &namespace)
            .patch(
                &names::statefulset(&name),
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": { "replicas": 0 } })),
            )
            .await?;
    }
    Err(Error::Draining(format!("waiting for {} worker(s) of {name} to drain", observed.live_pods)))
}

/// How long past [`DRAIN_TIMEOUT`] a deletion retries deleting what the
/// job kept in Kafka (`reclaimPolicy: Delete`) before it lets the job go
/// and says what is left: a broker that is down must not hold a deletion
/// for good.
const RECLAIM_TIMEOUT: Duration = Duration::from_secs(180);

/// The last step of a deletion, once the workers are gone: with
/// `reclaimPolicy: Delete`, the job's consumer group and internal topics
/// are deleted ([`crate::reclaim`]); a Kafka that does not let them be is
/// retried, with backoff, for [`RECLAIM_TIMEOUT`].
async fn reclaim(job: &StreamJob, ctx: &Context, namespace: &str, waited: Duration) -> Result<Action, Error> {
    if job.spec.reclaim_policy != ReclaimPolicy::Delete {
        return Ok(Action::await_change());
    }
    // No group in status: no worker ever ran, nothing was created.
    let Some(group) = job.status.as_ref().and_then(|s| s.consumer_group.clone()) else {
        return Ok(Action::await_change());
    };
    match crate::reclaim::reclaim(&ctx.client, namespace, &job.spec, &group, ctx.kafka_timeout).await? {
        Ok(done) => {
            let topics = if done.topics.is_empty() { "none".to_owned() } else { done.topics.join(", ") };
            let group = if done.group { format!("consumer group {group}") } else { format!("no group {group} left") };
            let note = format!("reclaimPolicy Delete: deleted {group}; topics: {topics}");
            publish(ctx, job, EventType::Normal, reasons::RECLAIMED, note).await;
            Ok(Action::await_change())
        }
        Err(why) if waited < DRAIN_TIMEOUT + RECLAIM_TIMEOUT => {
            Err(Error::Kafka(format!("deleting consumer group {group} and its topics (reclaimPolicy Delete): {why}")))
        }
        Err(why) => {
            let note = format!(
                "reclaimPolicy Delete: gave up deleting consumer group {group} and its internal topics after {}s \
                 ({why}); delete them by hand (docs/operations.md, \"Deleting a job\")",
                waited.as_secs()
            );
            tracing::warn!(job = %job.name_any(), "{note}");
            publish(ctx, job, EventType::Warning, reasons::RECLAIM_FAILED, note).await;
            Ok(Action::await_change())
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use sluice_crds::StreamJobStatus;

    use super::*;
    use crate::render::fixtures::{desired_for, job};

    #[test]
    fn the_requeue_follows_the_outcome_and_only_an_unavailable_cluster_counts_a_retry() {
        let j = job("s2-group-by.yaml");
        let resync = Duration::from_secs(60);
        let retries = Cell::new(0);
        let retry = || {
            retries.set(retries.get() + 1);
            Duration::from_secs(7)
        };
        let problem = Invalid { reason: reasons::INVALID_SPEC, message: "m".into() };
        let next = |outcome: &Outcome| next_action(&j.spec, outcome, false, 0, resync, retry);
        assert_eq!(next(&Outcome::Invalid(problem.clone())), Action::await_change());
        assert_eq!(next(&Outcome::Refused(problem.clone())), Action::requeue(resync));
        assert_eq!(next(&Outcome::Draining { live_pods: 2 }), Action::requeue(Duration::from_secs(1)));
        assert_eq!(retries.get(), 0, "asking the backoff counts a failure");
        assert_eq!(next(&Outcome::Unavailable(problem)), Action::requeue(Duration::from_secs(7)));
        assert_eq!(retries.get(), 1);
    }

    #[test]
    fn applied_workers_are_looked_at_again_by_how_far_they_are() {
        let mut j = job("s2-group-by.yaml");
        let d = desired_for(&j, 4);
        let ready = d.replicas;
        let applied = Outcome::Applied(Box::new(d));
        let resync = Duration::from_secs(60);
        let next = |j: &StreamJob, scaled, ready, resync| {
            next_action(&j.spec, &applied, scaled, ready, resync, || panic!("no backoff for applied workers"))
        };
        assert_eq!(next(&j, false, ready - 1, resync), Action::requeue(Duration::from_secs(3)), "starting");
        assert_eq!(next(&j, false, ready, resync), Action::requeue(resync), "running");
        assert_eq!(next(&j, true, ready, resync), Action::requeue(Duration::from_millis(200)), "a new count");
        // Autoscaled: measured every period, or at each resync if sooner.
        j.spec.autoscaling = Some(serde_json::from_value(json!({ "maxWorkers": 8, "periodSeconds": 15 })).unwrap());
        assert_eq!(next(&j, false, ready, resync), Action::requeue(Duration::from_secs(15)));
        let sooner = Duration::from_secs(10);
        assert_eq!(next(&j, false, ready, sooner), Action::requeue(sooner));
    }

    #[test]
    fn an_upgrade_is_refused_as_the_job_s_verdict_or_announced_when_fresh() {
        let mut j = job("s2-group-by.yaml");
        let query = query_state(&validate::validate(&j.spec).unwrap());
        let (group, fresh) = upgrade(&j, &query).unwrap();
        assert!(fresh.is_none(), "a new job starts in its own group: {fresh:?}");
        j.status = Some(StreamJobStatus {
            consumer_group: Some(group.clone()),
            query_identity: Some("0ther".into()),
            ..Default::default()
        });
        let Err(Outcome::Refused(refused)) = upgrade(&j, &query) else { panic!("KeepState refuses") };
        assert_eq!(refused.reason, reasons::INCOMPATIBLE_UPGRADE);
        j.spec.upgrade_mode = sluice_crds::UpgradeMode::Fresh;
        let (fresh_group, Some(note)) = upgrade(&j, &query).unwrap() else { panic!("Fresh is announced") };
        assert_ne!(fresh_group, group);
        assert!(note.contains(&format!("consumer group {fresh_group}")), "{note}");
        assert!(note.contains(&format!("previous group {group} and its state topics")), "{note}");
    }
}

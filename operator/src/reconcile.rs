//! Reconciling one StreamJob: validate → look up partitions → decide the
//! step (apply / drain) → write children with server-side apply → report
//! status and events. Every write is idempotent, so a restart mid-reconcile
//! converges to the same state.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::finalizer::{Error as FinalizerError, Event as FinalizerEvent, finalizer};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;
use sluice_crds::{FIELD_MANAGER, ReclaimPolicy, StreamJob, StreamJobStatus, condition_types as ct, reasons};

use crate::autoscale::{Policy, effective_workers};
use crate::backoff::Backoff;
use crate::desired::{Desired, OperatorSettings, desired};
use crate::measure::{Autoscaler, Measured, Running, measure, useful_workers};
use crate::metrics::Metrics;
use crate::rescale::{Step, next_step};
use crate::status::{Observed, Outcome, compute, ready_condition};
use crate::upgrade::{QueryState, Upgrade, decide, query_state};
use crate::validate::Invalid;
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

async fn apply(job: &StreamJob, ctx: &Context) -> Result<Action, Error> {
    let namespace = job.namespace().unwrap_or_else(|| "default".into());
    let mut observed = observe(ctx, job, &namespace).await?;
    let previous_epoch = job.status.as_ref().and_then(|s| s.assignment_epoch).unwrap_or(0);
    // With autoscaling, the job runs at the autoscaler's count: the rest of
    // the reconcile sees that count as `spec.workers`.
    let mut autoscaled: Option<StreamJob> = None;
    // The announcement of a fresh start, once its workers are applied.
    let mut fresh: Option<String> = None;
    // Columns named by a registry subject, derived before anything reads
    // the columns; the job below is the one the workers will run.
    let mut with_columns: Option<StreamJob> = None;
    let mut registry_schemas = None;
    // The schemas they came from go to the status; a failure keeps the
    // last ones there.
    let early = match registry::resolve(&ctx.client, &namespace, &job.spec).await {
        Ok((spec, schemas)) => {
            if !schemas.is_empty() {
                let mut resolved = job.clone();
                resolved.spec = spec;
                with_columns = Some(resolved);
            }
            let status = |r: sluice_crds::ResolvedSchema| sluice_crds::RegistrySchemaStatus {
                source: r.source,
                subject: r.subject,
                version: r.version,
                id: r.id,
            };
            registry_schemas = Some(schemas.into_iter().map(status).collect());
            None
        }
        Err(registry::Unresolved::Invalid(invalid)) => Some(Outcome::Invalid(invalid)),
        Err(registry::Unresolved::Unavailable(down)) => Some(Outcome::Unavailable(down)),
    };
    let job = with_columns.as_ref().unwrap_or(job);
    let outcome = match early {
        Some(outcome) => outcome,
        None => match validate::validate(&job.spec) {
            Err(invalid) => Outcome::Invalid(invalid),
            Ok(_) => match partitions::lookup(&ctx.client, &namespace, &job.spec, ctx.kafka_timeout).await? {
                Err(unavailable) if unavailable.reason == reasons::INVALID_SPEC => Outcome::Invalid(unavailable),
                Err(unavailable) => Outcome::Unavailable(unavailable),
                Ok(parts) => {
                    let in_status = job.status.as_ref().and_then(|s| s.autoscaling.as_ref()?.desired_workers);
                    let decided = ctx.autoscaler.decided(&job_key(job), in_status);
                    let policy = job.spec.autoscaling.as_ref().map(Policy::from);
                    let workers =
                        effective_workers(job.spec.workers, policy.as_ref(), decided, useful_workers(job, &parts));
                    if workers != job.spec.workers {
                        let mut scaled = job.clone();
                        scaled.spec.workers = workers;
                        autoscaled = Some(scaled);
                    }
                    let job = autoscaled.as_ref().unwrap_or(job);
                    // Planned as the workers plan it: for the most partitions
                    // any source has, so a side whose source has several is
                    // never taken to be complete per partition.
                    let partitions = parts.iter().map(|p| p.partitions).max().unwrap_or(1);
                    match validate::check_partitioning(&job.spec, partitions) {
                        Err(invalid) => Outcome::Invalid(invalid),
                        Ok(dataflow) => {
                            let query = query_state(&dataflow);
                            match decide(job, &query) {
                                Upgrade::Refused { message } => {
                                    Outcome::Refused(Invalid { reason: reasons::INCOMPATIBLE_UPGRADE, message })
                                }
                                Upgrade::Continue { group } => {
                                    run(ctx, job, parts, query, group, &mut observed, previous_epoch).await?
                                }
                                Upgrade::Fresh { group, previous, why } => {
                                    fresh = Some(format!(
                                        "the query keeps different state than the one it replaces ({why}); \
                                     upgradeMode Fresh: it starts over in consumer group {group}, from its sources' \
                                     startFrom (the previous group {previous} and its state topics stay in Kafka)"
                                    ));
                                    run(ctx, job, parts, query, group, &mut observed, previous_epoch).await?
                                }
                            }
                        }
                    }
                }
            },
        },
    };
    let job = autoscaled.as_ref().unwrap_or(job);
    let key = job_key(job);
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let measured = match &outcome {
        Outcome::Applied(d) => {
            let steady =
                !job.spec.suspend && d.replicas > 0 && observed.failures.is_empty() && observed.converged(d.replicas);
            let running = Running {
                client: &ctx.client,
                metrics: &ctx.metrics,
                kafka_timeout: ctx.kafka_timeout,
                key: &key,
                job,
                desired: d,
                steady,
                pods: &observed.pods,
                ready_workers: observed.ready_workers(),
                now: &now,
                lag_every: ctx.resync,
            };
            Some(measure(&ctx.autoscaler, &running).await?)
        }
        _ => {
            ctx.autoscaler.forget(&key);
            None
        }
    };
    observed.registry_schemas = registry_schemas;
    report(ctx, job, &namespace, &outcome, &observed, measured.as_ref(), &now).await?;
    if let (Some(note), Outcome::Applied(_)) = (fresh, &outcome) {
        publish(ctx, job, EventType::Normal, reasons::STARTED_FRESH, note).await;
    }
    if let Some((reason, to, message)) = measured.as_ref().and_then(|m| m.scaled.clone()) {
        // One action per target count: 4 → 2 and then 2 → 1 are two events.
        publish_action(ctx, job, EventType::Normal, reason, &format!("ScaleTo{to}"), message).await;
    }
    if !matches!(outcome, Outcome::Unavailable(_)) {
        ctx.backoff.succeeded(&key);
    }
    let period =
        job.spec.autoscaling.as_ref().map(|a| Duration::from_secs(u64::try_from(a.period_seconds).unwrap_or(15)));
    Ok(match &outcome {
        Outcome::Invalid(_) => Action::await_change(),
        // The running query goes on: keep its status current.
        Outcome::Refused(_) => Action::requeue(ctx.resync),
        Outcome::Unavailable(_) => Action::requeue(ctx.backoff.failed(&key)),
        Outcome::Draining { .. } => Action::requeue(Duration::from_secs(1)),
        // A new worker count: start its rescale now.
        Outcome::Applied(_) if measured.as_ref().is_some_and(|m| m.scaled.is_some()) => {
            Action::requeue(Duration::from_millis(200))
        }
        Outcome::Applied(d) if observed.ready_workers() == d.replicas => {
            Action::requeue(period.map_or(ctx.resync, |p| p.min(ctx.resync)))
        }
        Outcome::Applied(_) => Action::requeue(Duration::from_secs(3)),
    })
}

/// Runs `job`'s query in consumer `group`: applies its workers, or stops the
/// running ones first when partition ownership changes (see [`next_step`]).
async fn run(
    ctx: &Context,
    job: &StreamJob,
    parts: Vec<sluice_crds::SourcePartitions>,
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
    Ok(match next_step(running_hash.as_deref(), running_replicas, observed.live_pods, &desired.assignment_hash) {
        Step::Apply => {
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
                format!(
                    "partition ownership changes ({} → {} worker(s), {} core(s) each): stopping the current workers \
                     first",
                    running_replicas, job.spec.workers, job.spec.cores_per_worker
                ),
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

//! Leader election with a `coordination.k8s.io` Lease, so two operator
//! replicas can run and only one reconciles. Renewal uses the Lease's
//! resourceVersion: of two replicas racing, exactly one write succeeds.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Api;
use kube::api::PostParams;

use crate::Error;

#[derive(Debug, Clone)]
pub struct LeaderElector {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration: Duration,
}

impl LeaderElector {
    pub fn new(api: Api<Lease>, name: &str, identity: &str, duration: Duration) -> Self {
        Self { api, name: name.to_owned(), identity: identity.to_owned(), duration }
    }

    pub fn renew_every(&self) -> Duration {
        self.duration / 3
    }

    /// How long a leader may go without renewing before it must stop
    /// acting: two thirds of the lease, leaving a third of it as margin
    /// against clock skew and a reconcile finishing its last write.
    pub fn renew_deadline(&self) -> Duration {
        self.duration * 2 / 3
    }

    /// Takes or renews the lease; false when another holder's lease is live.
    pub async fn try_lead(&self) -> Result<bool, Error> {
        let now = Timestamp::now();
        let seconds = i32::try_from(self.duration.as_secs()).unwrap_or(15);
        match self.api.get_opt(&self.name).await? {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta { name: Some(self.name.clone()), ..ObjectMeta::default() },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(self.identity.clone()),
                        lease_duration_seconds: Some(seconds),
                        acquire_time: Some(MicroTime(now)),
                        renew_time: Some(MicroTime(now)),
                        lease_transitions: Some(0),
                        ..LeaseSpec::default()
                    }),
                };
                Ok(conflict_is_false(self.api.create(&PostParams::default(), &lease).await)?)
            }
            Some(mut lease) => {
                let spec = lease.spec.clone().unwrap_or_default();
                let mine = spec.holder_identity.as_deref() == Some(self.identity.as_str());
                let expired = spec.renew_time.as_ref().is_none_or(|t| {
                    let ttl = SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(seconds)));
                    t.0.checked_add(ttl).is_ok_and(|until| until < now)
                });
                if !mine && !expired && spec.holder_identity.is_some() {
                    return Ok(false);
                }
                lease.spec = Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(seconds),
                    acquire_time: if mine { spec.acquire_time } else { Some(MicroTime(now)) },
                    renew_time: Some(MicroTime(now)),
                    lease_transitions: Some(spec.lease_transitions.unwrap_or(0) + i32::from(!mine)),
                    ..spec
                });
                Ok(conflict_is_false(self.api.replace(&self.name, &PostParams::default(), &lease).await)?)
            }
        }
    }

    /// Gives the lease up (on shutdown) so a standby takes over at once.
    pub async fn release(&self) {
        if let Ok(Some(mut lease)) = self.api.get_opt(&self.name).await
            && let Some(spec) = lease.spec.as_mut()
            && spec.holder_identity.as_deref() == Some(self.identity.as_str())
        {
            spec.holder_identity = None;
            spec.renew_time = None;
            let _ = self.api.replace(&self.name, &PostParams::default(), &lease).await;
        }
    }
}

/// Why a leader stopped leading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepDown {
    /// Another replica holds the lease.
    Lost,
    /// No renewal succeeded within the renew deadline (errors, or a call
    /// that did not return): the lease may expire and a standby take over.
    RenewDeadline,
}

/// Renews the lease every `every` until it is lost or not renewed within
/// `deadline` of the last success. Every attempt is bounded by the time
/// left to the deadline: a renewal that hangs (an API server that accepts
/// the connection and never answers) must not keep this replica acting as
/// leader after a standby has taken the expired lease.
pub async fn keep_leading<F, Fut>(every: Duration, deadline: Duration, mut try_lead: F) -> StepDown
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool, Error>>,
{
    let mut renewed = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(every).await;
        let left = deadline.saturating_sub(renewed.elapsed());
        match tokio::time::timeout(left, try_lead()).await {
            Ok(Ok(true)) => renewed = tokio::time::Instant::now(),
            Ok(Ok(false)) => return StepDown::Lost,
            Err(_) => return StepDown::RenewDeadline,
            Ok(Err(_)) if renewed.elapsed() >= deadline => return StepDown::RenewDeadline,
            Ok(Err(e)) => tracing::warn!(error = %e, "renewing the lease"),
        }
    }
}

fn conflict_is_false(result: Result<Lease, kube::Error>) -> Result<bool, Error> {
    match result {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A renewal that never returns once kept the old leader reconciling
    /// forever; now it steps down at the renew deadline.
    #[tokio::test]
    async fn a_hanging_renewal_steps_down_at_the_deadline() {
        let started = std::time::Instant::now();
        let why = keep_leading(Duration::from_millis(10), Duration::from_millis(200), || {
            std::future::pending::<Result<bool, Error>>()
        })
        .await;
        assert_eq!(why, StepDown::RenewDeadline);
        assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    }

    #[tokio::test]
    async fn failing_renewals_step_down_at_the_deadline_and_a_lost_lease_at_once() {
        let why = keep_leading(Duration::from_millis(10), Duration::from_millis(100), || async {
            Err(Error::Internal("API server unavailable".into()))
        })
        .await;
        assert_eq!(why, StepDown::RenewDeadline);
        let why = keep_leading(Duration::from_millis(10), Duration::from_secs(60), || async { Ok(false) }).await;
        assert_eq!(why, StepDown::Lost);
    }
}

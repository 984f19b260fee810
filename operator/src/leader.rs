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

fn conflict_is_false(result: Result<Lease, kube::Error>) -> Result<bool, Error> {
    match result {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

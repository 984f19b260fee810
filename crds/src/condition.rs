//! Status conditions, following the Kubernetes API conventions.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// The three values a condition's `status` may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

impl ConditionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::True => "True",
            Self::False => "False",
            Self::Unknown => "Unknown",
        }
    }
}

/// Sets (or adds) the condition of `type_`. `lastTransitionTime` only moves
/// when the status actually changes, so users can tell how long a job has been
/// in its current state; reason, message and observedGeneration always update.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: ConditionStatus,
    reason: &str,
    message: &str,
    observed_generation: Option<i64>,
    now: Time,
) {
    let status = status.as_str();
    if let Some(existing) = conditions.iter_mut().find(|c| c.type_ == type_) {
        if existing.status != status {
            existing.last_transition_time = now;
            existing.status = status.to_owned();
        }
        existing.reason = reason.to_owned();
        existing.message = message.to_owned();
        existing.observed_generation = observed_generation;
    } else {
        conditions.push(Condition {
            type_: type_.to_owned(),
            status: status.to_owned(),
            reason: reason.to_owned(),
            message: message.to_owned(),
            observed_generation,
            last_transition_time: now,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Time {
        Time(jiff::Timestamp::from_second(secs).unwrap_or_default())
    }

    #[test]
    fn transition_time_moves_only_on_status_change() {
        let mut c = Vec::new();
        set_condition(&mut c, "Ready", ConditionStatus::False, "Starting", "a", Some(1), at(10));
        set_condition(&mut c, "Ready", ConditionStatus::False, "Starting", "b", Some(2), at(20));
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].last_transition_time, at(10));
        assert_eq!(c[0].message, "b");
        assert_eq!(c[0].observed_generation, Some(2));
        set_condition(&mut c, "Ready", ConditionStatus::True, "Running", "c", Some(2), at(30));
        assert_eq!(c[0].last_transition_time, at(30));
        assert_eq!(c[0].status, "True");
    }
}

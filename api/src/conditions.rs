//! Find and set `metav1.Condition`s in a status, moving `lastTransitionTime` only when the
//! status flips (the semantics of apimachinery's `meta.SetStatusCondition`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use crate::consts::status;

/// The three values of a condition's `status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// The condition does not hold.
    False,
    /// The condition cannot be determined yet.
    Unknown,
}

impl ConditionStatus {
    /// The wire spelling: `True`, `False` or `Unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::True => status::TRUE,
            Self::False => status::FALSE,
            Self::Unknown => status::UNKNOWN,
        }
    }
}

impl From<bool> for ConditionStatus {
    fn from(holds: bool) -> Self {
        if holds { Self::True } else { Self::False }
    }
}

/// Builds a condition; its `lastTransitionTime` is a placeholder that [`set`] fills in.
pub fn new(
    type_: &str,
    status: impl Into<ConditionStatus>,
    reason: &str,
    message: impl Into<String>,
    observed_generation: Option<i64>,
) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: status.into().as_str().to_owned(),
        reason: reason.to_owned(),
        message: message.into(),
        observed_generation,
        last_transition_time: Time(Timestamp::UNIX_EPOCH),
    }
}

/// The condition of `type_`, if present.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition of `type_` is present with status `True`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    has_status(conditions, type_, ConditionStatus::True)
}

/// Whether the condition of `type_` is present with the given status.
pub fn has_status(conditions: &[Condition], type_: &str, status: ConditionStatus) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == status.as_str())
}

/// Sets `condition` by type, keeping the existing `lastTransitionTime` unless the status
/// changes (then it becomes `now`). Returns whether anything changed.
pub fn set(conditions: &mut Vec<Condition>, mut condition: Condition, now: &Time) -> bool {
    let Some(existing) = conditions.iter_mut().find(|c| c.type_ == condition.type_) else {
        condition.last_transition_time = now.clone();
        conditions.push(condition);
        return true;
    };
    condition.last_transition_time = if existing.status == condition.status {
        existing.last_transition_time.clone()
    } else {
        now.clone()
    };
    if *existing == condition {
        return false;
    }
    *existing = condition;
    true
}

/// Removes the condition of `type_`. Returns whether one was removed.
pub fn remove(conditions: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_);
    conditions.len() != before
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consts::{condition, reason};

    fn at(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).unwrap())
    }

    #[test]
    fn set_appends_a_new_condition_stamped_now() {
        let mut conditions = Vec::new();
        let changed = set(
            &mut conditions,
            new(condition::READY, false, reason::PENDING, "waiting", Some(1)),
            &at(10),
        );
        assert!(changed);
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].status, "False");
        assert_eq!(conditions[0].last_transition_time, at(10));
        assert_eq!(conditions[0].observed_generation, Some(1));
    }

    #[test]
    fn same_status_keeps_transition_time_but_updates_reason_and_message() {
        let mut conditions = Vec::new();
        set(
            &mut conditions,
            new(condition::READY, false, reason::PENDING, "waiting", Some(1)),
            &at(10),
        );
        let changed = set(
            &mut conditions,
            new(
                condition::READY,
                false,
                reason::SECRET_NOT_FOUND,
                "secret kbind/acme not found",
                Some(2),
            ),
            &at(20),
        );
        assert!(changed);
        assert_eq!(conditions[0].last_transition_time, at(10));
        assert_eq!(conditions[0].reason, "SecretNotFound");
        assert_eq!(conditions[0].message, "secret kbind/acme not found");
        assert_eq!(conditions[0].observed_generation, Some(2));
    }

    #[test]
    fn status_flip_moves_transition_time() {
        let mut conditions = Vec::new();
        set(
            &mut conditions,
            new(condition::READY, false, reason::PENDING, "", None),
            &at(10),
        );
        set(
            &mut conditions,
            new(condition::READY, true, reason::AS_EXPECTED, "", None),
            &at(30),
        );
        assert_eq!(conditions[0].status, "True");
        assert_eq!(conditions[0].last_transition_time, at(30));
    }

    #[test]
    fn identical_condition_reports_no_change() {
        let mut conditions = Vec::new();
        set(
            &mut conditions,
            new(condition::CONNECTED, true, reason::AS_EXPECTED, "", Some(3)),
            &at(10),
        );
        let before = conditions.clone();
        let changed = set(
            &mut conditions,
            new(condition::CONNECTED, true, reason::AS_EXPECTED, "", Some(3)),
            &at(99),
        );
        assert!(!changed);
        assert_eq!(conditions, before);
    }

    #[test]
    fn conditions_of_other_types_are_untouched() {
        let mut conditions = Vec::new();
        set(
            &mut conditions,
            new(condition::CONNECTED, true, reason::AS_EXPECTED, "", None),
            &at(10),
        );
        set(
            &mut conditions,
            new(condition::READY, ConditionStatus::Unknown, reason::PENDING, "", None),
            &at(20),
        );
        assert!(is_true(&conditions, condition::CONNECTED));
        assert!(!is_true(&conditions, condition::READY));
        assert!(has_status(&conditions, condition::READY, ConditionStatus::Unknown));
        assert!(find(&conditions, condition::SYNCED).is_none());
        assert!(remove(&mut conditions, condition::READY));
        assert!(!remove(&mut conditions, condition::READY));
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].last_transition_time, at(10));
    }
}

//! `Observed`: one condition's value as a reconcile saw it, before it becomes a
//! `metav1.Condition` (shared by the Connection and binding reconcilers).

use kbind_api::conditions::ConditionStatus;
use kbind_api::consts::reason;

/// One condition's observed value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Observed {
    /// True, False or Unknown.
    pub status: ConditionStatus,
    /// Machine-readable reason.
    pub reason: &'static str,
    /// Human-readable message; never carries credentials.
    pub message: String,
}

impl Observed {
    /// `True`, reason `AsExpected`.
    pub(crate) fn ok(message: impl Into<String>) -> Self {
        Self::new(ConditionStatus::True, reason::AS_EXPECTED, message)
    }

    /// `False` with `reason`.
    pub(crate) fn not(reason: &'static str, message: impl Into<String>) -> Self {
        Self::new(ConditionStatus::False, reason, message)
    }

    /// Any status and reason.
    pub(crate) fn new(status: ConditionStatus, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            reason,
            message: message.into(),
        }
    }

    /// Whether the condition holds (`True`).
    pub(crate) fn holds(&self) -> bool {
        self.status == ConditionStatus::True
    }
}

//! The leader-only [`Component`] `audit-reports`: each audit round's
//! violations as OpenReports `Report` objects (`openreports.io/v1alpha1`),
//! one per namespace with violations, named `poolkeeper-placement`. The
//! pure core ([`desired_reports`], [`plan`]) says what the reports should
//! hold and which writes bring the stored ones in step; the component
//! writes them with server-side apply (field manager `poolkeeper`) and
//! deletes the reports of namespaces whose last violation is gone.

mod report;
mod writer;

pub use report::{
    CONTENT_HASH, Desired, MANAGED_BY, POLICY, REPORT_NAME, SOURCE, Write, desired_reports, plan,
    result_of,
};
pub use writer::{AuditReports, ReportSettings, ReportsError};

#[cfg(test)]
mod tests;

/// The code of this crate's README, compiled (and run where it can be) as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

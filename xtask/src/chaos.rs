//! Leader safety under faults on the real-cluster tier. The oracle ([`oracle`]) is the API
//! server's audit log: every write by poolkeeper's ServiceAccount is attributed to a replica
//! and checked against the leadership terms the Lease's updates record in the same log.

pub mod oracle;

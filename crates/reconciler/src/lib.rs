//! poolkeeper-reconciler

//! poolkeeper-health

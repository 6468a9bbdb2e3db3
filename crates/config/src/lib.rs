//! poolkeeper-config

//! poolkeeper-executor

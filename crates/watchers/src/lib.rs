//! poolkeeper-watchers

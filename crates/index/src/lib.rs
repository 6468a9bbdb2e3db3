//! poolkeeper-index

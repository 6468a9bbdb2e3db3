//! poolkeeper-testenv

//! poolkeeper-api

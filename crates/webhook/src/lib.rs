//! poolkeeper-webhook

//! poolkeeper-placement

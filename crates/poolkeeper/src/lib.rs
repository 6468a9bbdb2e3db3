//! The poolkeeper binary: command line, logging and the wiring of every
//! component into the supervisor's stages.

pub mod admit;
pub mod audit;
pub mod cli;
pub mod controller;
pub mod explain;
pub mod input;
pub mod logging;

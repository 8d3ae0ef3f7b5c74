//! `haar bench`: placeholder replaced below.
use clap::Args;

use crate::Failure;
use crate::args::Cli;

/// Options of `haar bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {}

/// Runs the benchmark.
pub fn run(_cli: &Cli, _a: &BenchArgs) -> Result<(), Failure> {
    Err(Failure::usage("bench: not yet built"))
}

//! The one progress bar of the workloads and benchmarks: on stderr, hidden when asked to be
//! quiet and (indicatif's rule) when stderr is not a terminal, so figures on stdout and in
//! files never hold bar output.
//!
//! Owns only the bar's look; counting is the caller's.

use indicatif::{ProgressBar, ProgressStyle};

/// A bar of `len` steps labelled `what`; hidden when `quiet`.
pub fn bar(len: u64, what: &str, quiet: bool) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let b = ProgressBar::new(len);
    b.set_style(
        ProgressStyle::with_template("{spinner} {msg:32} {bar:30} {pos}/{len} {per_sec} {elapsed}")
            .expect("valid template"),
    );
    b.set_message(what.to_string());
    b
}

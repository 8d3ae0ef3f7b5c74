//! The one error type of the workloads and benchmarks. It says what kind of failure a run met
//! (parameters, missing data, a failed run, the OS, the store under test) and keeps the cause;
//! exit codes are the face's business (the CLI maps kinds onto 1/2/3).
//!
//! Owns nothing else: no printing, no exit codes.

/// What stopped a workload or benchmark.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Parameters that cannot be run (a shape, a directory, a backend name); nothing started.
    #[error("{0}")]
    Usage(String),
    /// Data the run needed is not in the store (e.g. a read run against a store written with
    /// other parameters, or a step that never completed).
    #[error("{0}")]
    Missing(String),
    /// The run failed: a worker died or misbehaved, a field read back wrong, a peer failed.
    #[error("{0}")]
    Failed(String),
    /// An operating-system call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done, naming the file or program (e.g. `cannot write /tmp/w.json`).
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The store under test (haar through any front-end, or FDB5) refused or failed.
    #[error(transparent)]
    Store(#[from] haar_store::Error),
    /// Ctrl-C or SIGTERM: every worker and server was stopped and temporary stores removed.
    #[error("interrupted: stopped every worker and server, removed temporary stores")]
    Interrupted,
}

/// Results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `map_err(io("cannot create DIR"))`: an OS error with what was being done.
pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}

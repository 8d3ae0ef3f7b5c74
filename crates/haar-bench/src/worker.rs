//! Worker processes as the parent starts them and as they start: the spec a worker is given
//! (JSON on its command line), the command that re-executes the current `haar` executable as
//! `haar [GLOBALS] workload-worker --spec JSON` with the store options the parent was given, and
//! the worker's entry point (docs/design.md §10.1).
//!
//! Owns the worker's command line only; the line protocol is [`crate::procs`]'s, what a
//! worker does is [`crate::hammer`]'s, [`crate::workflow`]'s and [`crate::scale`]'s.

use std::ffi::OsString;
use std::process::Command;

use haar::{ConfigSource, OpenOptions};
use serde::{Deserialize, Serialize};

use crate::error::{Error, io};
use crate::procs::Reporter;
use crate::{hammer, scale, workflow};

/// What a `haar workload-worker` process is told to do (JSON on its command line).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkerSpec {
    /// A hammer writer, reader or lister.
    Hammer(hammer::Spec),
    /// An ensemble member writing its fields.
    Producer(workflow::ProducerSpec),
    /// A product-generation job.
    Consumer(workflow::ConsumerSpec),
    /// One store of `haar bench --scale`, filled and measured on the parent's word.
    Scale(scale::Spec),
    /// One end of a TCP stream between two nodes (`haar hammer --vcluster`'s link limit).
    Link(crate::table8::LinkSpec),
}

/// Runs one worker process (started by `haar hammer` or `haar workflow`): `spec` is the JSON
/// its parent gave, `opts` the store options on its command line.
pub fn run(opts: &OpenOptions, spec: &str) -> Result<(), Error> {
    let spec: WorkerSpec = serde_json::from_str(spec)
        .map_err(|e| Error::Usage(format!("workload-worker: bad --spec: {e}")))?;
    let rep = Reporter::take_stdout()?;
    match spec {
        WorkerSpec::Hammer(s) => hammer::worker(opts, s, rep),
        WorkerSpec::Producer(s) => workflow::producer(opts, s, rep),
        WorkerSpec::Consumer(s) => workflow::consumer(opts, s, rep),
        WorkerSpec::Scale(s) => scale::worker(opts, s, rep),
        WorkerSpec::Link(s) => crate::table8::link_worker(s, rep),
    }
}

/// The global options that make a worker open the same store as `opts` describes: the
/// command-line form of [`OpenOptions`].
///
/// # Errors
/// [`Error::Usage`] for a configuration given as YAML text, which has no command-line form.
pub fn globals(opts: &OpenOptions) -> Result<Vec<OsString>, Error> {
    let mut v: Vec<OsString> = Vec::new();
    let mut push = |flag: &str, value: OsString| {
        v.push(flag.into());
        v.push(value);
    };
    match &opts.config {
        ConfigSource::Defaults => {}
        ConfigSource::File(c) => push("--config", c.into()),
        ConfigSource::Yaml { origin, .. } => {
            return Err(Error::Usage(format!(
                "workers cannot be given the configuration {origin} (YAML text): write it to a file"
            )));
        }
    }
    if let Some(r) = &opts.root {
        push("--root", r.into());
    }
    if let Some(b) = &opts.backend {
        push("--backend", b.into());
    }
    if let Some(s) = &opts.servers {
        push("--servers", s.join(",").into());
        push("--replicas", opts.replicas.to_string().into());
    }
    if let Some(t) = &opts.token_file {
        push("--token-file", t.into());
    }
    if let Some(t) = &opts.tls_ca {
        push("--tls-ca", t.into());
    }
    Ok(v)
}

/// A `haar [GLOBALS] workload-worker --spec JSON` command (the current executable again).
pub fn command(globals: &[OsString], spec: &WorkerSpec) -> Result<Command, Error> {
    let exe = std::env::current_exe().map_err(io("cannot find the haar executable"))?;
    let mut cmd = Command::new(exe);
    cmd.env_remove("HAAR_CONFIG").args(globals);
    let text = serde_json::to_string(spec).expect("spec serialises");
    cmd.args(["workload-worker", "--spec", &text]);
    Ok(cmd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globals_are_the_command_line_form_of_the_open_options() {
        let o = OpenOptions {
            config: ConfigSource::File("/etc/haar.yaml".into()),
            servers: Some(vec!["a:1".into(), "b:2".into()]),
            replicas: 2,
            token_file: Some("/t".into()),
            ..OpenOptions::default()
        };
        let g: Vec<String> = globals(&o)
            .unwrap()
            .into_iter()
            .map(|s| s.into_string().unwrap())
            .collect();
        assert_eq!(
            g,
            [
                "--config",
                "/etc/haar.yaml",
                "--servers",
                "a:1,b:2",
                "--replicas",
                "2",
                "--token-file",
                "/t"
            ]
        );
        assert!(globals(&OpenOptions::default()).unwrap().is_empty());
        let yaml = OpenOptions {
            config: ConfigSource::Yaml {
                text: "backend: posix\n".into(),
                origin: "test".into(),
            },
            ..OpenOptions::default()
        };
        assert!(matches!(globals(&yaml), Err(Error::Usage(_))));
    }
}

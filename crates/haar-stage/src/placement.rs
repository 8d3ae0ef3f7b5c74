//! Data-aware placement of a workflow's consumer job (design §13.6): NEXTGenIO's
//! `--workflow-prior-dependency=JOBID` on upstream Slurm — the consumer depends on its
//! producer (`afterok`, cancelled if the producer fails) and asks for the producer's nodes,
//! where the producer's persisted node-local data lives.
//!
//! Owns reading a job's state and nodes from `scontrol show job -o` and building `sbatch`'s
//! arguments; both are pure. [`producer_nodes`] runs `scontrol`, [`submit_consumer`]
//! `sbatch`.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// What placement needs to know of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobPlace {
    /// `JobState` (`PENDING`, `RUNNING`, `COMPLETED` …).
    pub state: String,
    /// `NodeList` (a Slurm host list), when the job has nodes.
    pub nodes: Option<String>,
}

/// Reads `JobState` and `NodeList` from one job's `scontrol show job -o` line (`KEY=VALUE`
/// fields separated by blanks); `None` when there is no `JobState`.
pub fn parse_job(line: &str) -> Option<JobPlace> {
    let field = |key: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
    };
    let state = field("JobState")?.to_string();
    let nodes = field("NodeList")
        .filter(|n| !n.is_empty() && *n != "(null)")
        .map(String::from);
    Some(JobPlace { state, nodes })
}

/// `sbatch` options placing a consumer of `producer`: the dependency, and the producer's
/// nodes when known.
pub fn consumer_args(producer: &str, nodes: Option<&str>) -> Vec<String> {
    let mut a = vec![
        format!("--dependency=afterok:{producer}"),
        "--kill-on-invalid-dep=yes".to_string(),
    ];
    if let Some(n) = nodes {
        a.push(format!("--nodelist={n}"));
    }
    a
}

/// A Slurm job id (digits, or an array task `N_M`).
pub fn valid_job_id(id: &str) -> bool {
    !id.is_empty() && id.chars().all(|c| c.is_ascii_digit() || c == '_')
}

/// The producer's state and nodes, polling `scontrol` every 0.5 s while it is pending
/// without nodes, for at most `wait`.
pub fn producer_nodes(scontrol: &Path, producer: &str, wait: Duration) -> Result<JobPlace> {
    if !valid_job_id(producer) {
        return Err(Error::Usage(format!(
            "producer job {producer:?}: give a Slurm job id (digits)"
        )));
    }
    let start = Instant::now();
    loop {
        let out = std::process::Command::new(scontrol)
            .args(["show", "job", "-o", producer])
            .output()
            .map_err(|e| Error::io("run", scontrol, e))?;
        if !out.status.success() {
            return Err(Error::Missing(format!(
                "producer job {producer}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let place = parse_job(text.lines().next().unwrap_or("")).ok_or_else(|| {
            Error::Service(format!(
                "producer job {producer}: no JobState in `scontrol show job -o`: {text}"
            ))
        })?;
        if place.nodes.is_some() || place.state != "PENDING" || start.elapsed() >= wait {
            return Ok(place);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Submits a consumer of `producer` with `sbatch` (`extra`: its own options and script),
/// placed by [`consumer_args`] on `nodes`; returns sbatch's standard output and error.
///
/// # Errors
/// sbatch cannot be run, or refuses the job (its exit status and arguments named).
pub fn submit_consumer(
    sbatch: &Path,
    producer: &str,
    nodes: Option<&str>,
    extra: &[String],
) -> Result<(String, String)> {
    let args = consumer_args(producer, nodes);
    let out = std::process::Command::new(sbatch)
        .args(&args)
        .args(extra)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| Error::io("run", sbatch, e))?;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        return Err(Error::Usage(format!(
            "sbatch {} refused the consumer (exit {:?}): {}",
            args.join(" "),
            out.status.code(),
            stderr.trim()
        )));
    }
    Ok((String::from_utf8_lossy(&out.stdout).into_owned(), stderr))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_line_gives_its_state_and_nodes() {
        let running = "JobId=7 JobName=p.sh UserId=u(1000) JobState=RUNNING Reason=None \
                       NodeList=n[01-02] BatchHost=n01 NumNodes=2";
        assert_eq!(
            parse_job(running),
            Some(JobPlace {
                state: "RUNNING".into(),
                nodes: Some("n[01-02]".into())
            })
        );
        let pending =
            "JobId=8 JobState=PENDING Reason=Dependency ReqNodeList=(null) NodeList=(null)";
        assert_eq!(parse_job(pending).unwrap().nodes, None);
        // ReqNodeList is not NodeList.
        let asked = "JobId=9 JobState=PENDING ReqNodeList=n03 NodeList=";
        assert_eq!(parse_job(asked).unwrap().nodes, None);
        assert_eq!(
            parse_job("slurm_load_jobs error: Invalid job id specified"),
            None
        );
    }

    #[test]
    fn a_consumer_depends_on_its_producer_and_asks_for_its_nodes() {
        assert_eq!(
            consumer_args("41", Some("n07")),
            [
                "--dependency=afterok:41",
                "--kill-on-invalid-dep=yes",
                "--nodelist=n07"
            ]
        );
        assert_eq!(consumer_args("41", None).len(), 2);
        assert!(valid_job_id("41") && valid_job_id("41_3"));
        assert!(!valid_job_id("41;rm") && !valid_job_id(""));
    }
}

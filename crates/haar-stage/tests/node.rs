//! Per-node staging (`haar_stage::node`) of one job over three "nodes" in one process: each
//! node its own node-local root and directory, one shared root and one reports directory,
//! as slurm/haar-node.sh calls it on a real cluster (scripts/cluster-test.sh --only stage).

use std::path::{Path, PathBuf};
use std::time::Duration;

use haar_stage::node::{self, JobNode, LOCAL_VAR};
use haar_stage::{Dataspaces, ErrorClass};

struct Cluster {
    dir: tempfile::TempDir,
    nodes: Vec<String>,
}

impl Cluster {
    fn new(n: usize) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        for sub in ["shared/in", "reports"] {
            std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        Cluster {
            dir,
            nodes: (1..=n).map(|i| format!("n{i}")).collect(),
        }
    }
    fn root(&self) -> &Path {
        self.dir.path()
    }
    fn local(&self, node: &str) -> PathBuf {
        self.root().join("pmem").join(node)
    }
    /// The dataspaces as `node` sees them: `local` is its own.
    fn spaces(&self, node: &str) -> Dataspaces {
        let text = format!(
            "dataspaces:\n  shared: {{kind: shared, path: {}}}\n  local: {{kind: posix, path: {}}}\n",
            self.root().join("shared").display(),
            self.local(node).display()
        );
        std::fs::create_dir_all(self.local(node)).unwrap();
        Dataspaces::load(haar::ConfigSource::Yaml {
            text,
            origin: "test".into(),
        })
        .unwrap()
    }
    fn job(&self, node: &str) -> JobNode {
        JobNode {
            node: node.into(),
            nodes: node::hostlist(&format!("n[1-{}]", self.nodes.len())).unwrap(),
            dir: self.root().join("run").join(node).join("job7"),
            reports: Some(self.root().join("reports")),
        }
    }
    fn plan(&self, text: &str) -> PathBuf {
        let p = self.root().join("plan");
        std::fs::write(&p, text).unwrap();
        p
    }
}

#[test]
fn stage_in_lands_on_every_node_spreads_by_pattern_and_stage_out_gathers() {
    let c = Cluster::new(3);
    let shared = c.root().join("shared");
    std::fs::write(shared.join("in/common.txt"), b"every node").unwrap();
    for m in 0..5 {
        std::fs::write(shared.join(format!("in/m{m}.grib")), format!("member {m}")).unwrap();
    }
    let plan = c.plan(
        "stage_in shared:in/common.txt local:job7/common.txt\n\
         stage_in shared:in local:job7/members spread=m*.grib\n\
         stage_out local:job7/out shared:out/7\n",
    );
    for n in &c.nodes {
        let done = node::stage_in(c.spaces(n), &plan, &c.job(n)).unwrap();
        assert_eq!(done.local, c.local(n).join("job7"));
        // The job writes its output on each node.
        std::fs::create_dir_all(c.local(n).join("job7/out")).unwrap();
        std::fs::write(c.local(n).join("job7/out/result"), format!("from {n}")).unwrap();
    }
    let mut dealt = Vec::new();
    for (i, n) in c.nodes.iter().enumerate() {
        let job7 = c.local(n).join("job7");
        assert_eq!(
            std::fs::read(job7.join("common.txt")).unwrap(),
            b"every node"
        );
        let mut here: Vec<String> = std::fs::read_dir(job7.join("members"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        here.sort();
        // Round-robin by name over n1, n2, n3: m0 m3 | m1 m4 | m2.
        let want: Vec<String> = (0..5)
            .filter(|m| m % 3 == i)
            .map(|m| format!("m{m}.grib"))
            .collect();
        assert_eq!(here, want, "{n}");
        dealt.extend(here);
        let env = node::environment(&c.job(n), &plan, Duration::from_secs(5)).unwrap();
        assert_eq!(
            env,
            [(LOCAL_VAR.to_string(), job7.display().to_string())],
            "{n}"
        );
    }
    assert_eq!(dealt.len(), 5, "every member file on exactly one node");
    for n in &c.nodes {
        let out = node::stage_out(c.spaces(n), &c.job(n)).unwrap();
        assert_eq!(out.tasks.len(), 1);
        // Teardown removed what was staged in and the stage-out source.
        assert!(!c.local(n).join("job7/common.txt").exists(), "{n}");
        assert!(!c.local(n).join("job7/out").exists(), "{n}");
        // And the job's directory, empty now, went with it; the tier's root stays.
        assert!(!c.local(n).join("job7").exists(), "{n}");
        assert!(c.local(n).is_dir(), "{n}");
    }
    for n in &c.nodes {
        let got = std::fs::read_to_string(shared.join(format!("out/7/{n}/result"))).unwrap();
        assert_eq!(got, format!("from {n}"));
    }
}

#[test]
fn a_stage_in_failing_on_one_node_fails_every_node_s_tasks_naming_it() {
    let c = Cluster::new(3);
    std::fs::write(c.root().join("shared/in/a"), b"x").unwrap();
    let plan = c.plan("stage_in shared:in/a local:job7/a\n");
    // On n2 a directory holding a file stands where the staged file must go.
    c.spaces("n2");
    std::fs::create_dir_all(c.local("n2").join("job7/a")).unwrap();
    std::fs::write(c.local("n2").join("job7/a/x"), b"in the way").unwrap();
    for n in &c.nodes {
        let r = node::stage_in(c.spaces(n), &plan, &c.job(n));
        assert_eq!(r.is_err(), n == "n2", "{n}: {r:?}");
    }
    for n in &c.nodes {
        let e = node::environment(&c.job(n), &plan, Duration::from_secs(5)).unwrap_err();
        let text = e.to_string();
        assert!(
            text.starts_with("on node n2: ") && text.contains("#HAAR stage_in shared:in/a"),
            "{n}: {text}"
        );
    }
    // A missing source is a missing source on every node, and says so.
    let c = Cluster::new(2);
    let plan = c.plan("stage_in shared:nothing local:job7/a\n");
    let e = node::stage_in(c.spaces("n1"), &plan, &c.job("n1")).unwrap_err();
    assert_eq!(e.class(), ErrorClass::Missing, "{e}");
    let e = node::environment(&c.job("n2"), &plan, Duration::from_millis(300)).unwrap_err();
    assert!(e.to_string().contains("no staging directory"), "{e}");
}

#[test]
fn a_node_that_never_reports_holds_the_tasks_back_then_is_named() {
    let c = Cluster::new(2);
    std::fs::write(c.root().join("shared/in/a"), b"x").unwrap();
    let plan = c.plan("stage_in shared:in/a local:job7/a\n");
    node::stage_in(c.spaces("n1"), &plan, &c.job("n1")).unwrap();
    let e = node::environment(&c.job("n1"), &plan, Duration::from_millis(400)).unwrap_err();
    assert!(
        e.to_string().starts_with("on node n2: no stage-in report"),
        "{e}"
    );
    // Without a plan there is nothing to say and nothing to wait for.
    let none = c.root().join("no-plan");
    let job = JobNode {
        dir: c.root().join("run/n9/job8"),
        ..c.job("n1")
    };
    assert!(
        node::environment(&job, &none, Duration::ZERO)
            .unwrap()
            .is_empty()
    );
}

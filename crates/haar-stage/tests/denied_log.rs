//! A user hammering a denied request does not flood the stage service's log (issue 27): the
//! first denial of a (uid, cause) is logged whole, later ones are counted and logged as one
//! summary line at most once per period, and every denial is accounted for. The service is
//! real (`Daemon` on a Unix socket, requests through `Client`); its log is caught by a
//! subscriber of this test's own. A draining node denies every submission, whoever asks.
//!
//! One test in this binary: it installs the process's global subscriber.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use haar_stage::daemon::{self, Client, Daemon, DaemonConfig, Limits};
use haar_stage::{Dataspaces, Direction, Mapping, TaskSpec};
use tracing::field::{Field, Visit};

/// One logged event: its message and its `denied` count, if any.
#[derive(Debug, Clone, Default)]
struct Logged {
    message: String,
    denied: Option<u64>,
}

impl Visit for Logged {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        }
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == "denied" {
            self.denied = Some(value);
        }
    }
}

/// Keeps every WARN event.
struct Catch(Arc<Mutex<Vec<Logged>>>);

impl tracing::Subscriber for Catch {
    fn enabled(&self, m: &tracing::Metadata<'_>) -> bool {
        *m.level() <= tracing::Level::WARN
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, e: &tracing::Event<'_>) {
        let mut l = Logged::default();
        e.record(&mut l);
        self.0.lock().unwrap().push(l);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[test]
fn a_user_hammering_a_denied_request_is_logged_once_then_counted() {
    let caught = Arc::new(Mutex::new(Vec::new()));
    tracing::subscriber::set_global_default(Catch(caught.clone())).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    for d in ["pfs", "node"] {
        std::fs::create_dir(root.join(d)).unwrap();
    }
    let text = format!(
        "dataspaces:\n  shared: {{kind: shared, path: {0}/pfs}}\n  local: {{kind: posix, path: {0}/node}}\n",
        root.display()
    );
    let socket = root.join("stage.sock");
    let every = Duration::from_secs(2);
    let service = Daemon::open(DaemonConfig {
        socket: socket.clone(),
        state: root.join("state"),
        spaces: Dataspaces::load(haar::ConfigSource::Yaml {
            text,
            origin: "test".into(),
        })
        .unwrap(),
        runner: "/bin/false".into(),
        admin_token: None,
        limits: Limits {
            denied_log_every: every,
            ..Limits::default()
        },
    })
    .unwrap();
    std::fs::write(root.join("state/draining"), b"").unwrap();
    let listener = daemon::bind(&socket).unwrap();
    std::thread::spawn(move || service.serve(listener));

    let spec = TaskSpec {
        id: Some("t".into()),
        direction: Direction::Copy,
        src: "shared:in.bin".into(),
        dst: "local:out.bin".into(),
        mapping: Mapping::Same,
    };
    let denied = |lines: &[Logged]| {
        let first = (lines.iter())
            .filter(|l| l.message.starts_with("request denied"))
            .count();
        let again: Vec<u64> = lines.iter().filter_map(|l| l.denied).collect();
        (first, again)
    };
    // 300 denied submissions on 3 connections, as fast as the service answers.
    let started = Instant::now();
    for _ in 0..3 {
        let mut c = Client::connect(&socket).unwrap();
        for _ in 0..100 {
            let e = c.submit(&spec).unwrap_err();
            assert!(e.to_string().contains("draining"), "{e}");
        }
    }
    let took = started.elapsed();
    let (first, again) = denied(&caught.lock().unwrap());
    assert_eq!(first, 1, "{:?}", caught.lock().unwrap());
    // At most one summary per period passed while hammering.
    let periods = (took.as_secs_f64() / every.as_secs_f64()).ceil() as usize;
    assert!(again.len() <= periods, "{again:?} in {took:?}");

    // The user stops; the next request of anyone brings the count out, once.
    std::thread::sleep(every + Duration::from_millis(200));
    let mut c = Client::connect(&socket).unwrap();
    c.call(haar_stage::daemon::Request::Hello { token: None })
        .unwrap();
    let lines = caught.lock().unwrap().clone();
    let (first, again) = denied(&lines);
    assert_eq!(first, 1, "{lines:?}");
    assert!(!again.is_empty(), "{lines:?}");
    assert_eq!(1 + again.iter().sum::<u64>(), 300, "{lines:?}");
    let summary = (lines.iter().rev()).find(|l| l.denied.is_some()).unwrap();
    assert!(
        summary.message.starts_with("requests denied again")
            && summary.message.contains("draining"),
        "{summary:?}"
    );
}

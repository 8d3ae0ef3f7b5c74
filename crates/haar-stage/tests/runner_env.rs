//! A task's runner gets an environment built from an allow-list, never the stage service's
//! own (issue 27: alice read `HAAR_TOKEN`, `AWS_SECRET_ACCESS_KEY` and `HOME=/root` from her
//! runner's /proc/PID/environ). The service here is real (`Daemon` on a Unix socket, a task
//! submitted through `Client`); its runner is a script that saves the environment it was
//! given. Run as root (CI), the runner runs under the caller's uid as in production.
//!
//! One test in this binary: it sets the service's environment, which is the process's.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use haar_stage::daemon::{self, Client, Daemon, DaemonConfig, Limits};
use haar_stage::{Dataspaces, Direction, Mapping, State, TaskSpec};

#[test]
fn a_runner_gets_an_allow_listed_environment_and_its_users_home_not_the_services() {
    // SAFETY: the only test of this binary, before it starts any thread of its own.
    unsafe {
        std::env::set_var("HAAR_TOKEN", "service-token-0123456789");
        std::env::set_var("AWS_SECRET_ACCESS_KEY", "aws-secret-0123456789");
        std::env::set_var("HOME", "/service/home");
        std::env::set_var("LANG", "C.UTF-8");
        std::env::set_var("HAAR_LOG", "debug");
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o1777)).unwrap();
    for d in ["pfs", "node"] {
        std::fs::create_dir(root.join(d)).unwrap();
    }
    std::fs::write(root.join("pfs/in.bin"), b"GRIB....7777").unwrap();
    let saved = root.join("runner.env");
    let runner = root.join("runner.sh");
    std::fs::write(&runner, format!("#!/bin/sh\nenv > {}\n", saved.display())).unwrap();
    std::fs::set_permissions(&runner, std::fs::Permissions::from_mode(0o755)).unwrap();
    let text = format!(
        "dataspaces:\n  shared: {{kind: shared, path: {0}/pfs}}\n  local: {{kind: posix, path: {0}/node}}\n",
        root.display()
    );
    let socket = root.join("stage.sock");
    let service = Daemon::open(DaemonConfig {
        socket: socket.clone(),
        state: root.join("state"),
        spaces: Dataspaces::load(haar::ConfigSource::Yaml {
            text,
            origin: "test".into(),
        })
        .unwrap(),
        runner,
        admin_token: None,
        limits: Limits::default(),
    })
    .unwrap();
    let listener = daemon::bind(&socket).unwrap();
    std::thread::spawn(move || service.serve(listener));

    let mut c = Client::connect(&socket).unwrap();
    let rec = c
        .submit(&TaskSpec {
            id: Some("t".into()),
            direction: Direction::Copy,
            src: "shared:in.bin".into(),
            dst: "local:out.bin".into(),
            mapping: Mapping::Same,
        })
        .unwrap();
    // The script runs no task: the service fails it once the script has ended.
    let rec = c
        .wait(&rec.id, Some(Duration::from_secs(60)), &mut |_| {})
        .unwrap();
    assert_eq!(rec.state, State::Failed, "{rec:?}");
    let env = std::fs::read_to_string(&saved).unwrap();
    let vars: Vec<(&str, &str)> = env.lines().filter_map(|l| l.split_once('=')).collect();
    let get = |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);

    for secret in ["service-token", "aws-secret", "/service/home"] {
        assert!(!env.contains(secret), "the runner saw {secret}: {env}");
    }
    // SAFETY: getuid cannot fail; getpwuid's result is read at once.
    let (home, name) = unsafe {
        let pw = libc::getpwuid(libc::getuid());
        assert!(!pw.is_null());
        (
            std::ffi::CStr::from_ptr((*pw).pw_dir)
                .to_string_lossy()
                .into_owned(),
            std::ffi::CStr::from_ptr((*pw).pw_name)
                .to_string_lossy()
                .into_owned(),
        )
    };
    assert_eq!(get("HOME"), Some(home.as_str()), "{env}");
    assert_eq!(get("USER"), Some(name.as_str()), "{env}");
    assert_eq!(get("LANG"), Some("C.UTF-8"), "{env}");
    assert_eq!(get("HAAR_LOG"), Some("debug"), "{env}");
    assert!(get("PATH").is_some(), "{env}");
    // Nothing else of the service's: only the allow-list (and what sh itself sets).
    for (k, _) in &vars {
        assert!(
            matches!(
                *k,
                "PATH" | "LANG" | "HAAR_LOG" | "HOME" | "USER" | "LOGNAME" | "PWD" | "SHLVL" | "_"
            ) || k.starts_with("LC_")
                || *k == "TZ"
                || *k == "LANGUAGE",
            "the runner got {k} from the service: {env}"
        );
    }
}

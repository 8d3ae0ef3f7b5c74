//! Server processes shared by the extraction tests over servers (`extract_dist.rs`,
//! `extract_select.rs`): each test binary starts itself again as its server (an ignored test
//! `child_server` calling [`serve_child`]); starting and waiting for it, and the TCP relay in
//! front of each server that counts the bytes it sends, are haar-testkit's.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use haar::{ConfigSource, FieldStore, OpenOptions};
use haar_testkit::{Announce, ServerProcess};

/// The body of a test binary's server process: `haar serve` over the pmem root named by the
/// environment variable `child_env` (nothing when it is unset), printing `listening on ADDR`.
pub fn serve_child(child_env: &str) {
    serve_child_with(child_env, "backend: pmem\n");
}

/// [`serve_child`] over a store of configuration `yaml` (a posix store starts in a fraction of
/// the time a new 1 GiB pmem pool takes, for tests that need no pool).
pub fn serve_child_with(child_env: &str, yaml: &str) {
    let Some(root) = std::env::var_os(child_env) else {
        return;
    };
    let root = PathBuf::from(root);
    let opts = OpenOptions {
        config: ConfigSource::Yaml {
            text: yaml.into(),
            origin: "test".into(),
        },
        root: Some(root.join("store")),
        token_file: Some(root.join("token")),
        ..OpenOptions::default()
    };
    let server = haar::serve::bind(
        &opts,
        &haar::serve::ServeOptions {
            listen: "127.0.0.1:0".into(),
            read_token_file: None,
            tls: None,
            limits: haar_net::ServerLimits::default(),
            frame_tags: haar_net::protocol::FrameTags::Auto,
        },
    )
    .unwrap();
    println!("listening on {}", server.local_addr().unwrap());
    std::io::stdout().flush().unwrap();
    haar::serve::run_until_signalled(server).unwrap();
}

/// Starts this test binary again as its server process (its ignored test `child_server`,
/// which calls [`serve_child`] with `child_env`), over `dir` with `token`.
pub fn start_server(dir: &Path, child_env: &str, token: &str) -> ServerProcess {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("token"), token).unwrap();
    ServerProcess::spawn(
        haar_testkit::rerun_self("child_server")
            .env(child_env, dir)
            .env_remove("HAAR_CONFIG")
            .stderr(Stdio::inherit()),
        Announce::AfterHarness,
    )
}

/// `dist` over `servers` (by address) with `replicas`, as every face opens it.
#[allow(dead_code)] // not every test binary opens servers this way
pub fn open_dist(servers: &[String], replicas: usize, token: &Path) -> Box<dyn FieldStore> {
    OpenOptions {
        servers: Some(servers.to_vec()),
        replicas,
        token_file: Some(token.into()),
        ..OpenOptions::default()
    }
    .field_store()
    .unwrap()
}

/// A local store of configuration `yaml` at `root`, to compare the servers' answers with.
#[allow(dead_code)] // not every test binary compares with a local store
pub fn open_local(root: &Path, yaml: &str) -> Box<dyn FieldStore> {
    OpenOptions {
        config: ConfigSource::Yaml {
            text: yaml.into(),
            origin: "test".into(),
        },
        root: Some(root.into()),
        ..OpenOptions::default()
    }
    .field_store()
    .unwrap()
}

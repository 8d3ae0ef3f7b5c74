//! Network figures on this machine: `cargo run --release -p haar-bench --example net_bench --
//! PATH/TO/haar [pmem|posix] [FIELDS] [REPEATS]`. Starts `haar serve` on a fresh root under
//! /dev/shm, prints one JSON line per repeat and frame-tag mode: `auto` (loopback: untagged)
//! and `always` (the client asks for tags, as one off loopback does), alternately.

use haar_bench::bench::net::measure;

fn main() {
    let mut args = std::env::args().skip(1);
    let exe = args
        .next()
        .expect("usage: net_bench PATH/TO/haar [pmem|posix] [FIELDS] [REPEATS]");
    let backend = args.next().unwrap_or_else(|| "pmem".into());
    let fields: usize = args.next().map(|s| s.parse().unwrap()).unwrap_or(800);
    let repeats: usize = args.next().map(|s| s.parse().unwrap()).unwrap_or(3);
    let token = haar_net::auth::nonce();
    use haar_net::protocol::FrameTags;
    for _ in 0..repeats {
        for tags in [FrameTags::Auto, FrameTags::Always] {
            let cfg = haar_net::ClientConfig {
                token: Some(token.clone()),
                frame_tags: tags,
                ..Default::default()
            };
            let dir = tempfile::tempdir_in("/dev/shm").unwrap();
            let server = measure::spawn_server(exe.as_ref(), dir.path(), &backend, &token).unwrap();
            let r = measure::run(&server.addr, &cfg, fields, 800 << 10, 200).unwrap();
            let mut v = serde_json::to_value(&r).unwrap();
            v["frame_tags"] = format!("{tags:?}").to_lowercase().into();
            println!("{v}");
        }
    }
}

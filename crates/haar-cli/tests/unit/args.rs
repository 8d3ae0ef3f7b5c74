//! Unit tests of the command-line grammar (`src/args.rs`): clap's own checks, which options
//! each subcommand shows, every command-line form in use, and where options may be given.
//! Compiled as `args::tests` (a `#[path]` module), kept here with the other tests.

use super::*;
use clap::CommandFactory;

const ALL: [&str; 7] = [
    "config",
    "root",
    "backend",
    "servers",
    "replicas",
    "tls_ca",
    "token_file",
];

fn cli(form: &str) -> Result<Cli, clap::Error> {
    parse_from(form.split_whitespace())
}

#[test]
fn the_grammar_passes_clap_s_own_checks() {
    Cli::command().debug_assert();
}

/// What each subcommand takes is what its code reads: a local store (`--config`, `--root`,
/// `--backend`), servers (`--servers`, `--replicas`, `--tls-ca`), the token, or nothing.
#[test]
fn each_subcommand_takes_the_options_it_uses() {
    let store: &[&str] = &["config", "root", "backend"];
    let client: &[&str] = &["config", "servers", "replicas", "tls_ca", "token_file"];
    let expected: &[(&str, &[&str])] = &[
        ("archive", &ALL),
        ("list", &ALL),
        ("retrieve", &ALL),
        ("extract", &ALL),
        ("axes", &ALL),
        ("wipe", &ALL),
        ("purge", &ALL),
        ("info", &ALL),
        ("hammer", &ALL),
        ("workload-worker", &ALL),
        ("mount", &ALL),
        ("schema", store),
        ("compact", store),
        ("import-fdb5", store),
        ("serve", &["config", "root", "backend", "token_file"]),
        ("watch", client),
        ("wait", client),
        ("workflow", client),
        ("cluster", &["root", "backend", "servers", "token_file"]),
        ("bench", &[]),
        ("stream", &[]),
        ("advise", &[]),
        ("run", &[]),
        ("generate", &[]),
        ("stage", &["config", "token_file"]),
    ];
    for sub in Cli::command().get_subcommands() {
        let name = sub.get_name();
        let (_, want) = expected
            .iter()
            .find(|(n, _)| *n == name)
            .unwrap_or_else(|| panic!("say which store and server options `{name}` takes"));
        let mut takes: Vec<&str> = ALL
            .into_iter()
            .filter(|id| sub.get_arguments().any(|a| a.get_id() == *id))
            .collect();
        let mut want = want.to_vec();
        takes.sort_unstable();
        want.sort_unstable();
        assert_eq!(takes, want, "haar {name}");
    }
}

/// The forms of the README, docs/cluster.md, scripts/, bench/ and the workers' re-exec.
#[test]
fn the_forms_in_use_still_parse() {
    for form in [
        "haar --backend pmem --root /dev/shm/haar archive data.grib",
        "haar archive --root /d data.grib",
        "haar --backend pmem --root /dev/shm/h hammer --members 4 --steps 10 --procs 2",
        "haar --config d.yaml --token-file t hammer --procs 2 --mode read",
        "haar serve --listen 0.0.0.0:7000 --root /dev/shm/haar --backend pmem",
        "haar --root /d --backend pmem serve --listen 0.0.0.0:7070 --token-file t",
        "haar --config c.yaml serve --listen 127.0.0.1:0 --token-file t",
        "haar serve --listen 127.0.0.1:0 --max-connections 512 --max-unauthenticated 32 --handshake-timeout 5 --idle-timeout 300 --write-timeout 30 --frame-tags always",
        "haar --servers n1:7000,n2:7000 --replicas 2 archive data.grib",
        "haar --servers n1:7000,n2:7000 wait step=12",
        "haar --servers n1:7000,n2:7000 --replicas 2 wait step=12",
        "haar --servers h:1 --token-file t wait step=12 --timeout 10",
        "haar --servers h:1 watch class=od --json",
        "haar --config c.yaml watch class=od",
        "haar --servers 3 cluster --root /dev/shm/dev",
        "haar --servers 3 --backend pmem --root /d cluster",
        "haar cluster --servers 4 --root /d",
        "haar --config c.yaml list class=od",
        "haar --servers h:1 --tls-ca ca.pem list",
        "haar --servers h:1 --token-file t info",
        "haar --token-file t archive --key class=od f.bin",
        "haar --config c.yaml --root /r import-fdb5 --fdb-config f.yaml --batch 300",
        "haar --servers n1:7000,n2:7000 --token-file t workflow --backends haar",
        "haar --replicas 4 workflow --nodes 3",
        "haar --root /r --backend posix schema --check /etc/fdb/schema",
        "haar bench --scale --sizes 1e5,1e6,1e7 --backend posix --root /d --out o --json s.json",
        "haar bench --scale --field-bytes 512 --runs 3 --no-fdb5 --keep --quiet",
        "haar compact --full",
        "haar --backend pmem --root /dev/shm/h mount /mnt/h",
        "haar mount --daemon --log /tmp/m.log --fs-name scratch --threads 4 --allow-other /mnt/h --root /d",
        "haar --servers n1:7000,n2:7000 mount /mnt/h",
        "haar run --heap /dev/shm:2G -- python3 -c print(1)",
        "haar run --heap /mnt/pmem_fsdax0 -- ./app --verbose -x",
        "haar --backend pmem --root /d compact class=od --json",
        "haar --root /r --backend posix generate man /d",
        "haar --root /r generate completions bash",
        "haar stage in shared:in.grib local:job1/in.grib",
        "haar --config c.yaml stage out local:out shared:out --mapping into --id o1 --detach --json",
        "haar stage --config c.yaml --journal /j copy nv:class=od,step=0/6 /tmp/x.grib --quiet",
        "haar stage status --json",
        "haar stage wait t1 --timeout 30",
        "haar stage cancel t1",
        "haar stage resume t1 --quiet",
        "haar stage teardown --journal /j",
        "haar stage persist share local:keep1 alice",
        "haar stage persist list --json",
        "haar stage rates --journal /j",
        "haar --config c.yaml --root /r --backend pmem --servers a:1,b:2 --replicas 2 \
         --token-file t --tls-ca ca.pem workload-worker --spec {}",
    ] {
        if let Err(e) = cli(form) {
            panic!("{form}: {e}");
        }
    }
}

#[test]
fn the_value_after_the_subcommand_wins() {
    let given = |form: &str| crate::open::given(&cli(form).unwrap());
    let g = given("haar --root a --servers s:1 --replicas 2 list --root b");
    assert_eq!(g.local.root, Some("b".into()));
    assert_eq!(g.servers.servers.as_deref(), Some("s:1"));
    assert_eq!(g.servers.replicas, Some(2));
    let o = crate::open::open_options(&cli("haar list --tls-ca ca.pem --token-file t").unwrap());
    assert_eq!(o.tls_ca, Some("ca.pem".into()));
    assert_eq!(o.token_file, Some("t".into()));
    assert_eq!(o.replicas, 1);
    // `cluster`'s count, in either place.
    assert_eq!(
        given("haar --servers 3 cluster").servers.servers.as_deref(),
        Some("3")
    );
    let g = given("haar --servers 3 cluster --servers 4 --backend pmem");
    assert_eq!(g.servers.servers.as_deref(), Some("4"));
    assert_eq!(g.local.backend.as_deref(), Some("pmem"));
}

#[test]
fn an_option_before_a_subcommand_that_does_not_use_it_is_refused() {
    for (form, flag) in [
        ("haar --servers x:1 stream", "--servers"),
        ("haar --root /r bench", "--root"),
        ("haar --tls-ca ca.pem serve", "--tls-ca"),
        ("haar --config c.yaml cluster --servers 2", "--config"),
        ("haar --backend pmem watch", "--backend"),
        ("haar --servers x:1 generate completions bash", "--servers"),
        ("haar --root /r run --heap /d -- true", "--root"),
    ] {
        let e = cli(form).err().unwrap_or_else(|| panic!("{form} parsed"));
        assert!(
            e.to_string().contains(&format!("{flag} is not an option")),
            "{form}: {e}"
        );
    }
}

#[test]
fn verbosity_counts_before_or_after_the_subcommand() {
    assert_eq!(cli("haar serve").unwrap().verbose, 0);
    assert_eq!(cli("haar -v serve").unwrap().verbose, 1);
    assert_eq!(cli("haar serve -vv").unwrap().verbose, 2);
    assert_eq!(cli("haar serve --verbose -v").unwrap().verbose, 2);
    assert_eq!(cli("haar --root /tmp/x list -v").unwrap().verbose, 1);
    // `-v` (the log's verbosity) is global: every subcommand takes it.
    let mut cmd = Cli::command();
    cmd.build();
    // (`help`, clap's own, takes no option.)
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        assert!(
            sub.get_arguments().any(|a| a.get_id() == "verbose"),
            "haar {} does not take -v",
            sub.get_name()
        );
    }
}

#[test]
fn run_keeps_the_command_s_own_options_and_parses_the_placement() {
    let c = cli("haar run --heap /dev/shm:2G -- ./app --heap x -v").unwrap();
    let Command::Run(r) = c.command else {
        panic!("not run")
    };
    assert_eq!(r.heap.dir, std::path::PathBuf::from("/dev/shm"));
    assert_eq!(r.heap.size, Some(2 << 30));
    assert_eq!(r.command, ["./app", "--heap", "x", "-v"]);
    let e = cli("haar run --heap /d:1K -- true")
        .unwrap_err()
        .to_string();
    assert!(e.contains("too small"), "{e}");
    assert!(cli("haar run --heap /d").is_err(), "a command is required");
}

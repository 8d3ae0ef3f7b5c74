//! `haar`: the one command-line tool, a face of the library crates (`haar` opens stores and
//! ingests GRIB, `haar-bench` runs the workloads): it owns argument parsing, output formats and
//! exit codes only (0 ok, 1 bad usage or request, 2 data missing, 3 I/O or
//! corruption). A closed stdout (`haar list | head`) is not a failure: the command stops and
//! haar exits 0 without a message, as Unix tools do.

#![warn(missing_docs)]
#![warn(unreachable_pub)]

/// `println!` for a command's results: returns `Result<(), Failure>` instead of panicking when
/// stdout cannot be written, so a closed pipe ends the command quietly and any other write
/// error is exit 3 (see `commands::out_err`).
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::commands::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` for a command's results; see `outln!`.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::commands::write_stdout(format_args!($($arg)*))
    };
}

mod args;
mod commands;
mod open;

use std::process::ExitCode;

/// A failure with its exit code and message.
#[derive(Debug)]
pub struct Failure {
    code: u8,
    message: String,
}

impl Failure {
    /// Bad usage or request (exit 1).
    pub fn usage(message: impl Into<String>) -> Failure {
        Failure {
            code: 1,
            message: message.into(),
        }
    }
    /// Data missing (exit 2).
    pub fn missing(message: impl Into<String>) -> Failure {
        Failure {
            code: 2,
            message: message.into(),
        }
    }
    /// Stdout's reader went away (`haar list | head`): the command stops where it is and haar
    /// exits 0 without a message, as `cat` or `grep` end under `head`.
    pub fn output_closed() -> Failure {
        Failure {
            code: 0,
            message: String::new(),
        }
    }
    /// A failure with the given exit status, e.g. one a shell would report for a command
    /// that could not be run (126, 127).
    pub fn with_status(code: u8, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }
    /// Exit with `code` and no message: the status of a command haar ran (`haar run`), which
    /// has said what it had to say itself.
    pub fn quiet(code: u8) -> Failure {
        Failure {
            code,
            message: String::new(),
        }
    }
    /// I/O or corruption (exit 3).
    pub fn io(message: impl Into<String>) -> Failure {
        Failure {
            code: 3,
            message: message.into(),
        }
    }
}

/// The exit status of a store error: 1 when the input is at fault, 2 when the data is missing,
/// 3 for storage, server and network failures (the README's table).
pub fn exit_code(e: &haar::Error) -> u8 {
    match e.class() {
        haar::Class::Input => 1,
        haar::Class::Missing => 2,
        _ => 3,
    }
}

impl From<haar::Error> for Failure {
    fn from(e: haar::Error) -> Failure {
        Failure {
            code: exit_code(&e),
            message: e.to_string(),
        }
    }
}

fn main() -> ExitCode {
    let cli = match args::parse() {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            let code = match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => 0,
                _ => 1,
            };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    init_log(
        cli.verbose,
        log_format(&cli.command) == commands::net::LogFormat::Json,
    );
    // A worker's stdout is its parent's protocol pipe (and its println! goes to stderr): a
    // worker that loses it must not pass for one that finished, so it keeps the plain panic.
    #[cfg(feature = "tools")]
    let worker = matches!(cli.command, args::Command::WorkloadWorker(_));
    #[cfg(not(feature = "tools"))]
    let worker = false;
    if !worker {
        exit_quietly_when_stdout_closes();
    }
    match commands::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) if f.code == 0 => ExitCode::SUCCESS,
        Err(f) => {
            if !f.message.is_empty() {
                eprintln!("haar: {}", f.message);
            }
            ExitCode::from(f.code)
        }
    }
}

/// The `--log-format` of the long-running faces (`serve`, `stage daemon`, `mount`); text for
/// every other command.
fn log_format(command: &args::Command) -> commands::net::LogFormat {
    match command {
        args::Command::Serve(a) => a.log_format,
        args::Command::Mount(a) => a.log_format,
        args::Command::Stage(a) => a.log_format(),
        _ => commands::net::LogFormat::Text,
    }
}

/// Events (the server's refusals, failed logins, closed connections; the stage service's
/// denied requests and tasks; the mount's failures and full storage) go to stderr, one line
/// each with their fields (`peer=… reason=…`): warnings and errors by default, more with each
/// `-v`; `HAAR_LOG` (tracing's filter syntax, e.g. `info` or `haar_net=debug`) replaces both.
/// With `json` (`--log-format json`), one JSON object per line: the event's fields at the top
/// level, beside `timestamp`, `level`, `target` and `span` (the connection's).
fn init_log(verbose: u8, json: bool) {
    use tracing_subscriber::EnvFilter;
    let by_flag = ["warn", "info", "debug", "trace"][usize::from(verbose.min(3))];
    let filter = match std::env::var(LOG_ENV) {
        Ok(spec) if !spec.trim().is_empty() => EnvFilter::try_new(&spec).unwrap_or_else(|e| {
            eprintln!("haar: ${LOG_ENV}={spec:?} is not a log filter ({e}); using {by_flag}");
            EnvFilter::new(by_flag)
        }),
        _ => EnvFilter::new(by_flag),
    };
    let log = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false);
    if json {
        log.json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .init();
    } else {
        log.init();
    }
}

/// The environment variable holding the log filter.
const LOG_ENV: &str = "HAAR_LOG";

/// Rust ignores SIGPIPE, so a write to a closed pipe fails with EPIPE and `println!` panics on
/// it. The commands write through `outln!`, which turns EPIPE into `Failure::output_closed`;
/// this hook covers the `println!` calls that remain (archive and import summaries, the
/// workloads and benchmarks): a panic that is exactly "stdout's pipe is closed" ends the
/// process with exit 0 and no message. Every such print comes after the command's work is
/// done and flushed, so nothing acknowledged is lost by stopping there.
fn exit_quietly_when_stdout_closes() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if info.payload_as_str().is_some_and(is_closed_stdout_panic) {
            std::process::exit(0);
        }
        default(info)
    }));
}

/// Whether a panic message is std's `println!` failing on EPIPE: "failed printing to stdout:
/// Broken pipe (os error 32)". The errno is matched, not the (localisable) text.
fn is_closed_stdout_panic(message: &str) -> bool {
    message.starts_with("failed printing to stdout")
        && message.ends_with(&format!("(os error {})", libc::EPIPE))
}

//! `haar`: the one command-line tool. A thin layer over `haar_store::Store`: argument parsing,
//! output formats and exit codes (0 ok, 1 bad usage or request, 2 data missing, 3 I/O or
//! corruption).

mod archive;
mod args;
mod commands;
mod guarded_map;
mod import;
mod open;

use std::process::ExitCode;

use clap::Parser;

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
    /// I/O or corruption (exit 3).
    pub fn io(message: impl Into<String>) -> Failure {
        Failure {
            code: 3,
            message: message.into(),
        }
    }
}

impl From<haar_store::Error> for Failure {
    fn from(e: haar_store::Error) -> Failure {
        Failure {
            code: e.exit_code() as u8,
            message: e.to_string(),
        }
    }
}

fn main() -> ExitCode {
    let cli = match args::Cli::try_parse() {
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
    match commands::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("haar: {}", f.message);
            ExitCode::from(f.code)
        }
    }
}

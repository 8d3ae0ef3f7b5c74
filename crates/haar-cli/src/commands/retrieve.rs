//! `haar retrieve`: the fields of a request, in request order, to a file (written whole, then
//! renamed into place) or stdout; what is missing on stderr and in the exit code.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use clap::Args;
use haar::Key;

use super::{note_fdb5_databases, out_err};
use crate::Failure;
use crate::args::{Cli, OpenArgs};
use crate::open;

/// `haar retrieve`.
#[derive(Debug, Args)]
pub(crate) struct RetrieveArgs {
    /// Request.
    pub request: String,
    /// Output file (written whole, then renamed into place). Default: stdout.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Succeed even if some requested fields are missing (they are still listed on stderr).
    #[arg(long)]
    pub allow_missing: bool,
    #[command(flatten)]
    pub open: OpenArgs,
}

/// Runs `haar retrieve`.
pub(crate) fn run(cli: &Cli, a: &RetrieveArgs) -> Result<(), Failure> {
    let store = open::field_store_for_reading(cli)?;
    let reqs = open::requests(Some(&a.request))?;
    // A regular file (or a new one) is written whole beside it, then renamed into place; a
    // device, FIFO or socket (`-o /dev/null`, a named pipe) is written directly: renaming over
    // it would replace the device node with a regular file.
    let special = a
        .output
        .as_ref()
        .and_then(|p| std::fs::metadata(p).ok())
        .is_some_and(|m| !m.is_file());
    let tmp = a.output.as_ref().map(|p| {
        if special {
            return p.clone();
        }
        let mut t = p.clone().into_os_string();
        t.push(format!(".haar-tmp-{}", std::process::id()));
        std::path::PathBuf::from(t)
    });
    if tmp.is_none() && std::io::stdout().is_terminal() {
        return Err(Failure::usage(
            "refusing to write GRIB bytes to a terminal: use -o FILE or redirect stdout",
        ));
    }
    let mut sink: Box<dyn Write> = match &tmp {
        Some(t) => Box::new(std::io::BufWriter::with_capacity(
            1 << 20,
            std::fs::OpenOptions::new()
                .write(true)
                .create(!special)
                .truncate(!special)
                .open(t)
                .map_err(|e| Failure::io(format!("cannot create {}: {e}", t.display())))?,
        )),
        None => Box::new(std::io::BufWriter::with_capacity(
            1 << 20,
            std::io::stdout().lock(),
        )),
    };
    // Set when stdout's reader went away mid-field: the store reports the write as an I/O
    // error, but haar then ends quietly (`out_err`).
    let mut output_closed = false;
    let result = (|| -> Result<haar::read::Retrieved, Failure> {
        let got = haar::read::retrieve_into(&*store, &reqs, &mut |_, data, _| {
            sink.write_all(data).map_err(|e| {
                output_closed |= e.kind() == std::io::ErrorKind::BrokenPipe;
                haar::Error::io("write", "output", e)
            })
        });
        let got = match got {
            Err(_) if output_closed => return Err(Failure::output_closed()),
            got => got?,
        };
        for p in &got.problems {
            eprintln!("haar: warning: {p}");
        }
        if !got.ignored.is_empty() {
            eprintln!(
                "haar: note: keywords not used by the schema were ignored: {}",
                got.ignored.join(", ")
            );
        }
        sink.flush().map_err(out_err)?;
        Ok(got)
    })();
    drop(sink);
    let got = match result {
        Ok(got) => got,
        Err(e) => {
            if let Some(t) = tmp.as_ref().filter(|_| !special) {
                let _ = std::fs::remove_file(t);
            }
            return Err(e);
        }
    };
    let (found, bytes, missing) = (got.found, got.bytes, got.missing);
    eprintln!("haar: retrieved {found} field(s), {bytes} bytes");
    if !missing.is_empty() {
        note_fdb5_databases(&*store, &reqs);
    }
    let damaged = !missing.problems.is_empty();
    let refuse = !missing.is_empty() && !a.allow_missing;
    if let (Some(t), Some(out)) = (tmp.as_ref().filter(|_| !special), &a.output) {
        if refuse {
            // A partial result is not left where a script would take it for a complete one.
            let _ = std::fs::remove_file(t);
        } else {
            std::fs::rename(t, out).map_err(|e| {
                Failure::io(format!(
                    "cannot rename {} to {}: {e}",
                    t.display(),
                    out.display()
                ))
            })?;
        }
    }
    // A request naming no keyword asks for every field; with none in the store the store
    // reports one empty key as missing, which would print as a bare `missing:`.
    let (unnamed, named): (Vec<&Key>, Vec<&Key>) = missing.keys.iter().partition(|k| k.is_empty());
    if !unnamed.is_empty() {
        eprintln!(
            "haar: nothing to retrieve: the request names no keyword and the store holds no \
             flushed field (check --root or --config; `haar list` shows what is there)"
        );
    }
    for m in named.iter().take(20) {
        eprintln!("haar: missing: {m}");
    }
    if named.len() > 20 {
        eprintln!("haar: … and {} more missing", named.len() - 20);
    }
    for r in &missing.requests {
        eprintln!("haar: missing: no flushed field matches {r}");
    }
    if refuse {
        let no_file = if a.output.is_some() && !special {
            "; no output file written"
        } else {
            ""
        };
        if damaged {
            // Corruption is never reported as absence: a missing field may be in the damage.
            return Err(Failure::io(format!(
                "{} requested field(s) missing and the database(s) they belong to are damaged \
                 (the warnings above name the files): they may have been among the damaged \
                 bytes{no_file}",
                missing.keys.len()
            )));
        }
        return Err(Failure::missing(if named.is_empty() {
            format!("no field retrieved{no_file} (use --allow-missing to accept an empty result)")
        } else {
            format!(
                "{} requested field(s) missing{no_file} (use --allow-missing to accept a partial \
                 result)",
                named.len()
            )
        }));
    }
    Ok(())
}

//! Writes the synthetic ensemble of `haar bench`'s GRIB section (the very files it archives:
//! O320, 16 bits per value, 10 members × 4 steps × 4 levels × 5 params, one file per step)
//! into DIR, for profiling `haar archive` and `fdb-write` on the same bytes outside the bench.
//!
//! `cargo run --release -p haar-bench --example ens_files -- DIR`

use haar_bench::bench::grib;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args().nth(1).ok_or("usage: ens_files DIR")?;
    let (files, bytes) = grib::write_inputs(dir.as_ref(), &grib::spec(false))?;
    for f in &files {
        println!("{}", f.display());
    }
    eprintln!("{} files, {bytes} bytes", files.len());
    Ok(())
}

//! Writes the synthetic ensemble of `haar bench`'s GRIB section (O320, 16 bits per value,
//! 10 members × 4 steps × 4 levels × 5 params, about 824 KiB a message) as one file per step
//! into DIR, for profiling `haar archive` and `fdb-write` on the very bytes the bench uses.
//!
//! `cargo run --release -p haar-grib --example ens_files -- DIR`

use haar_grib::{EnsembleSpec, Grid};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::path::PathBuf::from(std::env::args().nth(1).ok_or("usage: ens_files DIR")?);
    std::fs::create_dir_all(&dir)?;
    let steps = vec![0, 6, 12, 18];
    for &step in &steps {
        let spec = EnsembleSpec {
            members: 10,
            steps: vec![step],
            levels: vec![1000, 850, 500, 250],
            params: vec![129, 130, 131, 132, 133],
            grid: Grid::O320,
            date: 20261121,
            time: 0,
            expver: "0001".into(),
            class: "od".into(),
        };
        let path = dir.join(format!("ens_step{step}.grib"));
        let mut out = std::io::BufWriter::new(std::fs::File::create(&path)?);
        haar_grib::generate(&spec, &mut out)?;
        println!("{}", path.display());
    }
    Ok(())
}

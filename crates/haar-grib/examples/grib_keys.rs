//! Print the MARS keys haar reads from every message of the GRIB files given,
//! one line per message: `index offset edition key=value,...`.
//!
//! `cargo run -p haar-grib --example grib_keys -- FILE...`
fn main() -> Result<(), Box<dyn std::error::Error>> {
    for path in std::env::args().skip(1) {
        let data = std::fs::read(&path)?;
        for msg in haar_grib::messages(&data) {
            match msg {
                Ok(m) => {
                    let keys = haar_grib::mars_keys(m.bytes)
                        .map(|k| {
                            k.iter()
                                .map(|(k, v)| format!("{k}={v}"))
                                .collect::<Vec<_>>()
                                .join(",")
                        })
                        .unwrap_or_else(|e| format!("error: {e}"));
                    println!("{path} {} {} {} {keys}", m.index, m.offset, m.edition);
                }
                Err(e) => println!("{path} error: {e}"),
            }
        }
    }
    Ok(())
}

//! The product checker of `haar workflow`: a separate process, after a run, reads every
//! product and compares sampled points with values recomputed from the members' seeds (two
//! passes in f64), so a store that returns stale, torn or wrong products fails the run.
//!
//! Owns the checking rule (points, tolerance); reads only.

use serde_json::json;

use super::{SALT, SCALE, reference};
use crate::error::Error;
use crate::field::{self, Kind};
use crate::layout::Layout;
use crate::procs::Reporter;
use haar_store::FieldStore;

use crate::target;

/// Sample points checked per product (all when the field is smaller).
const CHECK_POINTS: usize = 2048;

pub(super) fn verify_products(
    l: &Layout,
    store: &dyn FieldStore,
    mut rep: Reporter,
) -> Result<(), Error> {
    rep.ready_then_wait()?;
    let n = field::nvalues16(l.field_size) as usize;
    let stride = (n / CHECK_POINTS).max(1);
    let points: Vec<usize> = (0..n).step_by(stride).chain([n - 1]).collect();
    let (mut products, mut values) = (0u64, 0u64);
    for s in 0..l.steps {
        for f in 0..l.fields_per_step() {
            // Expected mean and standard deviation at the sample points, two-pass in f64.
            let seeds: Vec<u64> = (1..=l.members).map(|m| field::seed(SALT, m, f)).collect();
            let expect: Vec<(f64, f64)> = points
                .iter()
                .map(|&i| {
                    let v: Vec<f64> = (1..=l.members)
                        .zip(&seeds)
                        .map(|(m, &sd)| {
                            reference(m, s, f) + SCALE * f64::from(field::packed(sd, i as u32))
                        })
                        .collect();
                    let mean = v.iter().sum::<f64>() / v.len() as f64;
                    let var =
                        v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / v.len() as f64;
                    (mean, var.sqrt())
                })
                .collect();
            for (kind, which) in [("em", Kind::Mean), ("es", Kind::Spread)] {
                let key = l.product_key(kind, s, f);
                let mut found = false;
                target::retrieve(store, std::slice::from_ref(&key), |_, d, crc| {
                    found = true;
                    check_product(d, crc, which, s, n, &points, &expect)
                        .map_err(|e| Error::Failed(format!("product {key}: {e}")))?;
                    values += points.len() as u64;
                    Ok(())
                })?;
                if !found {
                    return Err(Error::Missing(format!("product {key} is missing")));
                }
                products += 1;
            }
        }
    }
    let r = json!({"products": products, "values_checked": values});
    rep.say(&format!("result {r}"))
}

/// Checks a product field of `which` kind for step `s` with `n` values against the expected
/// (mean, standard deviation) at `points`; `crc` as [`field::verify_with`] takes it.
fn check_product(
    d: &[u8],
    crc: Option<u32>,
    which: Kind,
    s: u32,
    n: usize,
    points: &[usize],
    expect: &[(f64, f64)],
) -> Result<(), String> {
    let h = field::verify_with(d, crc)?;
    if h.kind != which || h.nvalues as usize != n || h.step != s {
        return Err(format!(
            "header says {:?} step {} with {} values",
            h.kind, h.step, h.nvalues
        ));
    }
    let wants = || {
        expect
            .iter()
            .map(move |&(mean, sd)| if which == Kind::Mean { mean } else { sd })
    };
    // A packing step coarser than the samples' range allows would hide errors.
    let (lo, hi) = wants().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
        (a.min(x), b.max(x))
    });
    if !(h.scale >= 0.0 && h.scale <= 2.0 * (hi - lo) / 65535.0 + 1e-6) {
        return Err(format!(
            "packing scale {} does not fit values {lo}..{hi}",
            h.scale
        ));
    }
    for (&i, want) in points.iter().zip(wants()) {
        let got = field::value(d, &h, i);
        // Packing is exact to half a scale step; the reduction to f32's.
        if (got - want).abs() > h.scale / 2.0 + 1e-3 + 1e-5 * want.abs() {
            return Err(format!(
                "value {i} is {got}, recomputed from the members' seeds {want}"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::{member_header, product_size};
    use super::*;
    use crate::field::Header;

    /// The checker passes a product made from the members and refuses one wrong value, a
    /// packing too coarse to check, and the wrong kind.
    #[test]
    fn the_product_checker_fails_wrong_products() {
        let l = Layout {
            class: "rd".into(),
            expver: "test".into(),
            date: "20260101".into(),
            time: "0000".into(),
            members: 5,
            steps: 1,
            step_hours: 6,
            levels: 1,
            params: 1,
            field_size: 64 + 2 * 3000,
        };
        let n = field::nvalues16(l.field_size) as usize;
        let ms: Vec<(Vec<u8>, Header)> = (1..=l.members)
            .map(|m| {
                let seed = field::seed(SALT, m, 0);
                let mut t = field::template(l.field_size, seed);
                let h = member_header(&l, m, 0, 0, seed, field::body_crc(&t));
                field::stamp(&mut t, &h);
                (t, h)
            })
            .collect();
        let refs: Vec<(&[u8], Header)> = ms.iter().map(|(b, h)| (&b[..], *h)).collect();
        let (mean, sd) = field::ensemble_stats(&refs, n);
        let points: Vec<usize> = (0..n).collect();
        let expect: Vec<(f64, f64)> = points
            .iter()
            .map(|&i| {
                let v: Vec<f64> = refs.iter().map(|(b, h)| field::value(b, h, i)).collect();
                let mu = v.iter().sum::<f64>() / v.len() as f64;
                let var = v.iter().map(|x| (x - mu) * (x - mu)).sum::<f64>() / v.len() as f64;
                (mu, var.sqrt())
            })
            .collect();
        let base = Header {
            kind: Kind::Mean,
            member: 0,
            seed: 0,
            ..refs[0].1
        };
        let psize = product_size(&l);
        let em = field::product(psize, base, &mean);
        let es = field::product(
            psize,
            Header {
                kind: Kind::Spread,
                ..base
            },
            &sd,
        );
        check_product(&em, None, Kind::Mean, 0, n, &points, &expect).unwrap();
        // With the CRC a store verified, the body is checked without a second pass.
        let crc = Some(haar_persist::crc32c(&em));
        check_product(&em, crc, Kind::Mean, 0, n, &points, &expect).unwrap();
        check_product(&es, None, Kind::Spread, 0, n, &points, &expect).unwrap();
        assert!(check_product(&em, None, Kind::Spread, 0, n, &points, &expect).is_err());
        let mut bad = mean.clone();
        bad[1234] += 0.01;
        let e = check_product(
            &field::product(psize, base, &bad),
            None,
            Kind::Mean,
            0,
            n,
            &points,
            &expect,
        )
        .unwrap_err();
        assert!(e.contains("value 1234"), "{e}");
        // A product packed with a step of 1.0 could hide errors of 0.5: refused.
        let mut coarse = em.clone();
        let h = Header {
            scale: 1.0,
            ..field::verify(&em).unwrap()
        };
        field::stamp(&mut coarse, &h);
        let e = check_product(&coarse, None, Kind::Mean, 0, n, &points, &expect).unwrap_err();
        assert!(e.contains("packing scale"), "{e}");
    }
}

//! The workflow's figure: a two-panel PNG, grouped bars on the left (the producers' run time
//! per backend, alone and with product generation) and lines on the right (each step's
//! delivery latency per backend), drawn with the helpers haar's plots share
//! (`haar_mem::plot`: font, labels, ticks, colours).
//!
//! Owns this figure's layout; must not compute any figure it shows.

use haar_mem::plot::{
    CENTER, COLORS, LARGE, LEFT, MEDIUM, RIGHT, SMALL, Series, TOP, label, nice_ticks, polyline,
    prepare_fonts, tick_label,
};
use plotters::prelude::*;

/// One group of bars (e.g. a backend: run time alone and with consumers).
#[derive(Debug, Clone)]
pub struct BarGroup {
    /// Label under the group.
    pub name: String,
    /// One value per bar, in the order of the bar labels.
    pub values: Vec<f64>,
}

/// Writes a two-panel PNG: grouped bars on the left (`bar_labels` name the bars of each
/// group; y in seconds) and lines on the right (x: step, y: milliseconds).
///
/// # Errors
/// A message if there is nothing to plot, the font is missing or the PNG cannot be written.
pub fn workflow_png(
    path: &std::path::Path,
    title: &str,
    bar_labels: &[&str],
    bars: &[BarGroup],
    lines: &[Series],
) -> Result<(), String> {
    if bars.is_empty() && lines.is_empty() {
        return Err("nothing to plot".into());
    }
    prepare_fonts()?;
    let (w, h) = (1200i32, 620i32);
    let root = BitMapBackend::new(path, (w as u32, h as u32)).into_drawing_area();
    let err = |e: DrawingAreaErrorKind<_>| format!("cannot draw {}: {e:?}", path.display());
    root.fill(&WHITE).map_err(err)?;
    let grey = RGBColor(220, 220, 220);
    let dark = RGBColor(40, 40, 40);
    label(&root, title, (40, 28), LARGE, &BLACK, LEFT, false).map_err(err)?;

    // A panel: frame, y grid with labels, axis titles; returns (top, bottom, y maximum).
    let panel = |left: i32, right: i32, ymax_data: f64, ylabel: &str, xlabel: &str| {
        let (top, bottom) = (110, h - 110);
        let ticks = nice_ticks(ymax_data * 1.1);
        let ymax = ticks
            .last()
            .copied()
            .unwrap_or(1.0)
            .max(ymax_data * 1.1)
            .max(1e-9);
        for &t in &ticks {
            let y = bottom - (t / ymax * (bottom - top) as f64) as i32;
            root.draw(&PathElement::new(vec![(left, y), (right, y)], grey))?;
            label(
                &root,
                &tick_label(t),
                (left - 8, y),
                SMALL,
                &dark,
                RIGHT,
                false,
            )?;
        }
        root.draw(&PathElement::new(
            vec![(left, top), (left, bottom), (right, bottom)],
            ShapeStyle::from(&BLACK).stroke_width(2),
        ))?;
        label(
            &root,
            xlabel,
            ((left + right) / 2, h - 50),
            MEDIUM,
            &dark,
            TOP,
            false,
        )?;
        label(
            &root,
            ylabel,
            (left - 75, (top + bottom) / 2),
            MEDIUM,
            &dark,
            CENTER,
            true,
        )?;
        Ok((top, bottom, ymax))
    };

    // Left: grouped bars.
    let (l0, l1) = (120, 560);
    let bmax = bars
        .iter()
        .flat_map(|g| g.values.iter().copied())
        .fold(0.0, f64::max);
    let (top, bottom, ymax) = panel(l0, l1, bmax, "Producer time (s)", "Backend").map_err(err)?;
    let groups = bars.len().max(1) as i32;
    let gw = (l1 - l0) / groups;
    let nb = bar_labels.len().max(1) as i32;
    let bw = (gw - 30) / nb;
    for (gi, g) in bars.iter().enumerate() {
        let gx = l0 + gi as i32 * gw + 15;
        for (bi, v) in g.values.iter().enumerate() {
            let x = gx + bi as i32 * bw;
            let y = bottom - (v / ymax * (bottom - top) as f64) as i32;
            let c = COLORS[bi % COLORS.len()];
            root.draw(&Rectangle::new(
                [(x + 2, y), (x + bw - 2, bottom)],
                ShapeStyle::from(&c).filled(),
            ))
            .map_err(err)?;
        }
        label(
            &root,
            &g.name,
            (gx + (gw - 30) / 2, bottom + 10),
            SMALL,
            &dark,
            TOP,
            false,
        )
        .map_err(err)?;
    }
    for (bi, name) in bar_labels.iter().enumerate() {
        let (lx, ly) = (l0 + 10, 50 + 20 * bi as i32);
        let c = COLORS[bi % COLORS.len()];
        root.draw(&Rectangle::new(
            [(lx, ly), (lx + 14, ly + 12)],
            ShapeStyle::from(&c).filled(),
        ))
        .map_err(err)?;
        label(&root, name, (lx + 22, ly + 6), SMALL, &dark, LEFT, false).map_err(err)?;
    }

    // Right: lines.
    let (r0, r1) = (720, w - 40);
    let pts: Vec<(f64, f64)> = lines
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .collect();
    let xmax = pts.iter().map(|p| p.0).fold(1.0, f64::max);
    let lmax = pts.iter().map(|p| p.1).fold(0.0, f64::max);
    let (top, bottom, ymax) = panel(r0, r1, lmax, "Delivery latency (ms)", "Step").map_err(err)?;
    let px = |x: f64| r0 + 20 + (x / xmax * (r1 - r0 - 40) as f64) as i32;
    let mut x = 0.0;
    while x <= xmax {
        label(
            &root,
            &format!("{x}"),
            (px(x), bottom + 10),
            SMALL,
            &dark,
            TOP,
            false,
        )
        .map_err(err)?;
        x += (xmax / 8.0).ceil().max(1.0);
    }
    for (i, s) in lines.iter().enumerate() {
        let c = COLORS[(i + 2) % COLORS.len()];
        let line: Vec<(i32, i32)> = s
            .points
            .iter()
            .map(|&(x, y)| (px(x), bottom - (y / ymax * (bottom - top) as f64) as i32))
            .collect();
        polyline(&root, line, c, 4).map_err(err)?;
        let (lx, ly) = (r0 + 20, 50 + 20 * i as i32);
        root.draw(&PathElement::new(
            vec![(lx, ly + 6), (lx + 24, ly + 6)],
            ShapeStyle::from(&c).stroke_width(3),
        ))
        .map_err(err)?;
        label(&root, &s.name, (lx + 32, ly + 6), SMALL, &dark, LEFT, false).map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_a_workflow_png() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("w.png");
        let bars = [BarGroup {
            name: "haar".into(),
            values: vec![1.5, 1.6],
        }];
        let lines = [Series {
            name: "haar".into(),
            points: vec![(0.0, 30.0), (1.0, 25.0)],
        }];
        workflow_png(&p, "Workflow", &["alone", "with PGEN"], &bars, &lines).unwrap();
        assert_eq!(&std::fs::read(&p).unwrap()[1..4], b"PNG");
        assert!(workflow_png(&p, "x", &[], &[], &[]).is_err());
    }
}

//! The workloads' figures, drawn with the helpers haar's plots share (`haar_mem::plot`: font,
//! labels, ticks, colours):
//! - the workflow's two-panel PNG, grouped bars on the left (the producers' run time per
//!   backend, alone and with product generation) and lines on the right (each step's delivery
//!   latency per backend);
//! - the scale benchmark's log-log panels ([`scale_png`]): cost against database size.
//!
//! Owns these figures' layout; must not compute any figure they show.

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

/// One log-log panel of [`scale_png`]: x is a count (fields), y a cost.
#[derive(Debug, Clone)]
pub struct LogPanel {
    /// Title over the panel.
    pub title: String,
    /// The y axis's unit (`ms`, `MB`).
    pub ylabel: String,
    /// Its lines; points with x or y not positive are left out.
    pub series: Vec<Series>,
    /// A target drawn as a dashed horizontal line with its label (`≤ 20 ms`).
    pub target: Option<(f64, String)>,
}

/// The powers of ten from below `lo` to above `hi` (the decades a log axis spans), at least
/// one decade.
fn decades(lo: f64, hi: f64) -> (i32, i32) {
    // A hair's tolerance: 1,001,196 fields (10^6 rounded up to whole member-steps) sits on
    // the 10^6 line, not a decade below the next.
    let a = (lo.log10() + 0.01).floor() as i32;
    let b = ((hi.log10() - 0.01).ceil() as i32).max(a + 1);
    (a, b)
}

/// A power of ten as a tick label: `10^5` as `1e5`, small ones plainly (`0.1`, `100`).
fn decade_label(e: i32) -> String {
    if (-2..=4).contains(&e) {
        tick_label(10f64.powi(e))
    } else {
        format!("1e{e}")
    }
}

/// Writes a 2-column grid of log-log panels (x: fields, y: cost), one line per series, with
/// a shared colour per series name across panels.
///
/// # Errors
/// A message if there is nothing to plot, the font is missing or the PNG cannot be written.
pub fn scale_png(
    path: &std::path::Path,
    title: &str,
    xlabel: &str,
    panels: &[LogPanel],
) -> Result<(), String> {
    let ok = |p: &(f64, f64)| p.0 > 0.0 && p.1 > 0.0 && p.0.is_finite() && p.1.is_finite();
    if !panels
        .iter()
        .any(|p| p.series.iter().any(|s| s.points.iter().any(ok)))
    {
        return Err("nothing to plot".into());
    }
    prepare_fonts()?;
    let cols = 2i32;
    let rows = (panels.len() as i32 + cols - 1) / cols;
    let (pw, ph) = (600i32, 420i32);
    let (w, h) = (pw * cols, 70 + ph * rows);
    let root = BitMapBackend::new(path, (w as u32, h as u32)).into_drawing_area();
    let err = |e: DrawingAreaErrorKind<_>| format!("cannot draw {}: {e:?}", path.display());
    root.fill(&WHITE).map_err(err)?;
    let grey = RGBColor(220, 220, 220);
    let dark = RGBColor(40, 40, 40);
    label(&root, title, (40, 30), LARGE, &BLACK, LEFT, false).map_err(err)?;
    // One colour per series name, in order of first appearance.
    let mut names: Vec<&str> = Vec::new();
    for s in panels.iter().flat_map(|p| &p.series) {
        if !names.contains(&s.name.as_str()) {
            names.push(&s.name);
        }
    }
    let color =
        |name: &str| COLORS[names.iter().position(|n| *n == name).unwrap_or(0) % COLORS.len()];
    for (i, p) in panels.iter().enumerate() {
        let (ox, oy) = ((i as i32 % cols) * pw, 70 + (i as i32 / cols) * ph);
        let (left, right, top, bottom) = (ox + 90, ox + pw - 30, oy + 40, oy + ph - 70);
        let pts: Vec<(f64, f64)> = p
            .series
            .iter()
            .flat_map(|s| s.points.iter().copied())
            .filter(ok)
            .collect();
        label(&root, &p.title, (left, oy + 14), MEDIUM, &dark, LEFT, false).map_err(err)?;
        if pts.is_empty() {
            continue;
        }
        let (x0, x1) = decades(
            pts.iter().map(|q| q.0).fold(f64::INFINITY, f64::min),
            pts.iter().map(|q| q.0).fold(0.0, f64::max),
        );
        let target = p.target.as_ref().filter(|t| t.0 > 0.0 && t.0.is_finite());
        // Room below a line on a decade and above the highest line, for the legend.
        let (y0, y1) = decades(
            0.9 * pts
                .iter()
                .map(|q| q.1)
                .chain(target.map(|t| t.0))
                .fold(f64::INFINITY, f64::min),
            10.0 * pts
                .iter()
                .map(|q| q.1)
                .chain(target.map(|t| t.0))
                .fold(0.0, f64::max),
        );
        let px = |x: f64| {
            left + ((x.log10() - x0 as f64) / (x1 - x0) as f64 * (right - left) as f64) as i32
        };
        let py = |y: f64| {
            bottom - ((y.log10() - y0 as f64) / (y1 - y0) as f64 * (bottom - top) as f64) as i32
        };
        for e in y0..=y1 {
            let y = py(10f64.powi(e));
            root.draw(&PathElement::new(vec![(left, y), (right, y)], grey))
                .map_err(err)?;
            label(
                &root,
                &decade_label(e),
                (left - 8, y),
                SMALL,
                &dark,
                RIGHT,
                false,
            )
            .map_err(err)?;
        }
        for e in x0..=x1 {
            let x = px(10f64.powi(e));
            root.draw(&PathElement::new(vec![(x, top), (x, bottom)], grey))
                .map_err(err)?;
            label(
                &root,
                &decade_label(e),
                (x, bottom + 8),
                SMALL,
                &dark,
                TOP,
                false,
            )
            .map_err(err)?;
        }
        root.draw(&PathElement::new(
            vec![(left, top), (left, bottom), (right, bottom)],
            ShapeStyle::from(&BLACK).stroke_width(2),
        ))
        .map_err(err)?;
        label(
            &root,
            &format!("{xlabel} (log axis)"),
            ((left + right) / 2, bottom + 32),
            SMALL,
            &dark,
            TOP,
            false,
        )
        .map_err(err)?;
        label(
            &root,
            &format!("{} (log axis)", p.ylabel),
            (ox + 30, (top + bottom) / 2),
            SMALL,
            &dark,
            CENTER,
            true,
        )
        .map_err(err)?;
        if let Some((t, text)) = target {
            let y = py(*t);
            let mut x = left;
            while x < right {
                root.draw(&PathElement::new(
                    vec![(x, y), ((x + 8).min(right), y)],
                    ShapeStyle::from(&dark).stroke_width(2),
                ))
                .map_err(err)?;
                x += 14;
            }
            label(&root, text, (right - 4, y - 10), SMALL, &dark, RIGHT, false).map_err(err)?;
        }
        for (k, s) in p.series.iter().enumerate() {
            let c = color(&s.name);
            let line: Vec<(i32, i32)> = s
                .points
                .iter()
                .filter(|q| ok(q))
                .map(|&(x, y)| (px(x), py(y)))
                .collect();
            polyline(&root, line, c, 4).map_err(err)?;
            let (lx, ly) = (left + 12, top + 8 + 20 * k as i32);
            root.draw(&PathElement::new(
                vec![(lx, ly + 6), (lx + 24, ly + 6)],
                ShapeStyle::from(&c).stroke_width(3),
            ))
            .map_err(err)?;
            label(&root, &s.name, (lx + 32, ly + 6), SMALL, &dark, LEFT, false).map_err(err)?;
        }
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

    #[test]
    fn writes_a_log_log_scale_png() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.png");
        let panel = |t: &str| LogPanel {
            title: t.into(),
            ylabel: "ms".into(),
            target: Some((20.0, "target ≤ 20 ms".into())),
            series: vec![
                Series {
                    name: "haar".into(),
                    points: vec![(1e5, 0.5), (1e6, 0.6), (1e7, 0.0)],
                },
                Series {
                    name: "FDB5".into(),
                    points: vec![(1e5, 12.0), (1e6, 40.0)],
                },
            ],
        };
        scale_png(&p, "Scale", "Fields", &[panel("a"), panel("b"), panel("c")]).unwrap();
        assert_eq!(&std::fs::read(&p).unwrap()[1..4], b"PNG");
        assert!(scale_png(&p, "x", "Fields", &[]).is_err());
        assert_eq!(
            (decade_label(5), decade_label(-1), decade_label(2)),
            ("1e5".into(), "0.1".into(), "100".into())
        );
        assert_eq!(decades(0.5, 0.6), (-1, 0));
        assert_eq!(decades(100_284.0, 1_001_196.0), (5, 6));
    }
}

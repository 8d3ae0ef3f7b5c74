//! The sweep plot: bandwidth against array size (log2 axis), one line per kernel, vertical
//! lines at the cache sizes, written as a PNG with `plotters`' bitmap backend.
//!
//! Text is drawn with a 5×7 bitmap font embedded here (upper-case letters, digits and a few
//! signs), so the plot needs no system fonts and builds with no C dependencies.

use plotters::prelude::*;

/// One line of the plot.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// (bytes of the three arrays, GB/s).
    pub points: Vec<(f64, f64)>,
}

/// A vertical marker line, e.g. the last-level cache size.
#[derive(Debug, Clone)]
pub struct Marker {
    /// Position on the x axis, in bytes.
    pub x: f64,
    /// Label written beside it.
    pub label: String,
}

fn glyph(c: char) -> [u8; 7] {
    match c {
        '0' => [0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E],
        '1' => [0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E],
        '2' => [0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F],
        '3' => [0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E],
        '4' => [0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02],
        '5' => [0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E],
        '6' => [0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E],
        '7' => [0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08],
        '8' => [0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E],
        '9' => [0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C],
        'A' => [0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11],
        'B' => [0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E],
        'C' => [0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E],
        'D' => [0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C],
        'E' => [0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F],
        'F' => [0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10],
        'G' => [0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F],
        'H' => [0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11],
        'I' => [0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E],
        'J' => [0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C],
        'K' => [0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11],
        'L' => [0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F],
        'M' => [0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11],
        'N' => [0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11],
        'O' => [0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E],
        'P' => [0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10],
        'Q' => [0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D],
        'R' => [0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11],
        'S' => [0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E],
        'T' => [0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04],
        'U' => [0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E],
        'V' => [0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04],
        'W' => [0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A],
        'X' => [0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11],
        'Y' => [0x11, 0x11, 0x11, 0x0A, 0x04, 0x04, 0x04],
        'Z' => [0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F],
        '.' => [0, 0, 0, 0, 0, 0x0C, 0x0C],
        ',' => [0, 0, 0, 0, 0x0C, 0x04, 0x08],
        ':' => [0, 0x0C, 0x0C, 0, 0x0C, 0x0C, 0],
        '/' => [0, 0x01, 0x02, 0x04, 0x08, 0x10, 0],
        '(' => [0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02],
        ')' => [0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08],
        '-' => [0, 0, 0, 0x1F, 0, 0, 0],
        '+' => [0, 0x04, 0x04, 0x1F, 0x04, 0x04, 0],
        '=' => [0, 0, 0x1F, 0, 0x1F, 0, 0],
        '%' => [0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03],
        '_' => [0, 0, 0, 0, 0, 0, 0x1F],
        _ => [0; 7],
    }
}

const SCALE: i32 = 2;
const ADVANCE: i32 = 6 * SCALE;

/// Width in pixels of `text` at the plot's scale.
fn text_width(text: &str) -> i32 {
    text.chars().count() as i32 * ADVANCE
}

/// Draws `text` (upper-cased) with its top-left corner at `(x, y)`; `vertical` rotates it 90°
/// counter-clockwise, reading bottom to top from `(x, y)` as the bottom-left corner.
fn draw_text<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    text: &str,
    (x, y): (i32, i32),
    color: &RGBColor,
    vertical: bool,
) {
    for (i, ch) in text.to_uppercase().chars().enumerate() {
        let g = glyph(ch);
        for (row, bits) in g.iter().enumerate() {
            for col in 0..5 {
                if bits & (0x10 >> col) == 0 {
                    continue;
                }
                for dy in 0..SCALE {
                    for dx in 0..SCALE {
                        let gx = i as i32 * ADVANCE + col * SCALE + dx;
                        let gy = row as i32 * SCALE + dy;
                        let p = if vertical {
                            (x + gy, y - gx)
                        } else {
                            (x + gx, y + gy)
                        };
                        let _ = area.draw_pixel(p, color);
                    }
                }
            }
        }
    }
}

/// Round numbers for axis ticks between 0 and `max`.
fn nice_ticks(max: f64) -> Vec<f64> {
    if max <= 0.0 || !max.is_finite() {
        return vec![0.0];
    }
    let raw = max / 6.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    (0..)
        .map(|i| i as f64 * step)
        .take_while(|v| *v <= max * 1.0001)
        .collect()
}

/// A byte count as a short axis label: 64K, 1M, 2G (binary).
pub fn short_bytes(b: f64) -> String {
    let units = [("G", 30), ("M", 20), ("K", 10)];
    for (u, shift) in units {
        let v = b / (1u64 << shift) as f64;
        if v >= 1.0 {
            return if v.fract() == 0.0 {
                format!("{v}{u}")
            } else {
                format!("{v:.1}{u}")
            };
        }
    }
    format!("{b}")
}

const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// Writes the sweep plot to `path` (PNG).
///
/// # Errors
/// A message if there is nothing to plot or the PNG cannot be written.
pub fn sweep_png(
    path: &std::path::Path,
    title: &str,
    series: &[Series],
    markers: &[Marker],
) -> Result<(), String> {
    let pts: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .collect();
    if pts.is_empty() {
        return Err("nothing to plot".into());
    }
    let (w, h) = (1000i32, 620i32);
    let (left, right, top, bottom) = (100, w - 30, 60, h - 90);
    let xmin = pts
        .iter()
        .map(|p| p.0)
        .fold(f64::INFINITY, f64::min)
        .log2()
        .floor();
    let xmax = pts
        .iter()
        .map(|p| p.0)
        .fold(0.0, f64::max)
        .log2()
        .ceil()
        .max(xmin + 1.0);
    let ymax_data = pts.iter().map(|p| p.1).fold(0.0, f64::max);
    let yticks = nice_ticks(ymax_data * 1.08);
    let ymax = yticks.last().copied().unwrap_or(1.0).max(ymax_data * 1.08);
    let px = |x: f64| left + ((x.log2() - xmin) / (xmax - xmin) * (right - left) as f64) as i32;
    let py = |y: f64| bottom - (y / ymax * (bottom - top) as f64) as i32;

    let root = BitMapBackend::new(path, (w as u32, h as u32)).into_drawing_area();
    let err = |e: DrawingAreaErrorKind<_>| format!("cannot draw {}: {e:?}", path.display());
    root.fill(&WHITE).map_err(err)?;
    let grey = RGBColor(220, 220, 220);
    let dark = RGBColor(40, 40, 40);
    // Grid and ticks.
    for &t in &yticks {
        let y = py(t);
        root.draw(&PathElement::new(vec![(left, y), (right, y)], grey))
            .map_err(err)?;
        let label = format!("{t}");
        draw_text(
            &root,
            &label,
            (left - 8 - text_width(&label), y - 7),
            &dark,
            false,
        );
    }
    let mut e = xmin as i32;
    while e <= xmax as i32 {
        let x = px(2f64.powi(e));
        root.draw(&PathElement::new(vec![(x, top), (x, bottom)], grey))
            .map_err(err)?;
        if (e - xmin as i32) % 2 == 0 || xmax - xmin <= 12.0 {
            let label = short_bytes(2f64.powi(e));
            draw_text(
                &root,
                &label,
                (x - text_width(&label) / 2, bottom + 8),
                &dark,
                false,
            );
        }
        e += 1;
    }
    root.draw(&PathElement::new(
        vec![(left, top), (left, bottom), (right, bottom)],
        ShapeStyle::from(&BLACK).stroke_width(2),
    ))
    .map_err(err)?;
    // Cache markers, dashed.
    let marker_color = RGBColor(120, 120, 120);
    for (i, m) in markers.iter().enumerate() {
        let x = px(m.x);
        if x < left || x > right {
            continue;
        }
        let mut y = top;
        while y < bottom {
            root.draw(&PathElement::new(
                vec![(x, y), (x, (y + 6).min(bottom))],
                ShapeStyle::from(&marker_color).stroke_width(2),
            ))
            .map_err(err)?;
            y += 12;
        }
        // Labels low in the plot, where bandwidth past the caches is small, clear of the legend.
        draw_text(
            &root,
            &m.label,
            (x + 5, bottom - 22 - 18 * i as i32),
            &marker_color,
            false,
        );
    }
    // Series.
    for (i, s) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let line: Vec<(i32, i32)> = s.points.iter().map(|&(x, y)| (px(x), py(y))).collect();
        polyline(&root, line, c, 3).map_err(err)?;
        // Legend.
        let (lx, ly) = (right - 190, top + 10 + 22 * i as i32);
        root.draw(&PathElement::new(
            vec![(lx, ly + 7), (lx + 30, ly + 7)],
            ShapeStyle::from(&c).stroke_width(3),
        ))
        .map_err(err)?;
        draw_text(&root, &s.name, (lx + 38, ly), &dark, false);
    }
    draw_text(&root, title, (left, 18), &BLACK, false);
    let xl = "SIZE OF THE THREE ARRAYS (BYTES, LOG2 AXIS)";
    draw_text(
        &root,
        xl,
        ((left + right) / 2 - text_width(xl) / 2, h - 40),
        &dark,
        false,
    );
    let yl = "BANDWIDTH (GB/S)";
    draw_text(
        &root,
        yl,
        (30, (top + bottom) / 2 + text_width(yl) / 2),
        &dark,
        true,
    );
    root.present().map_err(err)?;
    Ok(())
}

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
/// A message if there is nothing to plot or the PNG cannot be written.
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
    let (w, h) = (1200i32, 620i32);
    let root = BitMapBackend::new(path, (w as u32, h as u32)).into_drawing_area();
    let err = |e: DrawingAreaErrorKind<_>| format!("cannot draw {}: {e:?}", path.display());
    root.fill(&WHITE).map_err(err)?;
    let grey = RGBColor(220, 220, 220);
    let dark = RGBColor(40, 40, 40);
    draw_text(&root, title, (40, 18), &BLACK, false);

    // A panel: frame, y grid with labels, axis titles; returns the y mapping's maximum.
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
            let _ = root.draw(&PathElement::new(vec![(left, y), (right, y)], grey));
            let label = tick_label(t);
            draw_text(
                &root,
                &label,
                (left - 8 - text_width(&label), y - 7),
                &dark,
                false,
            );
        }
        let _ = root.draw(&PathElement::new(
            vec![(left, top), (left, bottom), (right, bottom)],
            ShapeStyle::from(&BLACK).stroke_width(2),
        ));
        draw_text(
            &root,
            xlabel,
            ((left + right) / 2 - text_width(xlabel) / 2, h - 40),
            &dark,
            false,
        );
        draw_text(
            &root,
            ylabel,
            (left - 95, (top + bottom) / 2 + text_width(ylabel) / 2),
            &dark,
            true,
        );
        (top, bottom, ymax)
    };

    // Left: grouped bars.
    let (l0, l1) = (120, 560);
    let bmax = bars
        .iter()
        .flat_map(|g| g.values.iter().copied())
        .fold(0.0, f64::max);
    let (top, bottom, ymax) = panel(l0, l1, bmax, "PRODUCER TIME (S)", "BACKEND");
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
        let name: String = g
            .name
            .chars()
            .take(((gw - 4) / ADVANCE).max(1) as usize)
            .collect();
        draw_text(
            &root,
            &name,
            (gx + (gw - 30) / 2 - text_width(&name) / 2, bottom + 10),
            &dark,
            false,
        );
    }
    for (bi, label) in bar_labels.iter().enumerate() {
        let (lx, ly) = (l0 + 10, 50 + 18 * bi as i32);
        let c = COLORS[bi % COLORS.len()];
        root.draw(&Rectangle::new(
            [(lx, ly), (lx + 14, ly + 12)],
            ShapeStyle::from(&c).filled(),
        ))
        .map_err(err)?;
        draw_text(&root, label, (lx + 22, ly), &dark, false);
    }

    // Right: lines.
    let (r0, r1) = (720, w - 40);
    let pts: Vec<(f64, f64)> = lines
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .collect();
    let xmax = pts.iter().map(|p| p.0).fold(1.0, f64::max);
    let lmax = pts.iter().map(|p| p.1).fold(0.0, f64::max);
    let (top, bottom, ymax) = panel(r0, r1, lmax, "DELIVERY LATENCY (MS)", "STEP");
    let px = |x: f64| r0 + 20 + (x / xmax * (r1 - r0 - 40) as f64) as i32;
    let mut x = 0.0;
    while x <= xmax {
        let label = format!("{x}");
        draw_text(
            &root,
            &label,
            (px(x) - text_width(&label) / 2, bottom + 10),
            &dark,
            false,
        );
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
        let (lx, ly) = (r0 + 20, 50 + 18 * i as i32);
        root.draw(&PathElement::new(
            vec![(lx, ly + 6), (lx + 24, ly + 6)],
            ShapeStyle::from(&c).stroke_width(3),
        ))
        .map_err(err)?;
        draw_text(&root, &s.name, (lx + 32, ly), &dark, false);
    }
    root.present().map_err(err)?;
    Ok(())
}

/// A series' line with a dot of `radius` at each point.
fn polyline<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    points: Vec<(i32, i32)>,
    color: RGBColor,
    radius: i32,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    area.draw(&PathElement::new(
        points.clone(),
        ShapeStyle::from(&color).stroke_width(2),
    ))?;
    for p in points {
        area.draw(&Circle::new(p, radius, ShapeStyle::from(&color).filled()))?;
    }
    Ok(())
}

/// A tick value without float noise: `0.15`, not `0.15000000000000002`.
fn tick_label(t: f64) -> String {
    if t.fract() == 0.0 {
        return format!("{t}");
    }
    let s = format!("{t:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_and_labels() {
        assert_eq!(nice_ticks(12.0), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0]);
        assert_eq!(short_bytes(1024.0), "1K");
        assert_eq!(tick_label(0.15000000000000002), "0.15");
        assert_eq!(tick_label(40.0), "40");
        assert_eq!(short_bytes(1.5 * 1048576.0), "1.5M");
        assert_eq!(short_bytes(8.0 * 1073741824.0), "8G");
        assert_ne!(glyph('A'), [0; 7]);
        assert_eq!(glyph('~'), [0; 7]);
    }

    #[test]
    fn writes_a_png() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.png");
        let s = Series {
            name: "triad".into(),
            points: vec![(1e5, 50.0), (1e6, 40.0), (1e8, 12.0)],
        };
        let m = Marker {
            x: 36.0 * 1048576.0,
            label: "L3 36M".into(),
        };
        sweep_png(&p, "STREAM SWEEP", &[s], &[m]).unwrap();
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(&bytes[1..4], b"PNG");
        assert!(sweep_png(&p, "x", &[], &[]).is_err());
    }

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
        workflow_png(&p, "WORKFLOW", &["ALONE", "WITH"], &bars, &lines).unwrap();
        assert_eq!(&std::fs::read(&p).unwrap()[1..4], b"PNG");
        assert!(workflow_png(&p, "x", &[], &[], &[]).is_err());
    }
}

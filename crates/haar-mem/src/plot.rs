//! The sweep plot: bandwidth against array size (log2 axis), one line per kernel, vertical
//! lines at the cache sizes, written as a PNG with `plotters`' bitmap backend; and the drawing
//! helpers every haar plot shares (haar-bench's workflow plot too): the font, labels, tick
//! values, colours, lines with dots.
//!
//! Text goes through plotters' own font support (its `ab_glyph` feature) with DejaVu Sans read
//! from Debian's `fonts-dejavu-core` at run time: no font lookup, no C dependencies.
//!
//! Owns how plots look; must not measure anything.

use std::sync::OnceLock;

use ab_glyph::{Font, FontRef, ScaleFont};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::register_font;
use plotters::style::text_anchor::{HPos, Pos, VPos};

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

/// Where the plots' font comes from: Debian's `fonts-dejavu-core` (scripts/setup.sh installs
/// it), registered with plotters' `ab_glyph` text support as the `sans-serif` family.
pub const FONT_DIR: &str = "/usr/share/fonts/truetype/dejavu";

/// The plots' fonts as ab_glyph reads them, for laying glyphs out.
struct Fonts {
    regular: FontRef<'static>,
    bold: FontRef<'static>,
}

fn fonts() -> &'static Result<Fonts, String> {
    static FONTS: OnceLock<Result<Fonts, String>> = OnceLock::new();
    FONTS.get_or_init(|| {
        let mut faces = Vec::new();
        for (file, style) in [
            ("DejaVuSans.ttf", FontStyle::Normal),
            ("DejaVuSans-Bold.ttf", FontStyle::Bold),
        ] {
            let path = std::path::Path::new(FONT_DIR).join(file);
            let bytes = std::fs::read(&path).map_err(|e| {
                format!(
                    "cannot read the plot font {}: {e} (install Debian's fonts-dejavu-core, as scripts/setup.sh does)",
                    path.display()
                )
            })?;
            // Registered once per process and used until it ends.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            let bad = || format!("{} is not a font plotters can read", path.display());
            register_font("sans-serif", style, bytes).map_err(|_| bad())?;
            faces.push(FontRef::try_from_slice(bytes).map_err(|_| bad())?);
        }
        let bold = faces.pop().expect("two faces");
        let regular = faces.pop().expect("two faces");
        Ok(Fonts { regular, bold })
    })
}

/// Registers the plots' font (DejaVu Sans, regular and bold) once per process.
///
/// # Errors
/// A message naming the missing file and the package that ships it.
pub fn prepare_fonts() -> Result<(), String> {
    fonts().as_ref().map(|_| ()).map_err(Clone::clone)
}

// Sizes are even: plotters puts a glyph at half the size plus its top, rounding towards zero,
// so with an odd size glyphs whose tops differ by a pixel (`z` and `e`) would land level.

/// Text size of tick labels, legends and marker labels, in pixels.
pub const SMALL: f64 = 14.0;
/// Text size of axis titles.
pub const MEDIUM: f64 = 16.0;
/// Text size of a plot's title (drawn bold).
pub const LARGE: f64 = 22.0;

/// Width in pixels of `text` drawn by [`label`] at `size` (0 without the font).
pub fn text_width(text: &str, size: f64) -> i32 {
    let Ok(fonts) = fonts() else { return 0 };
    let face = if size >= LARGE {
        &fonts.bold
    } else {
        &fonts.regular
    };
    let font = face.as_scaled(size as f32);
    let mut prev = None;
    text.chars()
        .map(|c| {
            let id = font.glyph_id(c);
            let kern = prev.map_or(0.0, |p| font.kern(p, id));
            prev = Some(id);
            kern + font.h_advance(id)
        })
        .sum::<f32>()
        .round() as i32
}

/// Draws `text` in the plots' font, `size` pixels high, with the point `anchor` of its box
/// (cap height, advance width) at `at`; `vertical` turns it 90° counter-clockwise (reading
/// bottom to top), the anchor turning with it. Sizes of [`LARGE`] and more are bold.
///
/// plotters (0.3.7) draws a string's glyphs without their left side bearings, which spaces
/// letters unevenly; so each glyph is drawn on its own, where ab_glyph's layout of the whole
/// string (advances, kerning, bearings) puts it.
pub fn label<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    text: &str,
    at: (i32, i32),
    size: f64,
    color: &RGBColor,
    anchor: Pos,
    vertical: bool,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let Ok(fonts) = fonts() else {
        // The callers check prepare_fonts() first; without a font there is nothing to draw.
        return Ok(());
    };
    let bold = size >= LARGE;
    let face = if bold { &fonts.bold } else { &fonts.regular };
    let font = face.as_scaled(size as f32);
    let mut pen = 0f32;
    let mut prev = None;
    let mut glyphs = Vec::new();
    for c in text.chars() {
        let id = font.glyph_id(c);
        if let Some(p) = prev {
            pen += font.kern(p, id);
        }
        prev = Some(id);
        if let Some(g) = font.outline_glyph(font.scaled_glyph(c)) {
            glyphs.push((c, (pen + g.px_bounds().min.x).round() as i32));
        }
        pen += font.h_advance(id);
    }
    // plotters puts a glyph's baseline half the size below where it is drawn.
    let cap = font
        .outline_glyph(font.scaled_glyph('H'))
        .map_or(0.73 * size as f32, |g| -g.px_bounds().min.y);
    let half = size as f32 / 2.0;
    let dx = match anchor.h_pos {
        HPos::Left => 0.0,
        HPos::Center => -pen / 2.0,
        HPos::Right => -pen,
    };
    let dy = match anchor.v_pos {
        VPos::Top => cap - half,
        VPos::Center => cap / 2.0 - half,
        VPos::Bottom => -half,
    };
    let style = if bold {
        ("sans-serif", size, FontStyle::Bold).into_font()
    } else {
        ("sans-serif", size).into_font()
    };
    let transform = if vertical {
        FontTransform::Rotate270
    } else {
        FontTransform::None
    };
    let style = style
        .color(color)
        .pos(Pos {
            h_pos: HPos::Left,
            v_pos: VPos::Top,
        })
        .transform(transform.clone());
    for (c, x) in glyphs {
        let (gx, gy) = transform.transform(x + dx.round() as i32, dy.round() as i32);
        area.draw_text(&c.to_string(), &style, (at.0 + gx, at.1 + gy))?;
    }
    Ok(())
}

/// Anchor: the left end of the text, centred vertically.
pub const LEFT: Pos = Pos {
    h_pos: HPos::Left,
    v_pos: VPos::Center,
};
/// Anchor: the right end of the text, centred vertically.
pub const RIGHT: Pos = Pos {
    h_pos: HPos::Right,
    v_pos: VPos::Center,
};
/// Anchor: the middle of the text's top edge.
pub const TOP: Pos = Pos {
    h_pos: HPos::Center,
    v_pos: VPos::Top,
};
/// Anchor: the middle of the text.
pub const CENTER: Pos = Pos {
    h_pos: HPos::Center,
    v_pos: VPos::Center,
};

/// Round numbers for axis ticks between 0 and `max`.
pub fn nice_ticks(max: f64) -> Vec<f64> {
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

/// The series colours, in order (matplotlib's first six, as the papers' figures use).
pub const COLORS: [RGBColor; 6] = [
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
    prepare_fonts()?;
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
        label(
            &root,
            &tick_label(t),
            (left - 8, y),
            SMALL,
            &dark,
            RIGHT,
            false,
        )
        .map_err(err)?;
    }
    let mut e = xmin as i32;
    while e <= xmax as i32 {
        let x = px(2f64.powi(e));
        root.draw(&PathElement::new(vec![(x, top), (x, bottom)], grey))
            .map_err(err)?;
        if (e - xmin as i32) % 2 == 0 || xmax - xmin <= 12.0 {
            label(
                &root,
                &short_bytes(2f64.powi(e)),
                (x, bottom + 8),
                SMALL,
                &dark,
                TOP,
                false,
            )
            .map_err(err)?;
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
    for m in markers {
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
        label(&root, &s.name, (lx + 38, ly + 7), SMALL, &dark, LEFT, false).map_err(err)?;
    }
    // Marker labels over the lines, low in the plot where bandwidth past the caches is small,
    // clear of the legend.
    for (i, m) in markers.iter().enumerate() {
        let x = px(m.x);
        if x < left || x > right {
            continue;
        }
        let y = bottom - 15 - 20 * i as i32;
        let w = text_width(&m.label, SMALL);
        root.draw(&Rectangle::new(
            [(x + 2, y - 9), (x + 8 + w, y + 9)],
            ShapeStyle::from(&WHITE).filled(),
        ))
        .map_err(err)?;
        label(
            &root,
            &m.label,
            (x + 5, y),
            SMALL,
            &marker_color,
            LEFT,
            false,
        )
        .map_err(err)?;
    }
    label(&root, title, (left, 28), LARGE, &BLACK, LEFT, false).map_err(err)?;
    label(
        &root,
        "Size of the three arrays (bytes, log2 axis)",
        ((left + right) / 2, h - 50),
        MEDIUM,
        &dark,
        TOP,
        false,
    )
    .map_err(err)?;
    label(
        &root,
        "Bandwidth (GB/s)",
        (35, (top + bottom) / 2),
        MEDIUM,
        &dark,
        CENTER,
        true,
    )
    .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

/// A series' line with a dot of `radius` at each point.
pub fn polyline<DB: DrawingBackend>(
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
pub fn tick_label(t: f64) -> String {
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
}

//! Line charts for `switchyard bench --report DIR`, each written as an SVG and a PNG (800×480).
//!
//! A chart is laid out once into a small display list (rects, polylines, text), which is then
//! emitted as SVG markup and rasterised in-process with `tiny-skia`, glyph outlines coming from
//! `ttf-parser`. Nothing needs system libraries; text in the PNG does need a TrueType font at run
//! time (`SWITCHYARD_CHART_FONT`, else DejaVu Sans and friends at their usual paths). Without one
//! the PNG is still written, minus its text, and a warning is logged once.

use std::fmt::{self, Write as _};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use tiny_skia::{FillRule, LineJoin, Paint, PathBuilder, Pixmap, Stroke, StrokeDash, Transform};
use ttf_parser::{Face, GlyphId};

mod axis;

use axis::{linear_axis, log_axis, Axis};

/// One line on a chart; points are drawn in the order given.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
    /// Logarithmic x axis (used for latency CDFs where x is latency in µs, or for percentile plots).
    pub x_log: bool,
    /// Optional vertical markers (x, label), e.g. "backend killed" / "restarted" on a failover timeline.
    pub markers: Vec<(f64, String)>,
}

const WIDTH: u32 = 800;
const HEIGHT: u32 = 480;
const FONT_ENV: &str = "SWITCHYARD_CHART_FONT";
const FONT_FAMILY: &str = "DejaVu Sans, Helvetica, Arial, sans-serif";
const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/noto/NotoSans-Regular.ttf",
    "/usr/share/fonts/noto/NotoSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
    "/Library/Fonts/Arial.ttf",
    "C:\\Windows\\Fonts\\arial.ttf",
];
const PALETTE: [Rgb; 8] = [
    Rgb(0x1f, 0x77, 0xb4),
    Rgb(0xff, 0x7f, 0x0e),
    Rgb(0x2c, 0xa0, 0x2c),
    Rgb(0xd6, 0x27, 0x28),
    Rgb(0x94, 0x67, 0xbd),
    Rgb(0x8c, 0x56, 0x4b),
    Rgb(0xe3, 0x77, 0xc2),
    Rgb(0x17, 0xbe, 0xcf),
];
const WHITE: Rgb = Rgb(0xff, 0xff, 0xff);
const TEXT: Rgb = Rgb(0x22, 0x22, 0x22);
const AXIS: Rgb = Rgb(0x44, 0x44, 0x44);
const GRID: Rgb = Rgb(0xe4, 0xe4, 0xe4);
const MARKER: Rgb = Rgb(0x55, 0x55, 0x55);

/// Writes DIR/STEM.svg and DIR/STEM.png. Returns the two paths.
pub fn write_chart(chart: &Chart, dir: &Path, stem: &str) -> io::Result<(PathBuf, PathBuf)> {
    let face = font_data().and_then(|data| Face::parse(data, 0).ok());
    let shapes = layout(chart, face.as_ref());
    std::fs::create_dir_all(dir)?;
    let svg_path = dir.join(format!("{stem}.svg"));
    let png_path = dir.join(format!("{stem}.png"));
    std::fs::write(&svg_path, render_svg(&shapes, &chart.title).map_err(io::Error::other)?)?;
    std::fs::write(&png_path, render_png(&shapes, face.as_ref())?)?;
    Ok((svg_path, png_path))
}

#[derive(Clone, Copy, PartialEq, Debug)]
struct Rgb(u8, u8, u8);

impl fmt::Display for Rgb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{:02x}{:02x}{:02x}", self.0, self.1, self.2)
    }
}

#[derive(Clone, Copy)]
enum Anchor {
    Start,
    Middle,
    End,
}

enum Shape {
    Rect { x: f32, y: f32, w: f32, h: f32, fill: Rgb },
    Line { pts: Vec<(f32, f32)>, color: Rgb, width: f32, dashed: bool },
    Text(Label),
}

/// A run of text whose baseline starts, centres or ends (per `anchor`) at `x, y`; `vertical` turns it
/// 90° anticlockwise about that point.
struct Label {
    x: f32,
    y: f32,
    text: String,
    size: f32,
    anchor: Anchor,
    color: Rgb,
    bold: bool,
    vertical: bool,
}

fn text(x: f32, y: f32, text: &str, size: f32, anchor: Anchor) -> Label {
    Label { x, y, text: text.to_owned(), size, anchor, color: TEXT, bold: false, vertical: false }
}

fn line(pts: Vec<(f32, f32)>, color: Rgb, width: f32) -> Shape {
    Shape::Line { pts, color, width, dashed: false }
}

/// The font's bytes, loaded once per process; `None` (and one warning) when no usable font exists.
fn font_data() -> Option<&'static [u8]> {
    static FONT: OnceLock<Option<Vec<u8>>> = OnceLock::new();
    FONT.get_or_init(|| {
        let env = std::env::var_os(FONT_ENV).map(PathBuf::from);
        let found = env.into_iter().chain(FONT_PATHS.iter().map(PathBuf::from)).find_map(|path| {
            let data = std::fs::read(path).ok()?;
            Face::parse(&data, 0).ok()?;
            Some(data)
        });
        if found.is_none() {
            tracing::warn!(
                "no TrueType font found (install fonts-dejavu-core or set {FONT_ENV}); PNG charts will have no text"
            );
        }
        found
    })
    .as_deref()
}

fn glyph(face: &Face<'_>, c: char) -> GlyphId {
    face.glyph_index(c).or_else(|| face.glyph_index('?')).unwrap_or(GlyphId(0))
}

fn text_width(face: Option<&Face<'_>>, text: &str, size: f32) -> f32 {
    match face {
        Some(face) => {
            let units: f32 = text.chars().map(|c| f32::from(face.glyph_hor_advance(glyph(face, c)).unwrap_or(0))).sum();
            units * size / f32::from(face.units_per_em())
        }
        None => text.chars().count() as f32 * size * 0.6,
    }
}

/// Whether a point can be drawn: finite, and positive on a log x axis.
fn drawable(chart: &Chart, x: f64, y: f64) -> bool {
    x.is_finite() && y.is_finite() && (!chart.x_log || x > 0.0)
}

/// Half a pixel off the grid, so a one-pixel line covers one row or column of pixels.
fn crisp(v: f32) -> f32 {
    v.round() + 0.5
}

/// The x and y axes covering every drawable point and marker; the y axis always includes 0.
fn axes(chart: &Chart) -> (Axis, Axis) {
    let points = chart.series.iter().flat_map(|s| s.points.iter().copied()).filter(|&(x, y)| drawable(chart, x, y));
    let markers = chart.markers.iter().filter(|(x, _)| drawable(chart, *x, 0.0));
    let xs = points.clone().map(|p| p.0).chain(markers.map(|m| m.0));
    let (x_lo, x_hi) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| (a.min(x), b.max(x)));
    let (y_lo, y_hi) = points.fold((0.0f64, f64::NEG_INFINITY), |(a, b), (_, y)| (a.min(y), b.max(y)));
    let y_hi = if y_hi.is_finite() { y_hi } else { 1.0 };
    let xa = match (x_lo.is_finite(), chart.x_log) {
        (true, true) => log_axis(x_lo, x_hi),
        (true, false) => linear_axis(x_lo, x_hi, false),
        (false, true) => log_axis(1.0, 10.0),
        (false, false) => linear_axis(0.0, 1.0, false),
    };
    (xa, linear_axis(y_lo, y_hi, true))
}

const LEGEND_FONT: f32 = 13.0;

/// Legend entries flow left to right under the x label, wrapping into rows: (series index, entry width).
fn legend_rows(chart: &Chart, face: Option<&Face<'_>>, w: f32) -> Vec<Vec<(usize, f32)>> {
    let mut rows: Vec<Vec<(usize, f32)>> = Vec::new();
    let mut row_width = f32::INFINITY;
    for (i, s) in chart.series.iter().enumerate() {
        let entry = 28.0 + text_width(face, &s.name, LEGEND_FONT) + 20.0;
        match rows.last_mut() {
            Some(row) if row_width + entry <= w - 40.0 => row.push((i, entry)),
            _ => {
                rows.push(vec![(i, entry)]);
                row_width = 0.0;
            }
        }
        row_width += entry;
    }
    rows
}

/// A marker's label placed above the plot: its line's x, the text's x, its row, the text.
type MarkerLabel<'c> = (f32, f32, usize, &'c String);

/// Marker labels sit above the plot, centred on their line, in as many rows as needed (at most four) to not
/// overlap. Returns how many rows they take, and the labels.
fn place_marker_labels<'c>(
    chart: &'c Chart,
    face: Option<&Face<'_>>,
    w: f32,
    px: impl Fn(f64) -> f32,
) -> (usize, Vec<MarkerLabel<'c>>) {
    let mut sorted: Vec<&(f64, String)> = chart.markers.iter().filter(|(x, _)| drawable(chart, *x, 0.0)).collect();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut row_ends: Vec<f32> = Vec::new();
    let mut marker_labels = Vec::with_capacity(sorted.len());
    for (x, label) in sorted {
        let (mx, tw) = (crisp(px(*x)), text_width(face, label, 12.0));
        let x0 = (mx - tw / 2.0).clamp(4.0, (w - 4.0 - tw).max(4.0));
        let row = row_ends.iter().position(|&end| end + 10.0 <= x0).unwrap_or(row_ends.len()).min(3);
        if row == row_ends.len() {
            row_ends.push(0.0);
        }
        row_ends[row] = x0 + tw;
        marker_labels.push((mx, x0, row, label));
    }
    (row_ends.len(), marker_labels)
}

/// Lays the chart out in pixel coordinates.
fn layout(chart: &Chart, face: Option<&Face<'_>>) -> Vec<Shape> {
    let (w, h) = (WIDTH as f32, HEIGHT as f32);
    let (xa, ya) = axes(chart);
    let rows = legend_rows(chart, face, w);

    let tick_font = 12.0;
    let y_tick_width = ya.ticks.iter().map(|(_, l)| text_width(face, l, tick_font)).fold(0.0, f32::max);
    let left = (y_tick_width + 12.0 + if chart.y_label.is_empty() { 8.0 } else { 30.0 }).round();
    let right = w - 24.0;
    let px = |x: f64| left + (xa.frac(x) as f32) * (right - left);
    let (marker_rows, marker_labels) = place_marker_labels(chart, face, w, px);

    let top = if chart.title.is_empty() { 20.0 } else { 50.0 } + marker_rows as f32 * 16.0;
    let bottom = h - 30.0 - if chart.x_label.is_empty() { 0.0 } else { 22.0 } - rows.len() as f32 * 20.0;
    let bottom = bottom.max(top + 40.0);
    let py = |y: f64| bottom - (ya.frac(y) as f32) * (bottom - top);

    let mut out = vec![Shape::Rect { x: 0.0, y: 0.0, w, h, fill: WHITE }];
    for &(x, _) in &xa.ticks {
        out.push(line(vec![(crisp(px(x)), top), (crisp(px(x)), bottom)], GRID, 1.0));
    }
    for &(y, _) in &ya.ticks {
        out.push(line(vec![(left, crisp(py(y))), (right, crisp(py(y)))], GRID, 1.0));
    }
    for &x in &xa.minor {
        out.push(line(vec![(crisp(px(x)), bottom), (crisp(px(x)), bottom + 3.0)], AXIS, 1.0));
    }
    for (x, label) in &xa.ticks {
        out.push(line(vec![(crisp(px(*x)), bottom), (crisp(px(*x)), bottom + 6.0)], AXIS, 1.0));
        out.push(Shape::Text(text(px(*x), bottom + 20.0, label, tick_font, Anchor::Middle)));
    }
    for (y, label) in &ya.ticks {
        out.push(line(vec![(left - 6.0, crisp(py(*y))), (left, crisp(py(*y)))], AXIS, 1.0));
        out.push(Shape::Text(text(left - 9.0, py(*y) + 4.0, label, tick_font, Anchor::End)));
    }
    out.push(line(vec![(crisp(left), top), (crisp(left), crisp(bottom)), (right, crisp(bottom))], AXIS, 1.0));

    for (i, s) in chart.series.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let mut pts: Vec<(f32, f32)> = Vec::with_capacity(s.points.len());
        for &(x, y) in s.points.iter().filter(|&&(x, y)| drawable(chart, x, y)) {
            let p = (px(x), py(y));
            // Drop points that land on (almost) the same pixel as the previous one: keeps the SVG small.
            match pts.last() {
                Some(&(lx, ly)) if (p.0 - lx).abs() < 0.25 && (p.1 - ly).abs() < 0.25 => {}
                _ => pts.push(p),
            }
        }
        if let [(x, y)] = pts[..] {
            out.push(Shape::Rect { x: x - 3.0, y: y - 3.0, w: 6.0, h: 6.0, fill: color });
        } else if pts.len() > 1 {
            out.push(line(pts, color, 2.0));
        }
    }

    for (mx, x0, row, label) in marker_labels {
        out.push(Shape::Line { pts: vec![(mx, top), (mx, bottom)], color: MARKER, width: 1.5, dashed: true });
        let y = top - 6.0 - 16.0 * row as f32;
        out.push(Shape::Text(Label { color: MARKER, ..text(x0, y, label, 12.0, Anchor::Start) }));
    }

    if !chart.title.is_empty() {
        out.push(Shape::Text(Label { bold: true, ..text(w / 2.0, 30.0, &chart.title, 18.0, Anchor::Middle) }));
    }
    if !chart.x_label.is_empty() {
        out.push(Shape::Text(text((left + right) / 2.0, bottom + 42.0, &chart.x_label, 14.0, Anchor::Middle)));
    }
    if !chart.y_label.is_empty() {
        let label = text(18.0, (top + bottom) / 2.0, &chart.y_label, 14.0, Anchor::Middle);
        out.push(Shape::Text(Label { vertical: true, ..label }));
    }
    for (r, row) in rows.iter().enumerate() {
        let total: f32 = row.iter().map(|e| e.1).sum::<f32>() - 20.0;
        let mut x = ((w - total) / 2.0).round();
        let y = h - 14.0 - (rows.len() - 1 - r) as f32 * 20.0;
        for &(i, entry) in row {
            out.push(line(vec![(x, y - 4.0), (x + 22.0, y - 4.0)], PALETTE[i % PALETTE.len()], 3.0));
            out.push(Shape::Text(text(x + 28.0, y, &chart.series[i].name, LEGEND_FONT, Anchor::Start)));
            x += entry;
        }
    }
    out
}

fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

fn render_svg(shapes: &[Shape], title: &str) -> Result<String, fmt::Error> {
    let mut s = String::with_capacity(32 * 1024);
    write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" "#,
    )?;
    writeln!(s, r#"font-family="{FONT_FAMILY}">"#)?;
    writeln!(s, "<title>{}</title>", xml_escape(title))?;
    for shape in shapes {
        match shape {
            Shape::Rect { x, y, w, h, fill } => {
                writeln!(s, r#"<rect x="{x}" y="{y}" width="{w}" height="{h}" fill="{fill}"/>"#)?;
            }
            Shape::Line { pts, color, width, dashed } => {
                write!(s, r#"<polyline fill="none" stroke="{color}" stroke-width="{width}" stroke-linejoin="round""#)?;
                if *dashed {
                    write!(s, r#" stroke-dasharray="6 4""#)?;
                }
                write!(s, r#" points=""#)?;
                for (i, (x, y)) in pts.iter().enumerate() {
                    write!(s, "{}{x:.1},{y:.1}", if i == 0 { "" } else { " " })?;
                }
                writeln!(s, r#""/>"#)?;
            }
            Shape::Text(Label { x, y, text, size, anchor, color, bold, vertical }) => {
                let anchor = match anchor {
                    Anchor::Start => "start",
                    Anchor::Middle => "middle",
                    Anchor::End => "end",
                };
                write!(s, r#"<text x="{x:.1}" y="{y:.1}" font-size="{size}" fill="{color}" text-anchor="{anchor}""#)?;
                if *bold {
                    write!(s, r#" font-weight="bold""#)?;
                }
                if *vertical {
                    write!(s, r#" transform="rotate(-90 {x:.1} {y:.1})""#)?;
                }
                writeln!(s, ">{}</text>", xml_escape(text))?;
            }
        }
    }
    writeln!(s, "</svg>")?;
    Ok(s)
}

fn paint(c: Rgb) -> Paint<'static> {
    let mut p = Paint::default();
    p.set_color_rgba8(c.0, c.1, c.2, 255);
    p.anti_alias = true;
    p
}

/// Collects glyph outlines (font units, y up) into one path, each glyph shifted by the pen position.
struct Outline {
    pb: PathBuilder,
    dx: f32,
}

impl ttf_parser::OutlineBuilder for Outline {
    fn move_to(&mut self, x: f32, y: f32) {
        self.pb.move_to(x + self.dx, y);
    }
    fn line_to(&mut self, x: f32, y: f32) {
        self.pb.line_to(x + self.dx, y);
    }
    fn quad_to(&mut self, x1: f32, y1: f32, x: f32, y: f32) {
        self.pb.quad_to(x1 + self.dx, y1, x + self.dx, y);
    }
    fn curve_to(&mut self, x1: f32, y1: f32, x2: f32, y2: f32, x: f32, y: f32) {
        self.pb.cubic_to(x1 + self.dx, y1, x2 + self.dx, y2, x + self.dx, y);
    }
    fn close(&mut self) {
        self.pb.close();
    }
}

fn draw_text(pm: &mut Pixmap, face: &Face<'_>, label: &Label) {
    let Label { x, y, ref text, size, anchor, color, bold, vertical } = *label;
    let scale = size / f32::from(face.units_per_em());
    let width = text_width(Some(face), text, size);
    let shift = match anchor {
        Anchor::Start => 0.0,
        Anchor::Middle => -width / 2.0,
        Anchor::End => -width,
    };
    let mut outline = Outline { pb: PathBuilder::new(), dx: 0.0 };
    for c in text.chars() {
        let g = glyph(face, c);
        face.outline_glyph(g, &mut outline);
        outline.dx += f32::from(face.glyph_hor_advance(g).unwrap_or(0));
    }
    let Some(path) = outline.pb.finish() else { return };
    let mut t = Transform::from_translate(x, y);
    if vertical {
        t = t.pre_rotate(-90.0);
    }
    let t = t.pre_translate(shift, 0.0).pre_scale(scale, -scale);
    pm.fill_path(&path, &paint(color), FillRule::Winding, t, None);
    if bold {
        let stroke = Stroke { width: 0.8 / scale, line_join: LineJoin::Round, ..Stroke::default() };
        pm.stroke_path(&path, &paint(color), &stroke, t, None);
    }
}

fn render_png(shapes: &[Shape], face: Option<&Face<'_>>) -> io::Result<Vec<u8>> {
    let mut pm = Pixmap::new(WIDTH, HEIGHT).ok_or_else(|| io::Error::other("cannot allocate chart pixmap"))?;
    for shape in shapes {
        match shape {
            Shape::Rect { x, y, w, h, fill } => {
                if let Some(rect) = tiny_skia::Rect::from_xywh(*x, *y, *w, *h) {
                    pm.fill_rect(rect, &paint(*fill), Transform::identity(), None);
                }
            }
            Shape::Line { pts, color, width, dashed } => {
                let mut pb = PathBuilder::new();
                for (i, &(x, y)) in pts.iter().enumerate() {
                    if i == 0 {
                        pb.move_to(x, y);
                    } else {
                        pb.line_to(x, y);
                    }
                }
                let Some(path) = pb.finish() else { continue };
                let dash = if *dashed { StrokeDash::new(vec![6.0, 4.0], 0.0) } else { None };
                let stroke = Stroke { width: *width, line_join: LineJoin::Round, dash, ..Stroke::default() };
                pm.stroke_path(&path, &paint(*color), &stroke, Transform::identity(), None);
            }
            Shape::Text(label) => {
                if let Some(face) = face {
                    draw_text(&mut pm, face, label);
                }
            }
        }
    }
    pm.encode_png().map_err(io::Error::other)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("switchyard-chart-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn cdf(scale: f64) -> Vec<(f64, f64)> {
        (1..=200).map(|i| (scale * (1.0 + f64::from(i) * 0.05).powi(3), f64::from(i) / 200.0)).collect()
    }

    #[test]
    fn writes_svg_and_png() {
        let chart = Chart {
            title: "Latency CDF".into(),
            x_label: "latency (µs)".into(),
            y_label: "fraction of requests".into(),
            series: vec![
                Series { name: "direct".into(), points: cdf(80.0) },
                Series { name: "gateway <& proxy>".into(), points: cdf(95.0) },
            ],
            x_log: true,
            markers: vec![(1000.0, "1 ms".into())],
        };
        let dir = temp_dir("cdf");
        let (svg, png) = write_chart(&chart, &dir, "latency_cdf").unwrap();
        assert_eq!(svg, dir.join("latency_cdf.svg"));
        assert_eq!(png, dir.join("latency_cdf.png"));
        let svg_text = std::fs::read_to_string(&svg).unwrap();
        assert!(svg_text.starts_with("<svg"));
        assert!(svg_text.contains("Latency CDF"));
        assert!(svg_text.contains(">direct<"));
        assert!(svg_text.contains("gateway &lt;&amp; proxy&gt;"));
        assert!(svg_text.contains("1 ms"));
        let bytes = std::fs::read(&png).unwrap();
        assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"));
        let pixmap = Pixmap::decode_png(&bytes).unwrap();
        assert_eq!((pixmap.width(), pixmap.height()), (WIDTH, HEIGHT));
        let rgb = |p: &tiny_skia::PremultipliedColorU8| Rgb(p.red(), p.green(), p.blue());
        let colored = |c: Rgb| pixmap.pixels().iter().filter(|p| rgb(p) == c).count();
        assert!(colored(PALETTE[0]) > 100, "first series line should be drawn");
        assert!(colored(PALETTE[1]) > 100, "second series line should be drawn");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn degenerate_input_still_renders() {
        let chart = Chart {
            title: String::new(),
            x_label: String::new(),
            y_label: String::new(),
            series: vec![
                Series { name: "empty".into(), points: vec![] },
                Series { name: "one".into(), points: vec![(3.0, 3.0), (f64::NAN, 1.0)] },
            ],
            x_log: false,
            markers: vec![(f64::INFINITY, "ignored".into())],
        };
        let dir = temp_dir("degenerate");
        let (svg, png) = write_chart(&chart, &dir, "x").unwrap();
        assert!(std::fs::read_to_string(svg).unwrap().contains(">one<"));
        assert!(std::fs::read(png).unwrap().starts_with(b"\x89PNG"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn axis_ticks() {
        let labels = |a: &Axis| a.ticks.iter().map(|t| t.1.clone()).collect::<Vec<_>>();
        let a = linear_axis(0.0, 1.0, false);
        assert_eq!(labels(&a), ["0", "0.2", "0.4", "0.6", "0.8", "1"]);
        let a = linear_axis(0.0, 48_000.0, false);
        assert_eq!((a.min, a.max), (0.0, 50_000.0));
        assert_eq!(labels(&a), ["0", "10k", "20k", "30k", "40k", "50k"]);
        let a = log_axis(150.0, 8000.0);
        assert_eq!((a.min, a.max), (100.0, 10_000.0));
        assert_eq!(labels(&a), ["100", "200", "500", "1k", "2k", "5k", "10k"]);
        assert!((a.frac(1000.0) - 0.5).abs() < 1e-9);
        assert_eq!(labels(&log_axis(3.0, 2e6)), ["10", "100", "1k", "10k", "100k", "1M"]);
    }
}

//! The report's plots: what a scenario measured over time (or as a distribution), kept as
//! data in its [`Outcome`](super::Outcome) and drawn as SVG with plotters.
//!
//! A [`Chart`] is one SVG file of one or more side-by-side [`Panel`]s (with Tessera, without
//! it), each of [`Series`] of points. Text goes into the SVG as `<text>` elements for the
//! viewer to set, so drawing needs no fonts on this machine (plotters estimates a label's
//! width from its length, which is all the layout needs).

use super::error::ScenarioError;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stroke {
    /// A measured line.
    Solid,
    /// A target or a cap.
    Dashed,
}

/// One line of a panel.
#[derive(Debug, Clone)]
pub struct Series {
    /// Its name in the legend; empty for none.
    pub name: String,
    /// Index into the palette: a container keeps its colour across panels and its target.
    pub color: usize,
    /// How it is drawn.
    pub stroke: Stroke,
    /// `(x, y)` in the chart's units, in x order.
    pub points: Vec<(f64, f64)>,
}

impl Series {
    /// A measured line.
    pub fn line(name: impl Into<String>, color: usize, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.into(),
            color,
            stroke: Stroke::Solid,
            points,
        }
    }

    /// A dashed line (a target or a cap).
    pub fn dashed(name: impl Into<String>, color: usize, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.into(),
            color,
            stroke: Stroke::Dashed,
            points,
        }
    }
}

/// One plotting area.
#[derive(Debug, Clone)]
pub struct Panel {
    /// Its caption, like "with Tessera".
    pub title: String,
    /// Its lines.
    pub series: Vec<Series>,
}

/// One SVG file.
#[derive(Debug, Clone)]
pub struct Chart {
    /// The file's stem: `<file>.svg` in the plots folder.
    pub file: String,
    /// What it shows, in one line: the report's link text and the SVG's title.
    pub title: String,
    /// The x axis, with its unit.
    pub x_label: String,
    /// The y axis, with its unit.
    pub y_label: String,
    /// The y range; `None` for 0 to a little above the largest value.
    pub y_range: Option<(f64, f64)>,
    /// Whether the panels share the x range (time); `false` where each has its own
    /// (latencies of different requests).
    pub shared_x: bool,
    /// Side by side, sharing the y range.
    pub panels: Vec<Panel>,
}

/// The palette: distinguishable on white and in grey print (Okabe–Ito, less yellow).
const PALETTE: [RGBColor; 7] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(230, 159, 0),
    RGBColor(60, 60, 60),
];

/// The colour of palette entry `i` (wrapping).
fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// Each panel's plot in pixels (its legend goes below).
const PANEL_W: u32 = 560;
const PANEL_H: u32 = 400;

impl Chart {
    /// The x and y ranges of the points of `panels`.
    fn ranges(&self, panels: &[Panel]) -> ((f64, f64), (f64, f64)) {
        let points = || {
            panels
                .iter()
                .flat_map(|p| &p.series)
                .flat_map(|s| &s.points)
                .filter(|(x, y)| x.is_finite() && y.is_finite())
        };
        let (mut x0, mut x1) = (f64::INFINITY, f64::NEG_INFINITY);
        let mut y1 = f64::NEG_INFINITY;
        for &(x, y) in points() {
            x0 = x0.min(x);
            x1 = x1.max(x);
            y1 = y1.max(y);
        }
        if !x0.is_finite() {
            (x0, x1, y1) = (0.0, 1.0, 1.0);
        }
        if x1 <= x0 {
            x1 = x0 + 1.0;
        }
        let y = self.y_range.unwrap_or((0.0, (y1 * 1.08).max(1e-9)));
        ((x0, x1), y)
    }

    /// The x range of one panel: its own, or the one all share.
    fn x_range(&self, panel: &Panel) -> (f64, f64) {
        if self.shared_x {
            self.ranges(&self.panels).0
        } else {
            self.ranges(std::slice::from_ref(panel)).0
        }
    }

    /// The chart as an SVG document.
    pub fn to_svg(&self) -> Result<String, ScenarioError> {
        let mut svg = String::new();
        let panels = self.panels.len().max(1);
        let size = (
            PANEL_W * panels as u32,
            PANEL_H + 40 + self.legend_rows() * LEGEND_ROW as u32 + 8,
        );
        {
            let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
            let failed = |e: &dyn std::fmt::Display| ScenarioError::Plot {
                file: self.file.clone(),
                reason: e.to_string(),
            };
            self.draw(&root).map_err(|e| failed(&e))?;
            root.present().map_err(|e| failed(&e))?;
        }
        // The document's title, for screen readers and for a reader hovering over it.
        let title = format!("<title>{}</title>\n", escape(&self.title));
        Ok(match svg.find('>') {
            Some(i) => format!("{}\n{title}{}", &svg[..=i], svg[i + 1..].trim_start()),
            None => svg,
        })
    }

    /// Legend rows under each panel: two entries a row.
    fn legend_rows(&self) -> u32 {
        let most = self
            .panels
            .iter()
            .map(|p| p.series.iter().filter(|s| !s.name.is_empty()).count())
            .max()
            .unwrap_or(0);
        most.div_ceil(2) as u32
    }

    fn draw<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, plotters::coord::Shift>,
    ) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
        root.fill(&WHITE)?;
        let root = root.titled(&self.title, ("sans-serif", 24))?;
        let (_, (y0, y1)) = self.ranges(&self.panels);
        let areas = root.split_evenly((1, self.panels.len().max(1)));
        for (panel, area) in self.panels.iter().zip(&areas) {
            let (x0, x1) = self.x_range(panel);
            // The legend goes under the plot, where it hides no line.
            let (plot, legend) = area.split_vertically(PANEL_H);
            let mut chart = ChartBuilder::on(&plot)
                .caption(&panel.title, ("sans-serif", 19))
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(56)
                .build_cartesian_2d(x0..x1, y0..y1)?;
            chart
                .configure_mesh()
                .x_desc(self.x_label.as_str())
                .y_desc(self.y_label.as_str())
                .x_label_formatter(&|v| tick(*v))
                .y_label_formatter(&|v| tick(*v))
                .label_style(("sans-serif", 15))
                .axis_desc_style(("sans-serif", 16))
                .bold_line_style(RGBColor(225, 225, 225))
                .light_line_style(TRANSPARENT)
                .draw()?;
            for s in &panel.series {
                let c = color(s.color);
                let points = s.points.iter().copied();
                match s.stroke {
                    Stroke::Solid => {
                        chart.draw_series(LineSeries::new(points, c.stroke_width(2)))?
                    }
                    Stroke::Dashed => {
                        chart.draw_series(DashedLineSeries::new(points, 6, 4, c.stroke_width(1)))?
                    }
                };
            }
            let named = panel.series.iter().filter(|s| !s.name.is_empty());
            let column = (legend.dim_in_pixel().0 as i32 - LEGEND_LEFT) / 2;
            for (k, s) in named.enumerate() {
                let x = LEGEND_LEFT + column * (k % 2) as i32;
                let y = LEGEND_ROW * (k / 2) as i32 + LEGEND_ROW / 2;
                let c = color(s.color);
                match s.stroke {
                    Stroke::Solid => legend.draw(&PathElement::new(
                        vec![(x, y), (x + 22, y)],
                        c.stroke_width(2),
                    ))?,
                    Stroke::Dashed => {
                        for dash in [x, x + 9, x + 18] {
                            legend.draw(&PathElement::new(
                                vec![(dash, y), (dash + 5, y)],
                                c.stroke_width(1),
                            ))?;
                        }
                    }
                }
                let font = ("sans-serif", 15)
                    .into_font()
                    .into_text_style(&legend)
                    .pos(Pos::new(HPos::Left, VPos::Center));
                legend.draw(&Text::new(s.name.as_str(), (x + 30, y), font))?;
            }
        }
        Ok(())
    }
}

/// A tick label: at most two decimals, none that are zeros.
fn tick(v: f64) -> String {
    let text = format!("{v:.2}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        "0".to_string()
    } else {
        text.to_string()
    }
}

/// Where the legend's first column starts, and the height of one of its rows, in pixels.
const LEGEND_LEFT: i32 = 68;
const LEGEND_ROW: i32 = 22;

/// `text` with XML's special characters escaped.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The empirical CDF of `values` as points `(value, fraction at or below it)`, as a
/// staircase.
pub fn cdf(values: &[f64]) -> Vec<(f64, f64)> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    let n = v.len() as f64;
    let mut points = Vec::with_capacity(v.len() * 2);
    for (i, &x) in v.iter().enumerate() {
        points.push((x, i as f64 / n));
        points.push((x, (i + 1) as f64 / n));
    }
    points
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart() -> Chart {
        Chart {
            file: "demo".into(),
            title: "shares <over> time".into(),
            x_label: "time (s)".into(),
            y_label: "share of GPU time (%)".into(),
            y_range: Some((0.0, 100.0)),
            shared_x: true,
            panels: vec![
                Panel {
                    title: "with Tessera".into(),
                    series: vec![
                        Series::line("fixed20", 0, vec![(0.0, 19.0), (1.0, 21.0), (2.0, 20.0)]),
                        Series::dashed("target 20 %", 0, vec![(0.0, 20.0), (2.0, 20.0)]),
                    ],
                },
                Panel {
                    title: "without Tessera".into(),
                    series: vec![Series::line("fixed20", 0, vec![(0.0, 33.0), (2.0, 34.0)])],
                },
            ],
        }
    }

    #[test]
    fn an_svg_has_titles_legends_axes_and_every_line() {
        let svg = chart().to_svg().unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..80.min(svg.len())]);
        assert!(svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("<title>shares &lt;over&gt; time</title>"));
        for text in [
            "with Tessera",
            "without Tessera",
            "fixed20",
            "target 20 %",
            "time (s)",
            "share of GPU time (%)",
        ] {
            // plotters writes each text on a line of its own inside its element.
            assert!(
                svg.contains(&format!(">\n{text}\n</text>")),
                "no text {text}"
            );
        }
        // Two measured lines and one dashed target (drawn as dashes), plus legend samples.
        assert!(svg.matches("<polyline").count() >= 3, "{svg}");
        // Balanced: every element opened is closed.
        assert_eq!(svg.matches("<text").count(), svg.matches("</text>").count());
        assert_eq!(svg.matches("<svg").count(), 1);
    }

    #[test]
    fn ranges_cover_every_point() {
        let mut c = chart();
        c.y_range = None;
        let ((x0, x1), (y0, y1)) = c.ranges(&c.panels);
        assert_eq!((x0, x1, y0), (0.0, 2.0, 0.0));
        assert!(y1 >= 34.0);
        c.panels[1].series[0].points = vec![(5.0, 1.0), (9.0, 2.0)];
        assert_eq!(c.x_range(&c.panels[1]), (0.0, 9.0));
        c.shared_x = false;
        assert_eq!(c.x_range(&c.panels[1]), (5.0, 9.0));
    }

    #[test]
    fn ticks_read_well() {
        assert_eq!(tick(100.0), "100");
        assert_eq!(tick(2.5), "2.5");
        assert_eq!(tick(0.126), "0.13");
        assert_eq!(tick(-0.0001), "0");
    }

    #[test]
    fn a_cdf_climbs_to_one_in_value_order() {
        let c = cdf(&[3.0, 1.0, 2.0, 2.0]);
        assert_eq!(c.first(), Some(&(1.0, 0.0)));
        assert_eq!(c.last(), Some(&(3.0, 1.0)));
        assert!(c.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
        assert!(cdf(&[]).is_empty());
    }
}

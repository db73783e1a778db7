//! The insights page's charts (issue 16 §4), drawn on the server as inline SVG with `plotters`
//! (its SVG backend only; text is laid out with its estimated metrics and written as SVG
//! `<text>`): prompts per day, approval rate by tool, time to decision by tool.
//!
//! Each chart is an `<svg role="img">` named by its `<title>` (`aria-labelledby`) and described
//! by its `<desc>` (`aria-describedby`); the page puts a table with the same numbers beside it. Tool names
//! come from agents: plotters escapes `<`, `>`, `&`, `"` and `'` in every text and attribute it
//! writes, and the title and description are escaped here, so a name cannot close an element
//! or open one. Nothing is drawn with a `style` attribute (the page's CSP allows no inline
//! style): plotters writes presentation attributes (`fill`, `stroke`, `font-size`).

use assent_api::insights::{DayPrompts, Figures};
use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;

/// How many tools a chart shows at most (the most prompted; the tables list up to 50).
pub(crate) const CHART_TOOLS: usize = 15;
/// A chart's width in SVG user units.
const WIDTH: u32 = 720;
/// The bars' colour (dark blue: 8.6:1 against white).
const BAR: RGBColor = RGBColor(0x1f, 0x4e, 0x8c);
/// The lighter bars of the p90 series (4.6:1 against white).
const LIGHT: RGBColor = RGBColor(0x5b, 0x7f, 0xb8);
/// The charts' text: axis labels, descriptions, legends.
const TEXT: (&str, u32) = ("sans-serif", 15);
/// The longest tool name drawn, in characters (longer ones end in `…`; the table has it whole).
const LABEL_CHARS: usize = 28;

/// One drawn chart: the inline SVG markup (safe to put in the page unescaped) and its id.
pub(crate) struct Chart {
    /// The `id` of the `<svg>` (its title is `{id}-title`, its description `{id}-desc`).
    pub(crate) id: &'static str,
    /// The `<svg>` element.
    pub(crate) svg: String,
}

/// `s` with `&`, `<`, `>`, `"` and `'` escaped, for SVG text and attributes.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A tool name as drawn: what acts on the display (control, bidirectional, invisible
/// characters) made visible as `\uXXXX` ([`assent_core::template::visible`]; found by review:
/// only controls were dropped, so a right-to-left override reordered the label), cut to
/// [`LABEL_CHARS`].
fn label(s: &str) -> String {
    assent_core::summary::cut(&assent_core::template::visible(s), LABEL_CHARS)
}

/// Plotters' `svg` with its accessible name and description: `id`, `role="img"`, labelled by
/// the `<title>` and described by the `<desc>` put first inside it.
fn accessible(id: &'static str, svg: &str, title: &str, desc: &str) -> Chart {
    let body = svg.trim_start().strip_prefix("<svg").unwrap_or(svg);
    let (attrs, rest) = body.split_once('>').unwrap_or((body, ""));
    let svg = format!(
        "<svg id=\"{id}\" role=\"img\" aria-labelledby=\"{id}-title\" aria-describedby=\"{id}-desc\" focusable=\"false\"{attrs}>\
         <title id=\"{id}-title\">{}</title><desc id=\"{id}-desc\">{}</desc>{rest}",
        escape(title),
        escape(desc),
    );
    Chart { id, svg }
}

/// Prompts per UTC day as vertical bars (dates on the x axis, a label about every seventh).
pub(crate) fn prompts_per_day(days: &[DayPrompts]) -> Result<Chart, String> {
    let n = days.len() as u32;
    let top = days.iter().map(|d| d.prompts).max().unwrap_or(0).max(1);
    let total: u64 = days.iter().map(|d| d.prompts).sum();
    let every = (days.len() / 8).max(1);
    let mut buf = String::new();
    {
        let root = SVGBackend::with_string(&mut buf, (WIDTH, 300)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut chart = ChartBuilder::on(&root)
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(56)
            .build_cartesian_2d((0..n).into_segmented(), 0..top + top / 10 + 1)
            .map_err(|e| e.to_string())?;
        let day_label = |v: &SegmentValue<u32>| match v {
            SegmentValue::CenterOf(i) if (*i as usize).is_multiple_of(every) => days
                .get(*i as usize)
                .map(|d| d.day.get(5..).unwrap_or(&d.day).to_string())
                .unwrap_or_default(),
            _ => String::new(),
        };
        chart
            .configure_mesh()
            .disable_x_mesh()
            .light_line_style(TRANSPARENT)
            .label_style(TEXT)
            .axis_desc_style(TEXT)
            .x_labels(days.len().min(60))
            .x_label_formatter(&day_label)
            .y_desc("Prompts")
            .x_desc("Day (UTC)")
            .draw()
            .map_err(|e| e.to_string())?;
        chart
            .draw_series(
                Histogram::vertical(&chart)
                    .style(BAR.filled())
                    .margin(1)
                    .data(days.iter().enumerate().map(|(i, d)| (i as u32, d.prompts))),
            )
            .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    let (first, last) = (
        days.first().map_or("", |d| d.day.as_str()),
        days.last().map_or("", |d| d.day.as_str()),
    );
    let desc = format!(
        "Bar chart: {total} prompts over {} days from {first} to {last}, at most {top} in one day. The table \"Prompts per day\" has every day's number.",
        days.len()
    );
    Ok(accessible("chart-days", &buf, "Prompts per day", &desc))
}

/// One series of bars: its legend name and each tool's value.
struct Series<'a> {
    name: &'a str,
    value: &'a dyn Fn(&Figures) -> f64,
}

/// Horizontal bars, one per tool of `rows` (at most [`CHART_TOOLS`]), of `front` (drawn from
/// 0 to `max`), with the tools' names on the y axis; a second, lighter and longer series
/// behind, when `behind` gives one (then with a legend).
fn tool_bars(
    rows: &[&Figures],
    max: f64,
    x_desc: &str,
    front: Series<'_>,
    behind: Option<Series<'_>>,
) -> Result<String, String> {
    let n = rows.len() as u32;
    let height = 80 + 34 * n.max(1);
    // The first (most prompted) tool at the top: row `i` is drawn at `n - 1 - i`.
    let names: Vec<String> = rows.iter().rev().map(|f| label(&f.key)).collect();
    let at = |i: usize| n - 1 - i as u32;
    let mut buf = String::new();
    {
        let root = SVGBackend::with_string(&mut buf, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut chart = ChartBuilder::on(&root)
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(200)
            .build_cartesian_2d(0.0..max, (0..n.max(1)).into_segmented())
            .map_err(|e| e.to_string())?;
        let name = |v: &SegmentValue<u32>| match v {
            SegmentValue::CenterOf(i) => names.get(*i as usize).cloned().unwrap_or_default(),
            _ => String::new(),
        };
        chart
            .configure_mesh()
            .disable_y_mesh()
            .light_line_style(TRANSPARENT)
            .label_style(TEXT)
            .axis_desc_style(TEXT)
            .y_labels(rows.len().max(1))
            .y_label_formatter(&name)
            .x_desc(x_desc)
            .draw()
            .map_err(|e| e.to_string())?;
        let has_legend = behind.is_some();
        if let Some(Series {
            name: what,
            value: f,
        }) = behind
        {
            chart
                .draw_series(
                    Histogram::horizontal(&chart)
                        .style(LIGHT.filled())
                        .margin(3)
                        .data(rows.iter().enumerate().map(|(i, r)| (at(i), f(r)))),
                )
                .map_err(|e| e.to_string())?
                .label(what)
                .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], LIGHT.filled()));
        }
        chart
            .draw_series(
                Histogram::horizontal(&chart)
                    .style(BAR.filled())
                    .margin(7)
                    .data(
                        rows.iter()
                            .enumerate()
                            .map(|(i, r)| (at(i), (front.value)(r))),
                    ),
            )
            .map_err(|e| e.to_string())?
            .label(front.name)
            .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], BAR.filled()));
        if has_legend {
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.9))
                .border_style(BLACK)
                .label_font(TEXT)
                .position(SeriesLabelPosition::UpperRight)
                .draw()
                .map_err(|e| e.to_string())?;
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(buf)
}

/// The approval rate (percent of a person's decisions that approved) of each tool with one.
pub(crate) fn approval_rate(tools: &[Figures]) -> Result<Chart, String> {
    let rows: Vec<&Figures> = tools
        .iter()
        .filter(|f| f.approval_rate.is_some())
        .take(CHART_TOOLS)
        .collect();
    let pct = |f: &Figures| f.approval_rate.unwrap_or(0.0) * 100.0;
    let rate = Series {
        name: "rate",
        value: &pct,
    };
    let svg = tool_bars(&rows, 100.0, "Approved, % of decisions", rate, None)?;
    let listed: Vec<String> = rows
        .iter()
        .map(|f| format!("{} {:.0}%", label(&f.key), pct(f)))
        .collect();
    let desc = format!(
        "Bar chart of the share of decisions that approved, per tool ({} tools with decisions, most prompted first): {}. The table \"By tool\" has the same numbers.",
        rows.len(),
        if listed.is_empty() {
            "none".into()
        } else {
            listed.join(", ")
        }
    );
    Ok(accessible(
        "chart-rate",
        &svg,
        "Approval rate by tool",
        &desc,
    ))
}

/// The median and 90th-percentile time to a person's decision of each tool with one, seconds.
pub(crate) fn time_to_decision(tools: &[Figures]) -> Result<Chart, String> {
    let rows: Vec<&Figures> = tools
        .iter()
        .filter(|f| f.median_seconds.is_some())
        .take(CHART_TOOLS)
        .collect();
    let p90 = |f: &Figures| f.p90_seconds.unwrap_or(0.0);
    let median = |f: &Figures| f.median_seconds.unwrap_or(0.0);
    // Room on the right for the legend.
    let max = rows.iter().map(|f| p90(f)).fold(1.0, f64::max) * 1.5;
    let svg = tool_bars(
        &rows,
        max,
        "Seconds from the card to a decision",
        Series {
            name: "median",
            value: &median,
        },
        Some(Series {
            name: "90th percentile",
            value: &p90,
        }),
    )?;
    let listed: Vec<String> = rows
        .iter()
        .map(|f| format!("{} median {} s, p90 {} s", label(&f.key), median(f), p90(f)))
        .collect();
    let desc = format!(
        "Bar chart of the time from a card being raised to a person's decision, per tool: {}. The table \"By tool\" has the same numbers.",
        if listed.is_empty() {
            "no decisions".into()
        } else {
            listed.join("; ")
        }
    );
    Ok(accessible(
        "chart-time",
        &svg,
        "Time to decision by tool",
        &desc,
    ))
}

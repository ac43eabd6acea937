//! The report on the terminal (a table), as JSON (`--json`), and as an SVG plot of per-turn latency against
//! transcript length (`--plot`, the agent scenario).

use std::fmt::Write as _;
use std::path::Path;

use agentd::bench::tool_calls::{Report, TurnReport};
use agentd::bench::{Distribution, PairedRatios, Side, Summary};
use anyhow::Context;
use plotters::prelude::*;

fn side_name(side: Side) -> &'static str {
    match side {
        Side::A => "A",
        Side::B => "B",
    }
}

fn row(out: &mut String, label: &str, d: Option<Distribution>) {
    let _ = match d {
        Some(d) => writeln!(
            out,
            "  {label:<27}{:>5}{:>10.1}{:>10.1}{:>10.1}{:>10.1}",
            d.n, d.p50, d.p90, d.p99, d.mean
        ),
        None => writeln!(out, "  {label:<27}{:>5}{:>10}", 0, "-"),
    };
}

fn summary_rows(out: &mut String, s: &Summary) {
    let _ = writeln!(
        out,
        "  {:<27}{:>5}{:>10}{:>10}{:>10}{:>10}",
        "metric (ms)", "n", "p50", "p90", "p99", "mean"
    );
    row(out, "time to first token", s.ttft_ms);
    row(out, "time to tool name", s.tool_name_ms);
    row(out, "time to complete call", s.call_complete_ms);
    row(out, "total", s.total_ms);
    row(out, "inter-token latency", s.itl_ms);
    row(out, "time per output token", s.tpot_ms);
    row(out, "output tok/s (end to end)", s.output_tok_s);
    let tokens = if s.output_tokens_exact {
        "output tokens (server)"
    } else {
        "output tokens (chunks)"
    };
    row(out, tokens, s.output_tokens);
    if s.server_prefill_ms.is_some() || s.server_decode_ms.is_some() {
        // The server's own split (its `timings`): where the client-side total went.
        row(out, "server: queue", s.server_queue_ms);
        row(out, "server: prefill", s.server_prefill_ms);
        row(out, "server: decode", s.server_decode_ms);
    }
    let share = s
        .valid_share
        .map_or("-".to_string(), |v| format!("{:.1}%", 100.0 * v));
    let _ = writeln!(
        out,
        "  valid calls {}/{} ({share}); requests with a call {}/{}; missing calls {}; failed requests {}/{}",
        s.valid_calls,
        s.calls + s.missing_calls,
        s.requests_with_call,
        s.requests - s.errors,
        s.missing_calls,
        s.errors,
        s.requests
    );
    if let Some(p) = s.prompt_tokens {
        let _ = writeln!(out, "  prompt tokens (server) p50 {:.0}", p.p50);
    }
    if let Some((accepted, rejected)) = s.drafts {
        let _ = writeln!(
            out,
            "  speculative drafts: {accepted} of {} draft tokens accepted ({:.0}%)",
            accepted + rejected,
            100.0 * accepted as f64 / (accepted + rejected).max(1) as f64
        );
    }
}

fn p50(d: Option<Distribution>) -> String {
    d.map_or("-".into(), |d| format!("{:.1}", d.p50))
}

fn turn_rows(out: &mut String, turns: &[TurnReport]) {
    let _ = writeln!(
        out,
        "  {:<6}{:>12}{:>12}{:>12}{:>12}{:>12}{:>8}",
        "turn", "prompt tok", "ttft p50", "name p50", "call p50", "total p50", "valid"
    );
    for t in turns {
        let tokens = format!(
            "{}{:.0}",
            if t.prompt_tokens_exact { "" } else { "~" },
            t.prompt_tokens
        );
        let s = &t.summary;
        let _ = writeln!(
            out,
            "  {:<6}{:>12}{:>12}{:>12}{:>12}{:>12}{:>8}",
            t.turn,
            tokens,
            p50(s.ttft_ms),
            p50(s.tool_name_ms),
            p50(s.call_complete_ms),
            p50(s.total_ms),
            format!("{}/{}", s.valid_calls, s.calls + s.missing_calls),
        );
    }
}

fn ratio(r: Option<f64>) -> String {
    r.map_or("-".into(), |r| format!("{r:.3}"))
}

/// The terminal table.
pub fn table(report: &Report) -> String {
    let mut out = String::new();
    let run = &report.run;
    let _ = writeln!(
        out,
        "tool-calls bench: scenario {} · {} reps after {} warm-up · concurrency {} · max_tokens {} · {} prompts · {:.1} s",
        run.scenario.name(),
        run.reps,
        run.warmup,
        run.concurrency,
        run.max_tokens,
        if run.nonce { "cold (nonce)" } else { "warm (same)" },
        run.wall_s,
    );
    if let (Some(before), Some(after)) = (&run.load_before, &run.load_after) {
        let _ = writeln!(out, "load average before: {before} · after: {after}");
    }
    for e in &report.endpoints {
        let _ = writeln!(
            out,
            "\n{} {}{} (model {})",
            side_name(e.endpoint.side),
            e.endpoint.url,
            if e.endpoint.local {
                " [agentd, in-process]"
            } else {
                ""
            },
            e.endpoint.model
        );
        summary_rows(&mut out, &e.summary);
        if !e.turns.is_empty() {
            let _ = writeln!(out);
            turn_rows(&mut out, &e.turns);
            let _ = writeln!(
                out,
                "  last turn / first turn, time to complete call (p50): {}",
                ratio(e.last_over_first_turn)
            );
        }
    }
    if let Some(c) = &report.comparison {
        let _ = writeln!(
            out,
            "\nA/B pair by pair ({} pairs, run A B A B …; below 1 A is faster, except tok/s)",
            c.pairs
        );
        let header: Vec<&str> = c.metrics.iter().map(|m| m.metric).collect();
        let _ = write!(out, "  {:<8}", "pair");
        for h in &header {
            let _ = write!(out, "{:>18}", h);
        }
        let _ = writeln!(out);
        let n = c.metrics.first().map_or(0, |m| m.ratios.ratios.len());
        if report.run.scenario.turns() == 1 {
            for i in 0..n {
                let _ = write!(out, "  {:<8}", i + 1);
                for m in &c.metrics {
                    let _ = write!(out, "{:>18}", ratio(m.ratios.ratios[i]));
                }
                let _ = writeln!(out);
            }
        }
        let _ = write!(out, "  {:<8}", "median");
        for m in &c.metrics {
            let _ = write!(out, "{:>18}", ratio(m.ratios.median));
        }
        let _ = writeln!(out);
        if !c.per_turn.is_empty() {
            let _ = writeln!(
                out,
                "  per turn, time to complete call A/B (median of pairs):"
            );
            for t in &c.per_turn {
                let PairedRatios { ratios, median } = &t.call_complete;
                let each: Vec<String> = ratios.iter().map(|r| ratio(*r)).collect();
                let _ = writeln!(
                    out,
                    "    turn {:<3} {:>8}   [{}]",
                    t.turn,
                    ratio(*median),
                    each.join(" ")
                );
            }
        }
    }
    out
}

/// One endpoint's points: (prompt tokens, p50 ms) per turn.
struct PlotLine {
    label: String,
    call: Vec<(f64, f64)>,
    first: Vec<(f64, f64)>,
}

/// Per-turn p50 latency (complete call, and first token dashed) against the prompt size, one line per endpoint.
pub fn plot(report: &Report, path: &Path) -> anyhow::Result<()> {
    let lines: Vec<PlotLine> = report
        .endpoints
        .iter()
        .map(|e| {
            let points = |f: fn(&Summary) -> Option<Distribution>| {
                e.turns
                    .iter()
                    .filter_map(|t| f(&t.summary).map(|d| (t.prompt_tokens, d.p50)))
                    .collect::<Vec<_>>()
            };
            PlotLine {
                label: format!("{} {}", side_name(e.endpoint.side), e.endpoint.url),
                call: points(|s| s.call_complete_ms),
                first: points(|s| s.ttft_ms),
            }
        })
        .collect();
    let all = lines.iter().flat_map(|l| l.call.iter().chain(&l.first));
    let (x_min, x_max, y_max) = all.fold((f64::INFINITY, 1.0f64, 1.0f64), |(lo, hi, y), p| {
        (lo.min(p.0), hi.max(p.0), y.max(p.1))
    });
    // The x axis spans the transcript lengths seen (with a margin), not 0..max: turn 1 is already long.
    let x_min = if x_min.is_finite() { x_min } else { 0.0 };
    let pad = ((x_max - x_min) * 0.05).max(1.0);
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    let draw = || -> Result<(), Box<dyn std::error::Error + '_>> {
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "time to complete tool call (solid) and first token (dashed), p50 per turn",
                ("sans-serif", 18),
            )
            .margin(16)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d((x_min - pad).max(0.0)..x_max + pad, 0.0..y_max * 1.1)?;
        chart
            .configure_mesh()
            .x_desc("transcript length (prompt tokens)")
            .y_desc("latency (ms)")
            .draw()?;
        for (i, PlotLine { label, call, first }) in lines.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(call.iter().copied(), color.stroke_width(2)))?
                .label(label.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
            chart.draw_series(DashedLineSeries::new(
                first.iter().copied(),
                6,
                4,
                color.stroke_width(1),
            ))?;
            chart.draw_series(
                call.iter()
                    .map(|&(x, y)| Circle::new((x, y), 3, color.filled())),
            )?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
        Ok(())
    };
    draw()
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("drawing {}", path.display()))
}

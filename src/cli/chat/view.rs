//! Drawing the chat: the transcript (bottom-anchored, wrapped, scrollable), queued messages, the input editor
//! or an open picker, and the status line (model, session, exact context usage).

use ratatui::layout::{Constraint, Layout, Position, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;
use unicode_width::UnicodeWidthChar;

use super::app::App;
use super::display::{Item, NoticeKind};

const SPINNER: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
/// Output lines a collapsed tool result shows.
const COLLAPSED_LINES: usize = 4;
/// Output lines an expanded tool result shows at most.
const EXPANDED_LINES: usize = 400;
/// Input lines shown before the editor scrolls.
const EDITOR_LINES: usize = 8;

/// Breaks `text` into lines of at most `width` columns, at spaces where possible.
pub fn wrap(text: &str, width: usize) -> Vec<String> {
    let width = width.max(1);
    let mut out = Vec::new();
    for raw in text.split('\n') {
        let mut line = String::new();
        let mut cols = 0usize;
        let mut last_space: Option<(usize, usize)> = None; // (byte index, cols up to it)
        for c in raw.chars() {
            let c = if c == '\t' { ' ' } else { c };
            let w = c.width().unwrap_or(0);
            if cols + w > width && !line.is_empty() {
                if c == ' ' {
                    out.push(std::mem::take(&mut line).trim_end().to_string());
                    cols = 0;
                    last_space = None;
                    continue;
                }
                match last_space {
                    Some((at, at_cols)) if at > 0 => {
                        let rest = line.split_off(at + 1);
                        out.push(line.trim_end().to_string());
                        line = rest;
                        cols -= at_cols + 1;
                    }
                    _ => {
                        out.push(std::mem::take(&mut line));
                        cols = 0;
                    }
                }
                last_space = None;
            }
            if c == ' ' {
                last_space = Some((line.len(), cols));
            }
            line.push(c);
            cols += w;
        }
        out.push(line);
    }
    out
}

fn styled(
    lines: Vec<String>,
    style: Style,
    first_prefix: &str,
    prefix: &str,
) -> Vec<Line<'static>> {
    lines
        .into_iter()
        .enumerate()
        .map(|(i, l)| {
            let p = if i == 0 { first_prefix } else { prefix };
            Line::from(vec![
                Span::styled(p.to_string(), style),
                Span::styled(l, style),
            ])
        })
        .collect()
}

/// Output lines, collapsed or not, with a note on what is hidden.
fn output_lines(output: &str, expanded: bool, width: usize, style: Style) -> Vec<Line<'static>> {
    let output = output.trim_end();
    if output.is_empty() {
        return Vec::new();
    }
    let all: Vec<&str> = output.lines().collect();
    let keep = if expanded {
        EXPANDED_LINES
    } else {
        COLLAPSED_LINES
    };
    let mut wrapped = Vec::new();
    for l in all.iter().take(keep) {
        wrapped.extend(wrap(l, width.saturating_sub(4)));
    }
    let mut lines = styled(wrapped, style, "  │ ", "  │ ");
    if all.len() > keep {
        let hint = if expanded { "" } else { ", Ctrl+O to expand" };
        lines.push(Line::styled(
            format!("  … {} more lines{hint}", all.len() - keep),
            Style::default().fg(Color::DarkGray),
        ));
    }
    lines
}

/// The transcript as lines for `width` columns.
fn transcript_lines(app: &App, width: usize) -> Vec<Line<'static>> {
    let dim = Style::default().fg(Color::DarkGray);
    let mut lines: Vec<Line<'static>> = Vec::new();
    for item in &app.transcript.items {
        match item {
            Item::User(text) => {
                let style = Style::default()
                    .fg(Color::Cyan)
                    .add_modifier(Modifier::BOLD);
                lines.extend(styled(
                    wrap(text, width.saturating_sub(2)),
                    style,
                    "> ",
                    "  ",
                ));
            }
            Item::Assistant { text, thinking } => {
                if !thinking.is_empty() {
                    let style = dim.add_modifier(Modifier::ITALIC);
                    let mut t = wrap(thinking, width.saturating_sub(2));
                    if !app.expand_tools && t.len() > 3 {
                        t.truncate(3);
                        t.push("…".into());
                    }
                    lines.extend(styled(t, style, "  ", "  "));
                }
                if !text.is_empty() {
                    lines.extend(styled(wrap(text, width), Style::default(), "", ""));
                }
            }
            Item::Tool {
                name,
                summary,
                output,
                is_error,
                done,
                ..
            } => {
                let (mark, color) = match (done, is_error) {
                    (false, _) => ("◌", Color::Yellow),
                    (true, false) => ("●", Color::Green),
                    (true, true) => ("✗", Color::Red),
                };
                let header = format!("{mark} {name} {summary}");
                lines.extend(styled(
                    wrap(&header, width),
                    Style::default().fg(color),
                    "",
                    "  ",
                ));
                let style = if *is_error {
                    Style::default().fg(Color::Red)
                } else {
                    dim
                };
                lines.extend(output_lines(output, app.expand_tools, width, style));
            }
            Item::Bash {
                command,
                output,
                exit_code,
                excluded,
            } => {
                let style = Style::default().fg(Color::Magenta);
                lines.extend(styled(
                    wrap(command, width.saturating_sub(2)),
                    style,
                    "$ ",
                    "  ",
                ));
                lines.extend(output_lines(output, app.expand_tools, width, dim));
                let mut notes = Vec::new();
                match exit_code {
                    Some(0) => {}
                    Some(c) => notes.push(format!("exit code {c}")),
                    None => notes.push("killed".to_string()),
                }
                if *excluded {
                    notes.push("not sent to the model".into());
                }
                if !notes.is_empty() {
                    lines.push(Line::styled(format!("  ({})", notes.join(", ")), dim));
                }
            }
            Item::Notice { kind, text } => {
                let style = match kind {
                    NoticeKind::Info => Style::default().fg(Color::Gray),
                    NoticeKind::Error => Style::default().fg(Color::Red),
                };
                lines.extend(styled(wrap(text, width), style, "", ""));
            }
        }
        lines.push(Line::default());
    }
    lines
}

fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The status line's text.
pub fn status_text(app: &App) -> String {
    let backend = app.session.backend();
    let mut parts = vec![
        backend.model_name(),
        format!("session {}", app.session.session_label()),
    ];
    match app.usage {
        Some(u) if u.window > 0 => parts.push(format!(
            "ctx {}/{} ({}%){}",
            thousands(u.tokens),
            thousands(u.window),
            u.tokens * 100 / u.window,
            if u.exact { "" } else { " est." }
        )),
        Some(u) => parts.push(format!("ctx {}", thousands(u.tokens))),
        None => parts.push("ctx …".into()),
    }
    let spin = SPINNER[app.tick % SPINNER.len()];
    if app.running {
        parts.push(format!(
            "{spin} working (Enter steers, Alt+Enter queues, Esc aborts)"
        ));
    } else if let Some(b) = &app.busy {
        parts.push(format!("{spin} {b}"));
    } else {
        parts.push("ready".into());
    }
    parts.join(" · ")
}

pub fn draw(frame: &mut Frame, app: &App) {
    let area = frame.area();
    let width = area.width as usize;
    let queued_rows = app.queued.len().min(3) as u16;
    let bottom_rows = match (app.approvals.front(), &app.picker) {
        (Some(r), _) => r.preview.lines().count().min(APPROVAL_PREVIEW_LINES) as u16 + 2,
        (None, Some(p)) => p.items.len().min(10) as u16 + 1,
        (None, None) => app.editor.lines().len().clamp(1, EDITOR_LINES) as u16,
    };
    let [transcript_area, queued_area, separator_area, input_area, status_area] =
        Layout::vertical([
            Constraint::Min(1),
            Constraint::Length(queued_rows),
            Constraint::Length(1),
            Constraint::Length(bottom_rows),
            Constraint::Length(1),
        ])
        .areas(area);

    // Transcript, anchored to the bottom.
    let lines = transcript_lines(app, width);
    let height = transcript_area.height as usize;
    let max_scroll = lines.len().saturating_sub(height);
    let scroll = app.scroll.min(max_scroll);
    let end = lines.len() - scroll;
    let start = end.saturating_sub(height);
    let visible: Vec<Line> = lines[start..end].to_vec();
    let pad = height.saturating_sub(visible.len()) as u16;
    let text_area = Rect {
        y: transcript_area.y + pad,
        height: transcript_area.height - pad,
        ..transcript_area
    };
    frame.render_widget(Paragraph::new(visible), text_area);

    // Queued steering / follow-up messages.
    let queued: Vec<Line> = app
        .queued
        .iter()
        .take(3)
        .map(|q| {
            let kind = if q.follow_up { "follow-up" } else { "steer" };
            let first: String = q
                .text
                .lines()
                .next()
                .unwrap_or_default()
                .chars()
                .take(width.saturating_sub(14))
                .collect();
            Line::styled(
                format!("⏳ {kind}: {first}"),
                Style::default().fg(Color::Yellow),
            )
        })
        .collect();
    frame.render_widget(Paragraph::new(queued), queued_area);

    let hint = if scroll > 0 {
        format!(" ↑ scrolled {scroll} lines (PgDn) ")
    } else {
        String::new()
    };
    let rule = "─".repeat(width.saturating_sub(hint.chars().count()));
    frame.render_widget(
        Paragraph::new(Line::styled(
            format!("{rule}{hint}"),
            Style::default().fg(Color::DarkGray),
        )),
        separator_area,
    );

    if let Some(request) = app.approvals.front() {
        draw_approval(frame, request, app.approvals.len(), input_area);
    } else {
        match &app.picker {
            Some(p) => draw_picker(frame, p, input_area),
            None => draw_editor(frame, app, input_area),
        }
    }

    frame.render_widget(
        Paragraph::new(Line::styled(
            status_text(app),
            Style::default().fg(Color::DarkGray),
        )),
        status_area,
    );
}

/// Lines of a call's preview shown while it waits for approval (the rest is cut, with a count).
const APPROVAL_PREVIEW_LINES: usize = 14;

/// The call waiting for approval: what it would do (a diff in colour, the command) and the keys.
fn draw_approval(
    frame: &mut Frame,
    request: &agentd::app::approvals::ApprovalRequest,
    waiting: usize,
    area: Rect,
) {
    let width = area.width as usize;
    let more = if waiting > 1 {
        format!(" (+{} more waiting)", waiting - 1)
    } else {
        String::new()
    };
    let mut lines = vec![Line::styled(
        format!(
            "Allow {} ({})?{more}",
            request.tool_name,
            request.tags.join(", ")
        ),
        Style::default()
            .fg(Color::Yellow)
            .add_modifier(Modifier::BOLD),
    )];
    let total = request.preview.lines().count();
    for (i, line) in request.preview.lines().enumerate() {
        if i + 1 == APPROVAL_PREVIEW_LINES && total > APPROVAL_PREVIEW_LINES {
            lines.push(Line::styled(
                format!("… {} more lines", total - i),
                Style::default().fg(Color::DarkGray),
            ));
            break;
        }
        let style = if line.starts_with('+') && !line.starts_with("+++") {
            Style::default().fg(Color::Green)
        } else if line.starts_with('-') && !line.starts_with("---") {
            Style::default().fg(Color::Red)
        } else {
            Style::default()
        };
        let shown: String = line.chars().take(width.max(1)).collect();
        lines.push(Line::styled(shown, style));
    }
    lines.push(Line::styled(
        "y allow · a always (this tool, this session) · n deny",
        Style::default().add_modifier(Modifier::BOLD),
    ));
    frame.render_widget(Paragraph::new(lines), area);
}

fn draw_picker(frame: &mut Frame, p: &super::app::Picker, area: Rect) {
    let rows = area.height.saturating_sub(1) as usize;
    let first = p.selected.saturating_sub(rows.saturating_sub(1));
    let mut lines = vec![Line::styled(
        format!("{} — ↑/↓ Enter Esc", p.title),
        Style::default().add_modifier(Modifier::BOLD),
    )];
    for (i, (label, _)) in p.items.iter().enumerate().skip(first).take(rows) {
        let selected = i == p.selected;
        let style = if selected {
            Style::default().fg(Color::Black).bg(Color::Cyan)
        } else {
            Style::default()
        };
        let mark = if selected { "› " } else { "  " };
        lines.push(Line::styled(format!("{mark}{label}"), style));
    }
    frame.render_widget(Paragraph::new(lines), area);
}

/// The editor, scrolled so the cursor is visible; sets the terminal cursor.
fn draw_editor(frame: &mut Frame, app: &App, area: Rect) {
    let (row, col) = app.editor.cursor();
    let rows = area.height as usize;
    let first_row = row.saturating_sub(rows.saturating_sub(1));
    let usable = (area.width as usize).saturating_sub(3).max(1);
    let mut cursor = None;
    let mut lines = Vec::new();
    for (i, text) in app
        .editor
        .lines()
        .iter()
        .enumerate()
        .skip(first_row)
        .take(rows)
    {
        let prefix = if i == 0 { "> " } else { "  " };
        let chars: Vec<char> = text.chars().collect();
        // Horizontal scroll on the cursor's line only.
        let offset = if i == row {
            col.saturating_sub(usable)
        } else {
            0
        };
        let shown: String = chars.iter().skip(offset).take(usable).collect();
        if i == row {
            let before: usize = chars[offset..col.min(chars.len())]
                .iter()
                .map(|c| c.width().unwrap_or(0))
                .sum();
            cursor = Some(Position::new(
                area.x + 2 + before as u16,
                area.y + (i - first_row) as u16,
            ));
        }
        lines.push(Line::from(vec![
            Span::styled(prefix, Style::default().fg(Color::Cyan)),
            Span::raw(shown),
        ]));
    }
    frame.render_widget(Paragraph::new(lines), area);
    if let Some(p) = cursor {
        frame.set_cursor_position(p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapping_breaks_at_spaces_and_long_words() {
        assert_eq!(wrap("hello world foo", 11), ["hello world", "foo"]);
        assert_eq!(wrap("abcdefghij", 4), ["abcd", "efgh", "ij"]);
        assert_eq!(wrap("a\n\nb", 10), ["a", "", "b"]);
        assert_eq!(wrap("", 5), [""]);
        assert_eq!(thousands(1234567), "1,234,567");
    }
}

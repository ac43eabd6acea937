//! Head and tail truncation: line and byte limits, complete lines, the partial last line.

use agentd::tools::support::truncate::{
    format_size, truncate_head, truncate_line, truncate_tail, Limits, TruncatedBy,
};

fn numbered(n: usize) -> String {
    (1..=n).map(|i| format!("line {i}\n")).collect()
}

#[test]
fn head_keeps_the_first_2000_lines() {
    let t = truncate_head(&numbered(5123), Limits::default());
    assert_eq!(t.truncated_by, Some(TruncatedBy::Lines));
    assert_eq!((t.total_lines, t.output_lines), (5123, 2000));
    assert!(t.content.starts_with("line 1\n"));
    assert!(t.content.ends_with("\nline 2000"));
}

#[test]
fn head_keeps_complete_lines_within_50kb() {
    let line = "x".repeat(999);
    let text = format!("{line}\n").repeat(100);
    let t = truncate_head(&text, Limits::default());
    assert_eq!(t.truncated_by, Some(TruncatedBy::Bytes));
    assert_eq!(t.output_lines, 51, "51 lines of 1000 bytes fit in 51,200");
    assert!(t.content.split('\n').all(|l| l == line));
    assert!(t.output_bytes <= 50 * 1024);
}

#[test]
fn head_reports_a_first_line_over_the_limit() {
    let t = truncate_head(&"y".repeat(60_000), Limits::default());
    assert!(t.first_line_exceeds_limit);
    assert_eq!((t.content.as_str(), t.output_lines), ("", 0));
}

#[test]
fn small_text_is_untouched() {
    let text = "a\nb\n";
    let t = truncate_head(text, Limits::default());
    assert_eq!(
        (t.content.as_str(), t.truncated_by, t.total_lines),
        (text, None, 2)
    );
    assert_eq!(truncate_tail(text, Limits::default()).content, text);
}

#[test]
fn tail_keeps_the_last_lines() {
    let t = truncate_tail(&numbered(5000), Limits::default());
    assert_eq!(t.truncated_by, Some(TruncatedBy::Lines));
    assert_eq!(t.output_lines, 2000);
    assert!(t.content.starts_with("line 3001\n"));
    assert!(t.content.ends_with("line 5000"));
    let small = Limits {
        max_lines: 3,
        max_bytes: 1000,
    };
    assert_eq!(truncate_tail("1\n2\n3\n4\n5\n", small).content, "3\n4\n5");
}

#[test]
fn tail_keeps_the_end_of_one_huge_line() {
    let text = format!("start{}end", "é".repeat(40_000));
    let t = truncate_tail(&text, Limits::default());
    assert!(t.last_line_partial);
    assert!(t.content.ends_with("end"));
    assert!(t.content.len() <= 50 * 1024);
}

#[test]
fn long_lines_are_cut_on_character_boundaries() {
    let (cut, was) = truncate_line(&"ü".repeat(600), 500);
    assert!(was);
    assert_eq!(cut, format!("{}... [truncated]", "ü".repeat(500)));
    assert_eq!(truncate_line("short", 500), ("short".to_string(), false));
    assert_eq!(format_size(50 * 1024), "50.0KB");
    assert_eq!(format_size(12), "12B");
}

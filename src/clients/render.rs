//! The clients' setups as text for a terminal and as Markdown for README (the same content in both).

use std::fmt::Write as _;

use super::{ClientSetup, Served};

/// A shell word: as it is when it needs no quoting, else in single quotes.
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@%+,~".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

fn command_line(setup: &ClientSetup) -> String {
    setup
        .command
        .iter()
        .map(|w| shell_word(w))
        .collect::<Vec<_>>()
        .join(" ")
}

fn exports(setup: &ClientSetup) -> Vec<String> {
    setup
        .env
        .iter()
        .map(|(k, v)| format!("export {k}={}", shell_word(v)))
        .collect()
}

fn heading(served: &Served) -> String {
    format!(
        "model {} at {}, window {} tokens{}",
        served.model,
        served.root,
        served.window,
        if served.api_key.is_some() {
            ", with the server's API key"
        } else {
            ""
        }
    )
}

/// The terminal form.
pub fn text(served: &Served, setups: &[ClientSetup]) -> String {
    let mut out = format!("# agentd clients: {}\n", heading(served));
    for s in setups {
        let _ = writeln!(out, "\n== {} ({})", s.title, s.api);
        for note in &s.notes {
            let _ = writeln!(out, "{note}");
        }
        if !s.env.is_empty() {
            out.push_str("Environment:\n");
            for line in exports(s) {
                let _ = writeln!(out, "  {line}");
            }
        }
        for f in &s.files {
            let moved = f
                .dir_env
                .as_ref()
                .map(|v| format!(", or under ${v}"))
                .unwrap_or_default();
            let _ = writeln!(out, "{}{moved} ({}):", f.path, f.merge);
            for line in f.content.lines() {
                let _ = writeln!(out, "  {line}");
            }
        }
        let _ = writeln!(out, "Run:\n  {}", command_line(s));
    }
    out
}

/// The fence language of a config file.
fn language(path: &str) -> &'static str {
    match path.rsplit('.').next() {
        Some("json") => "json",
        Some("toml") => "toml",
        Some("yaml") | Some("yml") => "yaml",
        _ => "",
    }
}

/// The README form: a subsection per client.
pub fn markdown(served: &Served, setups: &[ClientSetup]) -> String {
    let mut out = format!(
        "`agentd clients` for {} (`--port`, `--model`, a client's name, `--json`):\n",
        heading(served)
    );
    for s in setups {
        let _ = write!(out, "\n### {} — {}\n\n", s.title, s.api);
        for note in &s.notes {
            let _ = writeln!(out, "{note}");
        }
        out.push_str("\n```sh\n");
        for line in exports(s) {
            let _ = writeln!(out, "{line}");
        }
        let _ = writeln!(out, "{}\n```", command_line(s));
        for f in &s.files {
            let moved = f
                .dir_env
                .as_ref()
                .map(|v| format!(", or under `${v}`"))
                .unwrap_or_default();
            let _ = write!(
                out,
                "\n`{}`{moved} ({}):\n\n```{}\n{}```\n",
                f.path,
                f.merge,
                language(&f.path),
                f.content
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_words_are_quoted_only_when_needed() {
        assert_eq!(shell_word("http://127.0.0.1:8080"), "http://127.0.0.1:8080");
        assert_eq!(shell_word("a b"), "'a b'");
        assert_eq!(shell_word("it's"), "'it'\\''s'");
        assert_eq!(shell_word(""), "''");
    }

    #[test]
    fn both_forms_hold_every_file_and_command() {
        let served = super::super::tests::served(32768);
        let setups = super::super::all(&served);
        for form in [text(&served, &setups), markdown(&served, &setups)] {
            for s in &setups {
                assert!(form.contains(&command_line(s)), "{}", s.name);
                for f in &s.files {
                    assert!(form.contains(&f.path), "{}", f.path);
                    for line in f.content.lines().filter(|l| !l.trim().is_empty()) {
                        assert!(form.contains(line), "{}: {line}", f.path);
                    }
                }
            }
        }
    }
}

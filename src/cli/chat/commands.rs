//! Slash commands: parsing (an unknown command is an error message, never a prompt) and the help text.

/// A parsed slash command; the argument is the rest of the line, trimmed (`None` when empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Slash {
    /// Pick or switch the model.
    Model(Option<String>),
    /// Start a new session.
    New,
    /// Pick or open a session of this directory.
    Resume(Option<String>),
    /// A new session from before one of this session's user messages.
    Fork(Option<String>),
    /// Show the session tree, or continue from one of its entries.
    Tree(Option<String>),
    /// Continue from an entry, recording a generated summary of the branch left (picker without one).
    Branch(Option<String>),
    /// Drop the last N messages (summarised at the new position).
    Rewind(usize),
    /// Label an entry (the leaf unless the first word names one); no text clears the label.
    Label(Option<String>),
    /// Name the session, or show its name.
    Name(Option<String>),
    /// Compact the context now, optionally focusing the summary.
    Compact(Option<String>),
    /// Write the session as a self-contained HTML page (or Markdown, for a `.md` file).
    Export(Option<String>),
    Tools,
    Session,
    Help,
    Quit,
}

/// Every command with a one-line description, for `/help` and the error of an unknown one.
pub const COMMANDS: [(&str, &str); 15] = [
    ("/model [NAME]", "pick or switch the model"),
    ("/new", "start a new session"),
    ("/resume [ID]", "pick or open a session of this directory"),
    (
        "/fork [ENTRY]",
        "new session from before one of your messages",
    ),
    (
        "/tree [ENTRY]",
        "show the session tree, or continue from an entry",
    ),
    (
        "/branch [ENTRY]",
        "continue from an entry; the branch left is summarised",
    ),
    (
        "/rewind N",
        "drop the last N messages (summarised, kept in the tree)",
    ),
    (
        "/label [ENTRY] TEXT",
        "bookmark an entry (the latest by default); no text clears",
    ),
    ("/name [NAME]", "name this session (shown in /resume)"),
    ("/compact [FOCUS]", "summarise older messages now"),
    (
        "/export [FILE]",
        "write the session as HTML (or .md) to FILE",
    ),
    ("/tools", "list the tools the model may call"),
    ("/session", "show the session, model and context usage"),
    ("/help", "show commands and keys"),
    ("/quit", "leave (also Ctrl+C twice, Ctrl+D)"),
];

/// The keys, for `/help`.
pub const KEYS: &str = "Enter send (while the agent works: steer) · Alt+Enter follow-up · Ctrl+J newline · \
Esc abort · Ctrl+O expand tool output · PgUp/PgDn scroll · Up/Down history · !cmd run a command for the model · \
!!cmd run it without telling the model";

/// Parses a line starting with `/`.
pub fn parse(line: &str) -> Result<Slash, String> {
    let line = line.trim();
    let (name, rest) = match line.split_once(char::is_whitespace) {
        Some((n, r)) => (n, r.trim()),
        None => (line, ""),
    };
    let arg = (!rest.is_empty()).then(|| rest.to_string());
    let no_arg = |s: Slash| {
        if arg.is_some() {
            Err(format!("{name} takes no argument"))
        } else {
            Ok(s)
        }
    };
    match name {
        "/model" | "/models" => Ok(Slash::Model(arg)),
        "/new" | "/clear" => no_arg(Slash::New),
        "/resume" | "/sessions" => Ok(Slash::Resume(arg)),
        "/fork" => Ok(Slash::Fork(arg)),
        "/tree" => Ok(Slash::Tree(arg)),
        "/branch" => Ok(Slash::Branch(arg)),
        "/rewind" => match arg.as_deref().map(str::parse::<usize>) {
            Some(Ok(n)) if n > 0 => Ok(Slash::Rewind(n)),
            _ => Err("/rewind takes a number of messages, e.g. /rewind 2".into()),
        },
        "/label" => Ok(Slash::Label(arg)),
        "/name" => Ok(Slash::Name(arg)),
        "/compact" => Ok(Slash::Compact(arg)),
        "/export" => Ok(Slash::Export(arg)),
        "/tools" => no_arg(Slash::Tools),
        "/session" => no_arg(Slash::Session),
        "/help" | "/?" => Ok(Slash::Help),
        "/quit" | "/exit" | "/q" => no_arg(Slash::Quit),
        other => Err(format!(
            "unknown command {other} — type /help for the commands"
        )),
    }
}

/// The help text.
pub fn help() -> String {
    let mut s = String::from("Commands:\n");
    for (name, what) in COMMANDS {
        s.push_str(&format!("  {name:<18} {what}\n"));
    }
    s.push_str("Keys: ");
    s.push_str(KEYS);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_parse_and_unknown_ones_are_errors() {
        assert_eq!(parse("/model"), Ok(Slash::Model(None)));
        assert_eq!(
            parse("/model  qwen2.5-coder-0.5b-instruct "),
            Ok(Slash::Model(Some("qwen2.5-coder-0.5b-instruct".into())))
        );
        assert_eq!(
            parse("/compact focus on the tests"),
            Ok(Slash::Compact(Some("focus on the tests".into())))
        );
        assert_eq!(parse("/quit"), Ok(Slash::Quit));
        assert!(parse("/new now").unwrap_err().contains("takes no argument"));
        let err = parse("/frobnicate x").unwrap_err();
        assert!(err.contains("unknown command /frobnicate"), "{err}");
    }
}

//! The input editor: a multi-line text buffer with a cursor and a history of sent inputs. Pure data; the key
//! bindings live in `app.rs`.

/// The editor's text, as lines, and the cursor (line, char index).
#[derive(Debug, Clone)]
pub struct Editor {
    lines: Vec<String>,
    row: usize,
    col: usize,
    history: Vec<String>,
    /// Position while browsing the history (`None`: editing a new input).
    browsing: Option<usize>,
    /// The input that was being edited when history browsing started.
    draft: String,
}

impl Default for Editor {
    fn default() -> Self {
        Self {
            lines: vec![String::new()],
            row: 0,
            col: 0,
            history: Vec::new(),
            browsing: None,
            draft: String::new(),
        }
    }
}

fn byte_at(s: &str, col: usize) -> usize {
    s.char_indices().nth(col).map_or(s.len(), |(i, _)| i)
}

impl Editor {
    pub fn text(&self) -> String {
        self.lines.join("\n")
    }

    pub fn is_empty(&self) -> bool {
        self.lines.len() == 1 && self.lines[0].is_empty()
    }

    pub fn lines(&self) -> &[String] {
        &self.lines
    }

    /// The word that ends at the cursor (after the last whitespace before it, on the cursor's line).
    pub fn word_before_cursor(&self) -> &str {
        let line = &self.lines[self.row];
        let before = &line[..byte_at(line, self.col)];
        let start = before.rfind(char::is_whitespace).map_or(0, |i| {
            i + before[i..].chars().next().map_or(1, char::len_utf8)
        });
        &before[start..]
    }

    /// The cursor as (line, char column).
    pub fn cursor(&self) -> (usize, usize) {
        (self.row, self.col)
    }

    /// Replaces the text; the cursor goes to its end.
    pub fn set_text(&mut self, text: &str) {
        self.lines = text.split('\n').map(str::to_string).collect();
        if self.lines.is_empty() {
            self.lines.push(String::new());
        }
        self.row = self.lines.len() - 1;
        self.col = self.lines[self.row].chars().count();
        self.browsing = None;
    }

    pub fn clear(&mut self) {
        self.set_text("");
    }

    /// Takes the text out (for sending) and remembers it in the history.
    pub fn take(&mut self) -> String {
        let text = self.text();
        if !text.trim().is_empty() && self.history.last() != Some(&text) {
            self.history.push(text.clone());
        }
        self.clear();
        text
    }

    pub fn insert_char(&mut self, c: char) {
        let line = &mut self.lines[self.row];
        let at = byte_at(line, self.col);
        line.insert(at, c);
        self.col += 1;
    }

    /// Inserts text that may hold newlines (a paste).
    pub fn insert_str(&mut self, text: &str) {
        let text = text.replace("\r\n", "\n").replace('\r', "\n");
        for (i, part) in text.split('\n').enumerate() {
            if i > 0 {
                self.newline();
            }
            for c in part.chars() {
                self.insert_char(if c == '\t' { ' ' } else { c });
            }
        }
    }

    pub fn newline(&mut self) {
        let line = &mut self.lines[self.row];
        let at = byte_at(line, self.col);
        let rest = line.split_off(at);
        self.lines.insert(self.row + 1, rest);
        self.row += 1;
        self.col = 0;
    }

    pub fn backspace(&mut self) {
        if self.col > 0 {
            let line = &mut self.lines[self.row];
            let at = byte_at(line, self.col - 1);
            line.remove(at);
            self.col -= 1;
        } else if self.row > 0 {
            let line = self.lines.remove(self.row);
            self.row -= 1;
            self.col = self.lines[self.row].chars().count();
            self.lines[self.row].push_str(&line);
        }
    }

    pub fn delete(&mut self) {
        let len = self.lines[self.row].chars().count();
        if self.col < len {
            let line = &mut self.lines[self.row];
            let at = byte_at(line, self.col);
            line.remove(at);
        } else if self.row + 1 < self.lines.len() {
            let next = self.lines.remove(self.row + 1);
            self.lines[self.row].push_str(&next);
        }
    }

    /// Deletes the word before the cursor (Ctrl+W).
    pub fn delete_word(&mut self) {
        let chars: Vec<char> = self.lines[self.row].chars().collect();
        let mut start = self.col;
        while start > 0 && chars[start - 1].is_whitespace() {
            start -= 1;
        }
        while start > 0 && !chars[start - 1].is_whitespace() {
            start -= 1;
        }
        let kept: String = chars[..start].iter().chain(&chars[self.col..]).collect();
        self.lines[self.row] = kept;
        self.col = start;
    }

    /// Deletes from the line's start to the cursor (Ctrl+U).
    pub fn delete_to_start(&mut self) {
        let line = &mut self.lines[self.row];
        let at = byte_at(line, self.col);
        line.replace_range(..at, "");
        self.col = 0;
    }

    pub fn left(&mut self) {
        if self.col > 0 {
            self.col -= 1;
        } else if self.row > 0 {
            self.row -= 1;
            self.col = self.lines[self.row].chars().count();
        }
    }

    pub fn right(&mut self) {
        if self.col < self.lines[self.row].chars().count() {
            self.col += 1;
        } else if self.row + 1 < self.lines.len() {
            self.row += 1;
            self.col = 0;
        }
    }

    pub fn home(&mut self) {
        self.col = 0;
    }

    pub fn end(&mut self) {
        self.col = self.lines[self.row].chars().count();
    }

    /// Up: the previous line, or (on the first line) the previous history entry.
    pub fn up(&mut self) {
        if self.row > 0 {
            self.row -= 1;
            self.col = self.col.min(self.lines[self.row].chars().count());
            return;
        }
        if self.history.is_empty() {
            return;
        }
        let next = match self.browsing {
            None => {
                self.draft = self.text();
                self.history.len() - 1
            }
            Some(0) => 0,
            Some(i) => i - 1,
        };
        let text = self.history[next].clone();
        self.set_text(&text);
        self.browsing = Some(next);
    }

    /// Down: the next line, or (on the last line) the next history entry / back to the draft.
    pub fn down(&mut self) {
        if self.row + 1 < self.lines.len() {
            self.row += 1;
            self.col = self.col.min(self.lines[self.row].chars().count());
            return;
        }
        match self.browsing {
            None => {}
            Some(i) if i + 1 < self.history.len() => {
                let text = self.history[i + 1].clone();
                self.set_text(&text);
                self.browsing = Some(i + 1);
            }
            Some(_) => {
                let draft = std::mem::take(&mut self.draft);
                self.set_text(&draft);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn editing_and_history() {
        let mut e = Editor::default();
        e.insert_str("héllo\nwörld");
        assert_eq!(e.text(), "héllo\nwörld");
        assert_eq!(e.cursor(), (1, 5));
        e.home();
        e.backspace();
        assert_eq!(e.text(), "héllowörld");
        e.delete_word();
        assert_eq!(e.text(), "wörld");
        e.end();
        e.left();
        e.delete();
        assert_eq!(e.text(), "wörl");
        assert_eq!(e.take(), "wörl");
        assert!(e.is_empty());
        e.insert_str("draft");
        e.up();
        assert_eq!(e.text(), "wörl");
        e.down();
        assert_eq!(e.text(), "draft");
        e.delete_to_start();
        assert!(e.is_empty());
    }
}

//! Settings a change altered that its task does not name. A task that names the setting to change (`change
//! MAX_RETRIES from 3 to 5`) and a change that also altered another top-level setting of the file (`TIMEOUT = 30`
//! → `5`) did more than it was asked: a small model often copies the new value onto the line next to the one it
//! meant. Top-level `KEY = value` (Python, TOML), `KEY=value` (`.env`, shell) and `key: value` (YAML) lines.
//! [`keep_unasked_settings`] puts those lines back as they were.

use std::collections::BTreeMap;

/// A top-level setting line's key and value.
fn setting(line: &str) -> Option<(&str, &str)> {
    if line.starts_with([' ', '\t', '#', '[', '-']) {
        return None;
    }
    let (key, value) = match (line.find('='), line.find(':')) {
        (Some(e), Some(c)) if c < e => line.split_at(c),
        (Some(e), _) => line.split_at(e),
        (None, Some(c)) => line.split_at(c),
        (None, None) => return None,
    };
    let key = key.trim().trim_start_matches("export ").trim();
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.'));
    // `a == b`, `x: int = 3` and keywords are not settings.
    let value = value[1..].trim_start_matches('=').trim();
    (plain && !value.is_empty()).then_some((key, value))
}

fn settings(text: &str) -> BTreeMap<&str, &str> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        if let Some((k, v)) = setting(line) {
            out.entry(k).or_insert(v);
        }
    }
    out
}

/// `(key, value before, value now)` of each top-level setting the change altered that `task` does not name,
/// when the task names another setting the change altered; else nothing.
pub fn unasked_settings(before: &str, after: &str, task: &str) -> Vec<(String, String, String)> {
    let (was, is) = (settings(before), settings(after));
    let changed: Vec<(&str, &str, &str)> = was
        .iter()
        .filter_map(|(k, old)| {
            let new = is.get(k)?;
            (old != new).then_some((*k, *old, *new))
        })
        .collect();
    let named = |key: &str| crate::tools::support::rename_follow::uses_word(task, key);
    if !changed.iter().any(|(k, _, _)| named(k)) {
        return Vec::new();
    }
    changed
        .into_iter()
        .filter(|(k, _, _)| !named(k))
        .map(|(k, old, new)| (k.to_string(), old.to_string(), new.to_string()))
        .collect()
}

/// `after` with the lines of the settings [`unasked_settings`] reports given back their text from `before`, and
/// those settings' keys; `None` when there are none.
pub fn keep_unasked_settings(
    before: &str,
    after: &str,
    task: &str,
) -> Option<(String, Vec<String>)> {
    let unasked = unasked_settings(before, after, task);
    if unasked.is_empty() {
        return None;
    }
    let keys: Vec<String> = unasked.into_iter().map(|(k, _, _)| k).collect();
    let original = |key: &str| {
        before
            .lines()
            .find(|l| setting(l).is_some_and(|(k, _)| k == key))
    };
    let mut kept = String::with_capacity(after.len());
    for line in after.split_inclusive('\n') {
        let body = line.trim_end_matches(['\n', '\r']);
        let old = setting(body)
            .filter(|(k, _)| keys.iter().any(|key| key == k))
            .and_then(|(k, _)| original(k));
        match old {
            Some(old) => {
                kept.push_str(old);
                kept.push_str(&line[body.len()..]);
            }
            None => kept.push_str(line),
        }
    }
    Some((kept, keys))
}

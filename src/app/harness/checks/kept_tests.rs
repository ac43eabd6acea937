//! A change must not weaken the tests: a test file with fewer assertions after the change than before makes a
//! failing test pass by deleting what it checks. Counted on the text with comments and strings blanked
//! ([`super::blank`]), for the test files [`super::commands`] runs (Python and JavaScript).

use std::path::Path;

use super::blank::blank;
use super::commands::is_test_file;
use super::lang::Lang;

/// How many assertions a change took out of the test file `path` (`None` when it is not a test file or none
/// were taken out).
pub fn removed_assertions(path: &str, before: &str, after: &str) -> Option<usize> {
    if !is_test_file(path) {
        return None;
    }
    let lang = Lang::of(Path::new(path));
    let (b, a) = (assertions(lang, before), assertions(lang, after));
    (a < b).then_some(b - a)
}

/// The assertions of a test text: Python's `assert` statements and `self.assert…`/`pytest.raises` calls,
/// JavaScript's `assert…(` and `expect(` calls.
fn assertions(lang: Lang, text: &str) -> usize {
    let code = blank(lang, text);
    let words: &[&str] = match lang {
        Lang::Python => &["assert ", "assert(", ".assert", "pytest.raises("],
        Lang::JavaScript | Lang::JsLike => &["assert(", "assert.", "expect("],
        _ => return 0,
    };
    code.lines()
        .map(|line| {
            words
                .iter()
                .map(|w| {
                    line.match_indices(w)
                        .filter(|(at, _)| {
                            // A word of its own: `assert` not the end of `my_assert`.
                            w.starts_with('.')
                                || !line[..*at]
                                    .chars()
                                    .next_back()
                                    .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.')
                        })
                        .count()
                })
                .sum::<usize>()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEST: &str = "from shop import price\n\nassert price(1) == 2\nassert price(2) == 4, \"assert in a string\"\n# assert in a comment\n\n\ndef test_zero():\n    assert price(0) == 0\n";

    #[test]
    fn a_test_file_that_lost_assertions_is_reported_with_how_many() {
        let weakened = TEST.replace("assert price(1) == 2\n", "");
        assert_eq!(removed_assertions("test_shop.py", TEST, &weakened), Some(1));
        let emptied = "from shop import price\n";
        assert_eq!(removed_assertions("test_shop.py", TEST, emptied), Some(3));
    }

    #[test]
    fn a_changed_expectation_a_source_file_or_more_assertions_is_not_a_loss() {
        let fixed = TEST.replace("== 4", "== 5");
        assert_eq!(removed_assertions("test_shop.py", TEST, &fixed), None);
        let more = format!("{TEST}    assert price(3) == 6\n");
        assert_eq!(removed_assertions("test_shop.py", TEST, &more), None);
        assert_eq!(removed_assertions("shop.py", TEST, "x = 1\n"), None);
        let js = "const assert = require('assert');\nassert.strictEqual(f(1), 2);\nexpect(f(2)).toBe(4);\n";
        assert_eq!(
            removed_assertions("math.test.js", js, "const assert = require('assert');\n"),
            Some(2)
        );
    }
}

use super::*;

const CALC: &str = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n";

#[test]
fn a_changed_function_replaces_only_itself() {
    let p = place(CALC, "def add(a, b):\n    return a + b\n");
    assert_eq!(
        p.text,
        "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
    );
    assert_eq!(p.placement, Placement::Region { start: 1, end: 2 });
    assert!(p.deleted.is_empty());
}

#[test]
fn the_whole_file_is_the_whole_file() {
    let new = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n";
    let p = place(CALC, new);
    assert_eq!(p.text, new);
    assert_eq!(p.placement, Placement::Whole);
}

#[test]
fn a_file_missing_its_tail_keeps_the_tail() {
    let old = "function add(a, b) {\n  return a + b;\n}\n\nfunction subtract(a, b) {\n  return a + b;\n}\n\nmodule.exports = { add, subtract };\n";
    let block = "function add(a, b) {\n  return a + b;\n}\n\nfunction subtract(a, b) {\n  return a - b;\n}\n";
    let p = place(old, block);
    assert_eq!(
        p.text,
        "function add(a, b) {\n  return a + b;\n}\n\nfunction subtract(a, b) {\n  return a - b;\n}\n\nmodule.exports = { add, subtract };\n"
    );
}

#[test]
fn a_changed_line_in_the_middle_of_a_config() {
    let old = "# Settings\nTIMEOUT = 30\nMAX_RETRIES = 3\nUSER_AGENT = \"x/1.0\"\n";
    let p = place(old, "MAX_RETRIES = 5\n");
    assert_eq!(
        p.text,
        "# Settings\nTIMEOUT = 30\nMAX_RETRIES = 5\nUSER_AGENT = \"x/1.0\"\n"
    );
    assert_eq!(p.placement, Placement::Region { start: 3, end: 3 });
}

#[test]
fn lines_left_out_between_matched_lines_are_deleted_and_reported() {
    let old = "a = 1\nb = 2\nc = 3\nd = 4\n";
    let p = place(old, "a = 1\nd = 4\n");
    assert_eq!(p.text, "a = 1\nd = 4\n");
    assert_eq!(p.deleted, vec![2, 3]);
}

#[test]
fn a_block_that_matches_nothing_is_added_at_the_end_of_a_long_file() {
    let old = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef neg(a):\n    return -a\n";
    let p = place(old, "def mul(x, y):\n    return x * y\n");
    assert_eq!(p.placement, Placement::Appended);
    assert!(p.text.starts_with(old), "{}", p.text);
    assert!(
        p.text.ends_with("\n\ndef mul(x, y):\n    return x * y\n"),
        "{}",
        p.text
    );
}

#[test]
fn a_short_file_rewritten_is_whole() {
    let p = place("1.2.3\n", "1.2.4\n");
    assert_eq!(p.text, "1.2.4\n");
    let p = place("hello\n", "completely different\n");
    assert_eq!(p.placement, Placement::Whole);
}

#[test]
fn a_renamed_import_line_is_one_changed_line() {
    let old = "from models import Usr\n\n\ndef make(name):\n    return Usr(name)\n";
    let p = place(old, "from models import User\n");
    assert_eq!(
        p.text,
        "from models import User\n\n\ndef make(name):\n    return Usr(name)\n"
    );
}

#[test]
fn no_trailing_newline_is_kept_as_the_block_has_it() {
    let p = place("x = 1\ny = 2", "y = 3");
    assert_eq!(p.text, "x = 1\ny = 3");
    let p = place("x = 1\ny = 2\nz = 3", "x = 5\n");
    assert_eq!(p.text, "x = 5\ny = 2\nz = 3");
}

#[test]
fn short_lines_with_other_names_are_not_the_same_line() {
    assert!(!similar_lines("x = 1", "y = 3"));
    assert!(similar_lines("y = 2", "y = 3"));
    assert!(similar_lines("\"port\": 8080,", "\"port\": 9000,"));
    assert!(similar_lines("return a - b", "return a + b"));
    assert!(!similar_lines("def add(a, b):", "def mul(x, y):"));
    assert!(similar_lines("def add(a, b):", "def add(a, b, c):"));
}

#[test]
fn a_renamed_definition_replaces_the_old_one() {
    let old = "import os\n\n\ndef fmt_name(first, last):\n    return first + last\n\n\ndef other():\n    return 1\n";
    let p = place(
        old,
        "def format_name(first, last):\n    return first + last\n",
    );
    assert_eq!(
        p.text,
        "import os\n\n\ndef format_name(first, last):\n    return first + last\n\n\ndef other():\n    return 1\n"
    );
}

#[test]
fn a_new_function_before_a_matched_one_does_not_eat_its_neighbour() {
    let old = "def sub(a, b):\n    return a - b\n\n\ndef add(a, b):\n    return a - b\n";
    let p = place(
        old,
        "def new():\n    return 2\n\n\ndef add(a, b):\n    return a + b\n",
    );
    assert_eq!(
        p.text,
        "def sub(a, b):\n    return a - b\n\n\ndef new():\n    return 2\n\n\ndef add(a, b):\n    return a + b\n"
    );
}

#[test]
fn a_one_line_block_replaces_the_line_with_its_key() {
    let old = "HOST=localhost\nDEBUG=true\nPORT=8000\n";
    assert_eq!(
        place(old, "DEBUG=false\n").text,
        "HOST=localhost\nDEBUG=false\nPORT=8000\n"
    );
    let old = "TIMEOUT = 30\nRETRIES = 3\n\n\ndef get():\n    return TIMEOUT\n";
    assert_eq!(
        place(old, "TIMEOUT_SECONDS = 30\nRETRIES = 3\n").text,
        "TIMEOUT_SECONDS = 30\nRETRIES = 3\n\n\ndef get():\n    return TIMEOUT\n"
    );
}

#[test]
fn a_variable_renamed_on_every_line_of_a_function() {
    let old = "def summarize(values):\n    tmp = 0\n    for v in values:\n        tmp += v\n    return \"total: %d\" % tmp\n";
    let new = "def summarize(values):\n    total = 0\n    for v in values:\n        total += v\n    return \"total: %d\" % total\n";
    assert_eq!(place(old, new).text, new);
    let with_tail = format!("{old}\n\ndef other():\n    return 1\n");
    assert_eq!(
        place(&with_tail, new).text,
        format!("{new}\n\ndef other():\n    return 1\n")
    );
}

#[test]
fn a_new_function_in_a_short_file_is_added_not_swapped_in() {
    let old = "def half(x):\n    return x / 2\n";
    let p = place(old, "def double(x):\n    return x * 2\n");
    assert_eq!(p.placement, Placement::Appended);
    assert_eq!(
        p.text,
        "def half(x):\n    return x / 2\n\ndef double(x):\n    return x * 2\n"
    );
}

#[test]
fn new_constants_are_added_and_a_renamed_one_replaces_its_line() {
    let p = place("MIN_SIZE = 1\n", "MAX_SIZE = 100\n");
    assert_eq!(p.placement, Placement::Appended);
    assert_eq!(p.text, "MIN_SIZE = 1\n\nMAX_SIZE = 100\n");
    // The same value under a new name is a rename; a file that is not all assignments is not this rule.
    assert_eq!(
        place("TIMEOUT = 30\n", "TIMEOUT_SECONDS = 30\n").text,
        "TIMEOUT_SECONDS = 30\n"
    );
    assert_eq!(
        place("1.2.3\n", "VERSION = 2\n").placement,
        Placement::Whole
    );
    assert!(!adds_assignments(&["x == 1"], &["y = 2"]));
}

#[test]
fn a_rewritten_last_statement_replaces_the_old_one() {
    let old = "import util\n\n\ndef run():\n    return 0\n";
    let block = "import util\n\n\ndef run():\n    return util.double(21)\n";
    assert_eq!(place(old, block).text, block);
    let old = "def run():\n    return 0\n\n\ndef other():\n    return 1\n";
    assert_eq!(
        place(old, "def run():\n    return util.double(21)\n").text,
        "def run():\n    return util.double(21)\n\n\ndef other():\n    return 1\n"
    );
}

#[test]
fn empty_old_file_takes_the_block() {
    let p = place("", "new\n");
    assert_eq!(p.text, "new\n");
    assert_eq!(p.placement, Placement::Whole);
}

#[test]
fn a_body_that_ends_in_return_replaces_the_stub_it_follows() {
    let old = "def slug(t):\n    \"\"\"A slug.\"\"\"\n    raise NotImplementedError\n\n\ndef path(t):\n    return \"/\" + slug(t)\n";
    let block = "def slug(t):\n    \"\"\"A slug.\"\"\"\n    return t.lower()\n";
    let p = place(old, block);
    assert_eq!(
        p.text,
        "def slug(t):\n    \"\"\"A slug.\"\"\"\n    return t.lower()\n\n\ndef path(t):\n    return \"/\" + slug(t)\n"
    );
    // A method: the next method (indented less than the body) stays.
    let old = "class Q:\n    def peek(self):\n        pass\n        raise NotImplementedError\n\n    def pop(self):\n        return 1\n";
    let p = place(old, "    def peek(self):\n        return self.items[0]\n");
    assert_eq!(
        p.text,
        "class Q:\n    def peek(self):\n        return self.items[0]\n\n    def pop(self):\n        return 1\n"
    );
    // A block that adds a statement before an existing return keeps what follows it.
    let old = "def f(x):\n    y = x\n    return y\n";
    let p = place(old, "def f(x):\n    y = x\n    log(y)\n");
    assert_eq!(p.text, "def f(x):\n    y = x\n    log(y)\n    return y\n");
}

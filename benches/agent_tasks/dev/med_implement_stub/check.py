import re

src = open("text_utils.py").read()
assert not re.search(r"raise\s+NotImplementedError", src), "the stub's raise NotImplementedError is still there"
import blog
from text_utils import slugify, truncate, word_count

cases = {
    "Hello, World!": "hello-world",
    "  Rust 1.80 is out  ": "rust-1-80-is-out",
    "Why I --- love   Python": "why-i-love-python",
    "already-a-slug": "already-a-slug",
    "!!!Tabs\tand\nnewlines???": "tabs-and-newlines",
    "ABC": "abc",
}
for title, want in cases.items():
    got = slugify(title)
    assert got == want, "slugify(%r) == %r, expected %r" % (title, got, want)
assert truncate("hello world", 5) == "he..." and word_count("a b  c") == 3
s = blog.summary({"date": (2024, 3), "title": "My First Post", "body": "one two three"})
assert s == {"path": "/2024/03/my-first-post", "teaser": "one two three", "words": 3}, s
print("ok")

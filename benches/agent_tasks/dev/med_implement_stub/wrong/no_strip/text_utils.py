"""Small helpers for titles and summaries on the blog."""

import re


def word_count(text):
    """Number of whitespace-separated words."""
    return len(text.split())


def truncate(text, limit):
    """text cut to at most `limit` characters, ending in "..." when it was cut."""
    if len(text) <= limit:
        return text
    return text[: max(limit - 3, 0)].rstrip() + "..."


def slugify(title):
    """A URL slug for `title`: lowercase ASCII letters and digits, every run of other characters turned into a
    single "-", and no "-" at the start or the end. slugify("Hello, World!") == "hello-world"."""
    return re.sub(r"[^a-z0-9]+", "-", title.lower())


def post_path(date, title):
    """The URL path of a post: /YYYY/MM/slug."""
    return "/%04d/%02d/%s" % (date[0], date[1], slugify(title))

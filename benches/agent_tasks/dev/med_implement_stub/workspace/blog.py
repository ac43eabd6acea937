from text_utils import post_path, truncate, word_count


def summary(post):
    return {
        "path": post_path(post["date"], post["title"]),
        "teaser": truncate(post["body"], 40),
        "words": word_count(post["body"]),
    }

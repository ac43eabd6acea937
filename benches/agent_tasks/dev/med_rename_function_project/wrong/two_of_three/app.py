"""The app's entry point."""

from settings import is_debug, load_config


def address(text):
    cfg = load_config(text)
    return "%s:%s" % (cfg["host"], cfg["port"])


def banner(text):
    cfg = load_config(text)
    mode = "debug" if is_debug(cfg) else "production"
    return "serving on %s (%s)" % (address(text), mode)

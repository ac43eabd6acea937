"""Reading the app's settings from a simple KEY=VALUE file."""

DEFAULTS = {"host": "localhost", "port": "8000", "debug": "false"}


def load_config(text):
    """Settings from KEY=VALUE lines over the defaults; blank lines and # comments are skipped."""
    values = dict(DEFAULTS)
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition("=")
        values[key.strip().lower()] = value.strip()
    return values


def is_debug(values):
    return values.get("debug", "false").lower() in ("1", "true", "yes")

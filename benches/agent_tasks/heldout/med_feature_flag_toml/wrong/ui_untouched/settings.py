"""The app's settings, read once from config.toml."""

import os
import tomllib

_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "config.toml")

with open(_PATH, "rb") as _f:
    _CONFIG = tomllib.load(_f)

APP_NAME = _CONFIG["app"]["name"]
DEBUG = _CONFIG["app"]["debug"]

SYNC = _CONFIG["features"]["sync"]
MARKDOWN_PREVIEW = _CONFIG["features"]["markdown_preview"]
OFFLINE_MODE = _CONFIG["features"]["offline_mode"]
DARK_MODE = _CONFIG["features"]["dark_mode"]

MAX_NOTE_KB = _CONFIG["limits"]["max_note_kb"]


def enabled_features():
    return sorted(name for name, on in _CONFIG["features"].items() if on)

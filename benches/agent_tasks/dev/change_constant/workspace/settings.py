# Settings for the downloader.
TIMEOUT_SECONDS = 30
MAX_RETRIES = 3
USER_AGENT = "downloader/1.0"

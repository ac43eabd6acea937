import settings

assert settings.MAX_RETRIES == 5, "MAX_RETRIES should be 5, is %r" % settings.MAX_RETRIES
assert settings.TIMEOUT_SECONDS == 30
assert settings.USER_AGENT == "downloader/1.0"
print("ok")

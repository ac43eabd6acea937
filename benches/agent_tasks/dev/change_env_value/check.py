lines = [l.strip() for l in open(".env").read().strip().splitlines() if l.strip()]
assert "DEBUG=false" in lines, "DEBUG is not false: %r" % lines
assert lines == ["APP_NAME=shop", "DEBUG=false", "PORT=5000"], "other lines changed: %r" % lines
print("ok")

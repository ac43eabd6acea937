import re

for f in ("config.py", "client.py", "server.py"):
    assert not re.search(r"\bTIMEOUT\b", open(f).read()), "TIMEOUT is still in " + f
import client
import config
import server

assert config.TIMEOUT_SECONDS == 30
assert client.client_timeout() == 30 and server.server_timeout() == 60
print("ok")

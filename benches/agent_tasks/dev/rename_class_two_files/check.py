import re

for f in ("models.py", "service.py"):
    assert not re.search(r"\bUsr\b", open(f).read()), "Usr is still in " + f
import models
import service

assert models.User("ada").label() == "user:ada"
assert type(service.make("bob")).__name__ == "User"
print("ok")

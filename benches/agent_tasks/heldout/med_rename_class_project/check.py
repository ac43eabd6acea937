import re

for f in ("models.py", "store.py", "report.py"):
    assert not re.search(r"\bUserRecord\b", open(f).read()), "UserRecord is still in " + f
import models
import report
import store

assert isinstance(models.Account, type), "models.py has no class Account"
s = store.Store()
a = s.add("Ada", "Ada@example.org", roles=["admin"])
assert type(a) is models.Account
s.add("Bob", "bob@example.org")
s.add("Cy", "cy@example.org", roles=["admin"])
s.deactivate("cy@example.org")
assert report.admin_report(s) == "Ada <Ada@example.org>", report.admin_report(s)
assert [r.name for r in report.active_users(s)] == ["Ada", "Bob"]
d = report.describe(s.get("cy@example.org"))
assert d in ("Account Cy <cy@example.org> (inactive)",), d
print("ok")

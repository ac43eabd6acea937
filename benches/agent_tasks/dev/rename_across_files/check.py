import app
import helpers

for f in ("helpers.py", "app.py"):
    assert "fmt_name" not in open(f).read(), "the old name fmt_name is still in " + f
assert helpers.format_name(" ada ", "LOVELACE") == "Ada Lovelace"
assert app.welcome("alan", "turing") == "Welcome, Alan Turing!"
print("ok")

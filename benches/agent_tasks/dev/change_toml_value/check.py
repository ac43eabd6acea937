import tomllib

with open("pyproject.toml", "rb") as f:
    conf = tomllib.load(f)
assert conf["project"]["version"] == "0.2.0", "version is %r" % conf["project"].get("version")
assert conf == {"project": {"name": "demo", "version": "0.2.0", "description": "A demo package"},
                "tool": {"demo": {"verbose": False}}}, "other values changed: %r" % conf
print("ok")

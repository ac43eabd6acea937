import tomllib
c = tomllib.load(open("config.toml", "rb"))
assert c["debug"] is True, c
assert c["name"] == "shop" and c["port"] == 8000, c
print("ok")

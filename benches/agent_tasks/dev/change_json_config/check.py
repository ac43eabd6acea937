import json

with open("config.json") as f:
    conf = json.load(f)
assert conf.get("port") == 9000, "port should be 9000, is %r" % conf.get("port")
assert conf == {"host": "127.0.0.1", "port": 9000, "debug": False, "workers": 4}, "other keys must not change: %r" % conf
print("ok")

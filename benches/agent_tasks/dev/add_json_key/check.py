import json

conf = json.load(open("settings.json"))
assert conf.get("timeout") == 30, "timeout is %r" % conf.get("timeout")
assert conf == {"name": "api", "retries": 2, "timeout": 30}, "other keys changed: %r" % conf
print("ok")

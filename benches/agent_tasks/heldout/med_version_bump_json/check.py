import json
import os

task = os.path.join(os.environ["TASK_DIR"], "workspace")


def load(path):
    with open(path) as f:
        return json.load(f)


api = load("services/api/package.json")
want = load(os.path.join(task, "services/api/package.json"))
assert api.get("version") == "2.3.10", "services/api/package.json version is %r" % api.get("version")
want["version"] = "2.3.10"
assert api == want, "services/api/package.json changed beyond its version: %s" % api
for path in ("package.json", "services/worker/package.json", "packages/common/package.json"):
    assert load(path) == load(os.path.join(task, path)), path + " was changed"
print("ok")

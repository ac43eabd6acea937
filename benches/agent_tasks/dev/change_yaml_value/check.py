lines = [l.rstrip() for l in open("deploy.yaml").read().strip().splitlines()]
assert "replicas: 3" in lines, "no `replicas: 3` line in deploy.yaml: %r" % lines
assert lines == ["name: web", "image: web:1.4", "replicas: 3", "env:", "  LOG_LEVEL: info"], \
    "other lines changed: %r" % lines
print("ok")

import os

task = os.path.join(os.environ["TASK_DIR"], "workspace")


def lines(path):
    return open(path).read().splitlines()


def diff(path):
    old, new = lines(os.path.join(task, path)), lines(path)
    assert len(old) == len(new), "%s: lines were added or removed" % path
    return [(a, b) for a, b in zip(old, new) if a != b]


assert "8080" not in open("config/app.yaml").read(), "config/app.yaml still has 8080"
assert "8080" not in open("deploy/compose.yaml").read(), "deploy/compose.yaml still has 8080"
d = diff("config/app.yaml")
assert [b.strip() for _, b in d] == ["port: 8081"], "config/app.yaml: unexpected changes %s" % d
assert d[0][1].startswith("  port"), "the service port moved out of its section"
d = diff("deploy/compose.yaml")
new = {b.strip() for _, b in d}
assert len(d) == 2, "deploy/compose.yaml: expected the ports line and the health check to change, got %s" % d
assert '- "8081:8081"' in new, "compose ports is not 8081:8081: %s" % d
assert any("http://localhost:8081/health" in b for b in new), "the health check still probes another port: %s" % d
assert "9100" in open("config/app.yaml").read() and '"5432:5432"' in open("deploy/compose.yaml").read()
print("ok")

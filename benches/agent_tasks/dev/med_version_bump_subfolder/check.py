import os
import re
import tomllib

task = os.path.join(os.environ["TASK_DIR"], "workspace")


def same(path):
    return open(path).read() == open(os.path.join(task, path)).read()


with open("packages/core/pyproject.toml", "rb") as f:
    core = tomllib.load(f)
assert core["project"]["version"] == "1.5.0", "core's pyproject.toml version is %r" % core["project"]["version"]
assert core["project"]["name"] == "shop-core" and core["tool"]["setuptools"]["packages"] == ["shop_core"]
init = open("packages/core/shop_core/__init__.py").read()
m = re.search(r"^__version__ = [\"']([^\"']+)[\"']", init, re.M)
assert m and m.group(1) == "1.5.0", "shop_core/__init__.py still says %r" % (m and m.group(1))
assert "from .cart import Cart" in init
for path in ("packages/web/pyproject.toml", "packages/web/shop_web/__init__.py", "packages/core/shop_core/cart.py"):
    assert same(path), path + " was changed"
print("ok")

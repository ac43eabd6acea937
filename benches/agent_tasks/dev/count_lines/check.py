import os

assert os.path.exists("count.txt"), "count.txt was not created"
text = open("count.txt").read().strip()
assert text.split()[0] == "7", "count.txt holds %r (data.csv has 7 lines)" % text
print("ok")

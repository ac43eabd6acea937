import os

assert os.path.exists("worst.txt"), "worst.txt was not created"
text = open("worst.txt").read().strip()
assert text, "worst.txt is empty"
name = os.path.basename(text.split()[0])
assert name == "worker.log", "worst.txt names %r; worker.log has the most ERROR lines" % text
print("ok")

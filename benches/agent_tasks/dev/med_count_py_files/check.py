import os

assert os.path.exists("answer.txt"), "answer.txt was not created"
text = open("answer.txt").read().strip()
assert text, "answer.txt is empty"
assert text.split()[0].rstrip(".") == "9", "answer.txt holds %r (src/ has 9 .py files)" % text
print("ok")

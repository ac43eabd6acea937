import os

assert os.path.exists("todo_count.txt"), "todo_count.txt was not created"
text = open("todo_count.txt").read().strip()
assert text, "todo_count.txt is empty"
assert text.split()[0].rstrip(".") == "5", "todo_count.txt holds %r (5 lines of .py files contain TODO)" % text
print("ok")

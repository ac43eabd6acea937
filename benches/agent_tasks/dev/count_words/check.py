import os
assert os.path.exists("word_count.txt")
assert open("word_count.txt").read().split()[0] == "5", open("word_count.txt").read()
assert open("words.txt").read() == "alpha beta gamma\ndelta epsilon\n", "words.txt changed"
print("ok")

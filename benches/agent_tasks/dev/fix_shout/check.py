import text
assert text.shout("hi") == "HI", text.shout("hi")
assert text.whisper("HI") == "hi"
print("ok")

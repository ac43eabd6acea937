from pricing import discounted

assert discounted(200) == 180
print("ok")

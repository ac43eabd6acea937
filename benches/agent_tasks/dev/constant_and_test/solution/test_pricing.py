from pricing import discounted

assert discounted(200) == 170
print("ok")

import greet

assert greet.greet("Ada") == "Hello, Ada!", "greet('Ada') is %r" % greet.greet("Ada")
assert greet.bye("Ada") == "Goodbye, Ada."
print("ok")

print("hi " + "there")

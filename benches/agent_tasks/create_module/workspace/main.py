print("units demo")

total = sum(i * i for i in range(1, 8))
print(total)

def main():
    print('hi')

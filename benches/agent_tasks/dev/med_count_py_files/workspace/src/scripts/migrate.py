print('migrate')

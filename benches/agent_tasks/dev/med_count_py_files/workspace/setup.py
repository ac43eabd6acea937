from setuptools import setup
setup(name='app')

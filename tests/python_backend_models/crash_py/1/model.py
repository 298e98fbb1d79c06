"""The stub process exits in the middle of execute."""

import os


class TritonPythonModel:
    def execute(self, requests):
        os._exit(3)

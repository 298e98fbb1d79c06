"""A syntax error: the stub cannot import this file."""


class TritonPythonModel:
    def execute(self, requests)
        return []
